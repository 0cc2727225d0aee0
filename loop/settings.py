"""Loopwork's own knobs, read once at the edge (CLI, worker), never on import.

The Temporal connection is not here: it follows Temporal's client config
(``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, profiles), see ``loop.client``.
Whatever changes a workflow's behaviour enters the workflow as input instead.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, model_validator

from loop.errors import BadInput
from loop.hardened.answers import KEY_ENV, KEY_NAME


class Settings(BaseModel):
    home: Path
    """LOOP_HOME: worktrees, runs, notes, the embedded server's database."""
    task_queue: str = "loop"
    """The task queue workers serve and tasks are started on."""
    webhook_url: str | None = None
    """Escalations are POSTed here as JSON (Slack-compatible ``text`` included)."""
    max_activities: int = 20
    """Activities one worker runs at once (agents, gates, model calls)."""
    workflow_cache: int = 250
    """Workflows a worker keeps in memory; parked tasks beyond it cost nothing (replayed
    on their next signal). Bounds a worker's memory: about 280 KiB per cached task."""
    metrics_bind: str | None = None
    """host:port where the worker serves Prometheus metrics (SDK and worker metrics)."""
    host_id: str = ""
    """Which host this worker is: its worktrees and runs are here and nowhere else
    (LOOP_HOST_ID; default the host name and a short hash of LOOP_HOME)."""
    host_lost_after: float = 60.0
    """Seconds a host's queue may go unpolled before its tasks count it lost."""
    endpoint_wait: float = 60.0
    """Seconds explore waits for a model endpoint that does not answer (at most 60)."""
    answer_key_file: Path | None = None
    """LOOP_ANSWER_KEY_FILE: the key answers are signed with (``loop.hardened.answers``);
    unset, ``LOOP_HOME/answer.key`` if it exists (``loop dev`` and ``loop demo`` make it)."""
    slack_token_file: Path | None = None
    """LOOP_SLACK_BOT_TOKEN_FILE: a file holding the Slack app's bot token (``xoxb-…``).
    With ``LOOP_SLACK_CHANNEL`` on a worker, each wait for a person posts a message with
    answer buttons there; ``loop ui`` needs it too, to open the modals that ask for a
    reason (see [In Slack](../guides/slack.md))."""
    slack_channel: str = ""
    """LOOP_SLACK_CHANNEL: the id of the channel (``C0123…``) the worker posts to (the app
    must be a member of it); or a channel per repository, ``REPO=CHANNEL`` entries
    separated by commas (``REPO`` as a task file names it, a path or a URL), with a
    bare channel as the default for the others."""
    slack_api_url: str = "https://slack.com/api/"
    """LOOP_SLACK_API_URL: Slack's Web API, for the worker and ``loop ui`` (another only
    for a proxy or a test's stand-in)."""

    review_url: str | None = None
    """LOOP_REVIEW_URL: the review page (``loop ui``) as people reach it; a task's status
    comment on GitHub links to its page there."""

    @model_validator(mode="after")
    def _a_host_always(self) -> Settings:
        if not self.host_id:
            self.host_id = _host_id(None, self.home)
        return self

    @property
    def answer_key(self) -> Path | None:
        """The answer key's file: the one named, else ``LOOP_HOME/answer.key`` if there."""
        if self.answer_key_file is not None:
            return self.answer_key_file
        default = self.home / KEY_NAME
        return default if default.is_file() else None

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
            host_id=_host_id(env.get("LOOP_HOST_ID"), home),
            host_lost_after=_count(env, "LOOP_HOST_LOST_AFTER", 60),
            endpoint_wait=min(_count(env, "LOOP_ENDPOINT_WAIT", 60), 60),
            answer_key_file=Path(env[KEY_ENV]) if env.get(KEY_ENV) else None,
            slack_token_file=(
                Path(env["LOOP_SLACK_BOT_TOKEN_FILE"])
                if env.get("LOOP_SLACK_BOT_TOKEN_FILE")
                else None
            ),
            slack_channel=env.get("LOOP_SLACK_CHANNEL") or "",
            slack_api_url=env.get("LOOP_SLACK_API_URL") or "https://slack.com/api/",
            review_url=env.get("LOOP_REVIEW_URL") or None,
        )

    def slack_channel_for(self, repo: str) -> str:
        """The channel a task on ``repo`` posts to ("" when none is named for it)."""
        default = ""
        for entry in filter(None, (e.strip() for e in self.slack_channel.split(","))):
            named, sep, channel = entry.rpartition("=")
            if not sep:
                default = entry
            elif _same_repo(named.strip(), repo):
                return channel.strip()
        return default

    @property
    def host_queue(self) -> str:
        """The task queue of this host's worktree activities."""
        return f"{self.task_queue}@{self.host_id}"

    @property
    def repos(self) -> Path:
        """Bare mirrors of the remote repositories tasks work on, one per URL."""
        return self.home / "repos"

    @property
    def workers(self) -> Path:
        """One lease file per worker process: what it runs, for the next one to fail fast."""
        return self.home / "workers"

    @property
    def worktrees(self) -> Path:
        return self.home / "worktrees"

    @property
    def stores(self) -> Path:
        """Stores of base history, one per repository, that tasks' clones borrow from."""
        return self.home / "stores"

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


def _same_repo(named: str, repo: str) -> bool:
    """A repository as a person names it in a variable and as a task file resolved it."""
    if "://" in named or "://" in repo:
        return named.rstrip("/").removesuffix(".git") == repo.rstrip("/").removesuffix(".git")
    return Path(named).expanduser().resolve() == Path(repo).expanduser().resolve()


_HOST_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def _host_id(given: str | None, home: Path) -> str:
    """Two workers with different homes on one machine are two hosts; replicas of one
    host share the id (and the home)."""
    if given:
        if not _HOST_ID.fullmatch(given):
            raise BadInput(
                f"LOOP_HOST_ID={given!r} must be letters, digits, '.', '_' or '-' (at most 63)"
            )
        return given
    name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:48] or "host"
    digest = hashlib.sha1(str(home).encode(), usedforsecurity=False).hexdigest()[:6]
    return f"{name}-{digest}"


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise BadInput(f"{name}={raw!r} must be a whole number of at least 1")
    return int(raw)
