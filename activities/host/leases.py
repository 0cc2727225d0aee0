"""What each worker process is running, so the next worker of the host fails it at once.

A ``kill -9`` of a worker is otherwise noticed when its activities' heartbeat
timeout runs out (5 s), and a retry waits for that. Each worker process keeps a
lease file in ``LOOP_HOME/workers/`` (its pid and start time, and the task token
of every activity it runs). A worker that starts reads the files of processes
that are gone, fails each of their activities through its task token (the token
names the attempt, so an attempt that already timed out, or a retry already
running elsewhere, is left alone) and resets the sticky queue of their
workflows, so the retry starts in well under a second instead of after the
heartbeat timeout. Replicas of one host share ``LOOP_HOME`` and so see each
other's leases; other hosts never do.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import ResetStickyTaskQueueRequest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from activities.host.proc import start_time

WORKER_DIED = "LoopWorkerDied"
RETRY_AT_ONCE = timedelta(milliseconds=50)
"""Instead of the step's first backoff: nothing is wrong with the step, its worker died."""


@dataclass
class Lease:
    """This process's lease file; ``begin``/``end`` around every activity."""

    folder: Path
    pid: int = field(default_factory=os.getpid)
    running: dict[str, dict[str, str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    started: str | None = field(default=None, init=False)
    """This process's start time, read once: it is written around every activity."""

    @property
    def path(self) -> Path:
        return self.folder / f"{self.pid}.json"

    def begin(self, token: bytes, workflow_id: str, run_id: str, activity: str) -> str:
        key = base64.b64encode(token).decode()
        with self.lock:
            self.running[key] = {"workflow_id": workflow_id, "run_id": run_id, "activity": activity}
            self._write()
        return key

    def end(self, key: str) -> None:
        with self.lock:
            self.running.pop(key, None)
            self._write()

    def _write(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.started is None:
            self.started = start_time(self.pid)
        record = {"pid": self.pid, "start": self.started, "running": self.running}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, self.path)

    def close(self) -> None:
        with self.lock:
            self.running.clear()
            self.path.unlink(missing_ok=True)


@dataclass
class Orphan:
    token: str
    workflow_id: str
    run_id: str
    activity: str
    pid: int


def orphans(folder: Path) -> tuple[list[Orphan], list[Path]]:
    """The activities of worker processes that are gone, and their lease files."""
    found: list[Orphan] = []
    files: list[Path] = []
    for file in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            record = json.loads(file.read_text())
            pid = int(record["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            files.append(file)  # unreadable: nothing to fail, nothing to keep
            continue
        if start_time(pid) is not None and start_time(pid) == record.get("start"):
            continue  # that worker still runs
        files.append(file)
        for token, what in (record.get("running") or {}).items():
            found.append(Orphan(token, what["workflow_id"], what["run_id"], what["activity"], pid))
    return found, files


async def fail_orphans(client: Client, folder: Path) -> list[Orphan]:
    """Fail what dead workers of this host were running, so their retries start now."""
    found, files = orphans(folder)

    async def fail(o: Orphan) -> None:
        handle = client.get_async_activity_handle(task_token=base64.b64decode(o.token))
        with contextlib.suppress(RPCError):  # done or timed out meanwhile: nothing to do
            await handle.fail(
                ApplicationError(
                    f"worker {o.pid} died", type=WORKER_DIED, next_retry_delay=RETRY_AT_ONCE
                )
            )
        with contextlib.suppress(RPCError):
            await client.workflow_service.reset_sticky_task_queue(
                ResetStickyTaskQueueRequest(
                    namespace=client.namespace,
                    execution=WorkflowExecution(workflow_id=o.workflow_id, run_id=o.run_id),
                )
            )

    await asyncio.gather(*(fail(o) for o in found))
    for file in files:
        file.unlink(missing_ok=True)
    return found
