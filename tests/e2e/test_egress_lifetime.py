"""The egress proxy ends with the worker that started it, even one killed while it started."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from activities.host.sandbox.egress import MAIN

ROOT = Path(__file__).resolve().parents[2]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_a_proxy_whose_worker_died_before_it_ran_ends(tmp_path: Path):
    """Its "worker" exits as soon as it has started the proxy: by the time the proxy's
    main runs, its parent is init. It must still see that its worker is gone."""
    folder = tmp_path / "egress"
    folder.mkdir()
    starter = textwrap.dedent(f"""
        import os, subprocess, sys
        proxy = subprocess.Popen(
            [sys.executable, "-m", {MAIN!r}, {str(folder)!r}, str(os.getpid())],
            cwd={str(folder)!r}, start_new_session=True, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={{"PATH": os.environ["PATH"], "PYTHONPATH": {str(ROOT)!r}}},
        )
        print(proxy.pid)
    """)
    started = subprocess.run(
        [sys.executable, "-c", starter], capture_output=True, text=True, check=True
    )
    pid = int(started.stdout)
    deadline = time.monotonic() + 20
    try:
        while alive(pid):
            assert time.monotonic() < deadline, "the proxy outlived its worker"
            time.sleep(0.1)
    finally:
        if alive(pid):
            os.killpg(pid, 9)
