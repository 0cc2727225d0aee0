"""The names Temporal registers an activity or a workflow under.

temporalio has no public accessor for a definition's name; this module is the one
place the tests read it (from the SDK's ``_Definition``), so a change in the SDK is
one edit here.
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import activity, workflow


def activity_name(fn: Callable) -> str:
    """The name ``fn`` (decorated with ``@activity.defn``) is registered under."""
    return activity._Definition.must_from_callable(fn).name


def workflow_name(cls: type) -> str:
    """The name ``cls`` (decorated with ``@workflow.defn``) is registered under."""
    return workflow._Definition.must_from_class(cls).name
