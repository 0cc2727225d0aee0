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
from temporalio.testing import WorkflowEnvironment

from loop.settings import Settings
from tests.support.repos import make_demo_repo
from tests.support.temporal import local_server


@pytest_asyncio.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    """One real dev server for the session (``tests.support.temporal.local_server``)."""
    async with local_server() as e:
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
