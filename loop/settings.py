"""Loopwork's own knobs, read once at the edge (CLI, worker), never on import.

The Temporal connection is not here: it follows Temporal's client config
(``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, profiles), see ``loop.client``.
Whatever changes a workflow's behaviour enters the workflow as input instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel

from loop.errors import BadInput


class Settings(BaseModel):
    home: Path
    """LOOP_HOME: worktrees, runs, notes, the embedded server's database."""
    task_queue: str = "loop"
    webhook_url: str | None = None
    """Escalations are POSTed here as JSON (Slack-compatible ``text`` included)."""
    max_activities: int = 20
    """Activities one worker runs at once (agents, gates, model calls)."""
    workflow_cache: int = 250
    """Workflows a worker keeps in memory; parked tasks beyond it cost nothing (replayed
    on their next signal). Bounds a worker's memory: about 280 KiB per cached task."""
    metrics_bind: str | None = None
    """host:port where the worker serves Prometheus metrics (SDK and worker metrics)."""

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        home = Path(env.get("LOOP_HOME") or ".loop").expanduser().resolve()
        return cls(
            home=home,
            task_queue=env.get("LOOP_TASK_QUEUE") or "loop",
            webhook_url=env.get("LOOP_WEBHOOK_URL") or None,
            max_activities=_count(env, "LOOP_MAX_ACTIVITIES", 20),
            workflow_cache=_count(env, "LOOP_WORKFLOW_CACHE", 250),
            metrics_bind=env.get("LOOP_METRICS_BIND") or None,
        )

    @property
    def worktrees(self) -> Path:
        return self.home / "worktrees"

    @property
    def runs(self) -> Path:
        return self.home / "runs"

    @property
    def locks(self) -> Path:
        return self.home / "locks"

    @property
    def notes(self) -> Path:
        return self.home / "notes.md"

    @property
    def memory(self) -> Path:
        return self.home / "memory.json"

    @property
    def db(self) -> Path:
        return self.home / "temporal.db"


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise BadInput(f"{name}={raw!r} must be a whole number of at least 1")
    return int(raw)
