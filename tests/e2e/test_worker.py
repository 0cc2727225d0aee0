"""The worker as a process: it serves Prometheus metrics and drains on SIGTERM.

What it registers, and the examples it ships, are checked in tests/unit/test_worker.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import urllib.request
from pathlib import Path

from tests.support.net import free_port
from tests.support.repos import ROOT


async def test_worker_serves_prometheus_metrics(env, tmp_path: Path):
    """LOOP_METRICS_BIND exposes the SDK's metrics; SIGTERM still drains and exits 0."""
    port = free_port()
    worker_env = {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "LOOP_HOME": str(tmp_path),
        "LOOP_TASK_QUEUE": "metrics-test",
        "LOOP_METRICS_BIND": f"127.0.0.1:{port}",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "worker.py"),
        env=worker_env,
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return r.read().decode()

    try:
        text = ""
        for _ in range(100):
            try:
                text = await asyncio.to_thread(scrape)
                if "temporal_" in text:
                    break
            except OSError:
                pass
            await asyncio.sleep(0.1)
        assert "temporal_" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0
