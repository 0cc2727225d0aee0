"""The worker learns of its subprocesses' exits without a thread per subprocess."""

from __future__ import annotations

import asyncio
import os
import sys
import threading

import pytest

from activities.host.proc import watch_children_by_pidfd


@pytest.mark.skipif(
    sys.version_info >= (3, 12),
    reason="Python 3.12 and later watch subprocesses through pidfds on their own; "
    "the worker sets this up only on 3.11",
)
@pytest.mark.skipif(
    not hasattr(os, "pidfd_open"),
    reason="this Python has no os.pidfd_open (Linux 5.3 or later needed), so the worker "
    "keeps asyncio's default watcher",
)
def test_subprocess_exits_are_seen_through_a_pidfd_and_no_thread_is_started():
    async def run() -> tuple[int | None, int, int]:
        assert watch_children_by_pidfd()
        before = threading.active_count()
        processes = [
            await asyncio.create_subprocess_exec("sh", "-c", "sleep 0.3; exit 3") for _ in range(5)
        ]
        during = threading.active_count()  # the default watcher has one thread per child here
        codes = {await p.wait() for p in processes}
        return codes.pop() if len(codes) == 1 else None, before, during

    try:
        code, before, during = asyncio.run(run())
    finally:
        asyncio.set_child_watcher(None)  # the next loop gets the default again
    assert code == 3
    assert during == before
