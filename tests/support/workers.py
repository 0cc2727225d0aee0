"""Workers as separate processes (``python worker.py``): hosts that can be killed."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.client import Client

from tests.support.repos import ROOT


@dataclass
class Host:
    """One host: its own LOOP_HOME and host id, one worker process at a time."""

    client: Client
    home: Path
    queue: str
    host_id: str = ""
    env: dict[str, str] = field(default_factory=dict)
    process: asyncio.subprocess.Process | None = None
    started_at: float = 0.0
    """``time.time()`` when the current worker process was started."""

    @property
    def log(self) -> Path:
        return self.home.parent / f"{self.home.name}-worker.log"

    async def start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": self.client.service_client.config.target_host,
            "LOOP_HOME": str(self.home),
            "LOOP_TASK_QUEUE": self.queue,
            **({"LOOP_HOST_ID": self.host_id} if self.host_id else {}),
            **self.env,
        }
        self.started_at = time.time()
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(ROOT / "worker.py"),
            env=env,
            cwd=ROOT,
            stdout=self.log.open("ab"),
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # kill() takes the agents it started with it
        )

    async def ready(self, within: float = 60) -> None:
        """Until the worker logs that it serves its queues."""
        deadline = time.monotonic() + within
        while b"worker ready" not in (self.log.read_bytes() if self.log.exists() else b""):
            assert self.process is not None and self.process.returncode is None, self.tail()
            assert time.monotonic() < deadline, f"worker did not get ready: {self.tail()}"
            await asyncio.sleep(0.1)

    async def kill(self) -> None:
        """kill -9 the worker and everything of its session (the agents it runs)."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        await self.process.wait()
        self.process = None

    async def stop(self) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.process.wait(), 30)
        except TimeoutError:
            await self.kill()
        self.process = None

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""
