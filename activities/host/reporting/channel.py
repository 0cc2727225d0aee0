"""The worker's end of a reporting channel: keys out, authenticated records in.

One channel per gate run. The worker makes a ``SOCK_SEQPACKET`` socket pair (one
message per write, so messages from two test processes never interleave), writes
one session key per possible session into it, passes the other end to the
sandboxed command, and reads while the command runs (a suite of thousands of tests
would otherwise fill the socket's buffer and stall). A message is a batch of
records; ``Assembler`` checks each message's keyed BLAKE2 MAC under its session's
key and its sequence number, and folds the records into a ``SuiteReport``; whatever
fails the check is counted, never used.

Everything here is bounded: the bytes read, the records kept, the length of each
message and output; a report past a bound says so in ``problems`` (and is then not
complete, so the gate fails rather than judging half a suite).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import secrets
import socket
from typing import Any

from loop.contracts import CaseResult, SuiteReport

SESSIONS = 16
"""Test processes one gate run may start that report (``pytest a; pytest b``)."""
MESSAGE_BYTES = 1 << 18
MAX_BYTES = 64 << 20
MAX_TESTS = 200_000
TEXT_CHARS = 2_000

_WORST = {"error": 5, "failed": 5, "xpassed": 3, "xfailed": 2, "skipped": 1, "passed": 0}
"""The same test reported twice (two sessions ran it) keeps its worst outcome."""


class Channel:
    """A socket pair for one gate run; ``child_fd`` goes to the command."""

    def __init__(self) -> None:
        self._ours, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.keys = [secrets.token_bytes(32) for _ in range(SESSIONS)]
        for i, key in enumerate(self.keys):
            self._ours.send(f"{i}:{key.hex()}".encode("ascii"))
        self._ours.setblocking(False)
        self._messages: list[bytes] = []
        self._bytes = 0
        self._overflow = False
        self._reader: asyncio.Task[None] | None = None

    @property
    def child_fd(self) -> int:
        return self._theirs.fileno()

    def start(self) -> None:
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            data = await loop.sock_recv(self._ours, MESSAGE_BYTES)
            if not data:
                return
            self._keep(data)

    def _keep(self, data: bytes) -> None:
        if self._bytes + len(data) > MAX_BYTES:
            self._overflow = True
            return
        self._bytes += len(data)
        self._messages.append(data)

    async def finish(self) -> SuiteReport:
        """After the run (its processes are gone): read what is left, close, assemble."""
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._theirs.close()
        while True:
            try:
                data = self._ours.recv(MESSAGE_BYTES)
            except (BlockingIOError, OSError):
                break
            if not data:
                break
            self._keep(data)
        self._ours.close()
        assembler = Assembler(self.keys)
        for message in self._messages:
            assembler.feed(message)
        if self._overflow:
            assembler.report.problems.append(
                f"the report was larger than {MAX_BYTES >> 20} MB; the rest was not read"
            )
        return assembler.done()

    def close(self) -> None:
        """Without assembling (the run failed before it started)."""
        if self._reader is not None:
            self._reader.cancel()
        self._theirs.close()
        self._ours.close()


class Assembler:
    """Records in, a ``SuiteReport`` out; records that fail their check are counted."""

    def __init__(self, keys: list[bytes]) -> None:
        self.keys = keys
        self.report = SuiteReport()
        self._next: dict[int, int] = {}
        self._started: set[int] = set()
        self._forged = 0
        self._out_of_order = 0

    def feed(self, message: bytes) -> None:
        """One message: ``<mac> {"s": session, "n": seq, "r": [records]}``."""
        mac, _, body = message.partition(b" ")
        try:
            record = json.loads(body)
            session, seq = int(record["s"]), int(record["n"])
        except (ValueError, KeyError, TypeError):
            self._forged += 1
            return
        if not 0 <= session < len(self.keys):
            self._forged += 1
            return
        expected = hashlib.blake2b(body, key=self.keys[session], digest_size=32).hexdigest()
        if not hmac.compare_digest(mac, expected.encode()):
            self._forged += 1
            return
        if seq != self._next.get(session, 0):
            self._out_of_order += 1
        self._next[session] = seq + 1
        for one in record.get("r") or []:
            if isinstance(one, dict):
                self._apply(session, one)

    def _apply(self, session: int, record: dict[str, Any]) -> None:
        report = self.report
        kind = record.get("t")
        if kind == "start":
            if session not in self._started:
                self._started.add(session)
                report.sessions += 1
                runner = str(record.get("runner", ""))
                if report.runner and runner and runner != report.runner:
                    report.runner = f"{report.runner}+{runner}"
                else:
                    report.runner = report.runner or runner
        elif kind == "end":
            report.finished += 1
        elif kind == "collected":
            for item in record.get("items") or []:
                if len(report.collected) < MAX_TESTS and isinstance(item, list) and item:
                    report.collected[str(item[0])] = str(item[1]) if len(item) > 1 else ""
        elif kind == "deselected":
            report.deselected += [str(i) for i in record.get("ids") or []][:MAX_TESTS]
        elif kind == "collect_error":
            report.collect_errors.append(_case(record, "error"))
        elif kind == "test" and len(report.tests) < MAX_TESTS:
            case = _case(record, str(record.get("o", "error")))
            known = report.tests.get(case.id)
            if known is None or _WORST.get(case.outcome, 5) > _WORST.get(known.outcome, 5):
                report.tests[case.id] = case

    def done(self) -> SuiteReport:
        if self._forged:
            self.report.problems.append(
                f"{self._forged} record(s) failed authentication: something other than "
                "Loopwork's reporter wrote to its channel"
            )
        if self._out_of_order:
            self.report.problems.append(f"{self._out_of_order} record(s) arrived out of order")
        return self.report


def _case(record: dict[str, Any], outcome: str) -> CaseResult:
    if outcome not in _WORST:
        outcome = "error"
    return CaseResult(
        id=str(record.get("id", ""))[:1_000],
        outcome=outcome,  # type: ignore[arg-type]
        file=str(record.get("f", ""))[:1_000],
        message=str(record.get("m", ""))[-TEXT_CHARS:],
        output=str(record.get("out", ""))[-TEXT_CHARS:],
    )
