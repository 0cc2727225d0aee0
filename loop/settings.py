"""Loopwork's own knobs, read once at the edge (CLI, worker), never on import.

The Temporal connection is not here: it follows Temporal's client config
(``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, profiles), see ``loop.client``.
Whatever changes a workflow's behaviour enters the workflow as input instead.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel


class Settings(BaseModel):
    home: Path
    """LOOP_HOME: worktrees, runs, notes, the embedded server's database."""
    task_queue: str = "loop"
    webhook_url: str | None = None
    """Escalations are POSTed here as JSON (Slack-compatible ``text`` included)."""

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        home = Path(env.get("LOOP_HOME") or ".loop").expanduser().resolve()
        return cls(
            home=home,
            task_queue=env.get("LOOP_TASK_QUEUE") or "loop",
            webhook_url=env.get("LOOP_WEBHOOK_URL") or None,
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
