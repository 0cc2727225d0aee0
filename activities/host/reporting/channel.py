"""The worker's end of a reporting channel: a key out, authenticated records in.

One channel per gate run. The worker makes a ``SOCK_SEQPACKET`` socket pair (one
message per write, so a message is never cut or interleaved), writes one session key
into it, passes the other end to the sandboxed command, and reads while the command
runs (a suite of thousands of tests would otherwise fill the socket's buffer and
stall). The first test process takes the key; there is no other to find. A message is
a batch of records; ``Assembler`` checks each message's keyed BLAKE2 MAC and sequence
number, and that every message of the session comes from the process that started
it (the kernel says who sent each message: ``SO_PASSCRED``), and folds the records
into a ``SuiteReport``; whatever fails a check is counted, never used.

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
import struct
from typing import Any

from loop.contracts import CaseResult, SuiteReport

MESSAGE_BYTES = 1 << 18
MAX_BYTES = 64 << 20
MAX_TESTS = 200_000
TEXT_CHARS = 2_000
NO_KEY = b"no-key"
"""What a second test process writes when the key is taken (see ``loopwork_report``)."""
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid

_WORST = {"error": 5, "failed": 5, "missing": 4, "xpassed": 3, "xfailed": 2, "skipped": 1,
          "passed": 0}  # fmt: skip
"""The same test reported twice (a rerun plugin) keeps its worst outcome."""


class Channel:
    """A socket pair for one gate run; ``child_fd`` goes to the command."""

    def __init__(self) -> None:
        self._ours, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.key = secrets.token_bytes(32)
        self._ours.send(b"0:" + self.key)
        self._ours.setblocking(False)
        self._messages: list[tuple[bytes, int]] = []
        self._bytes = 0
        self._overflow = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def child_fd(self) -> int:
        return self._theirs.fileno()

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._ours.fileno(), self._drain)

    def _drain(self) -> None:
        """Every message waiting now, with the pid of the process that sent it."""
        space = socket.CMSG_SPACE(_CRED.size)
        while True:
            try:
                data, ancillary, _, _ = self._ours.recvmsg(MESSAGE_BYTES, space)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._stop()
                return
            if not data:
                self._stop()
                return
            pid = 0
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = _CRED.unpack(value[: _CRED.size])[0]
            if self._bytes + len(data) > MAX_BYTES:
                self._overflow = True
                continue
            self._bytes += len(data)
            self._messages.append((data, pid))

    def _stop(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self._ours.fileno())
            self._loop = None

    async def finish(self) -> SuiteReport:
        """After the run (its processes are gone): read what is left, close, assemble."""
        self._theirs.close()
        self._drain()
        self._stop()
        self._ours.close()
        assembler = Assembler(self.key)
        for message, pid in self._messages:
            assembler.feed(message, pid)
        if self._overflow:
            assembler.report.problems.append(
                f"the report was larger than {MAX_BYTES >> 20} MB; the rest was not read"
            )
        return assembler.done()

    def close(self) -> None:
        """Without assembling (the run failed before it started)."""
        self._stop()
        with contextlib.suppress(OSError):
            self._theirs.close()
        with contextlib.suppress(OSError):
            self._ours.close()


class Assembler:
    """Records in, a ``SuiteReport`` out; records that fail their check are counted."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.report = SuiteReport()
        self._next = 0
        self._pid: int | None = None
        self._started = False
        self._forged = 0
        self._out_of_order = 0
        self._second = False

    def feed(self, message: bytes, pid: int = 0) -> None:
        """One message, ``<mac> {"s": 0, "n": seq, "r": [records]}``, from process ``pid``."""
        if message == NO_KEY:
            self._second = True
            return
        mac, _, body = message.partition(b" ")
        expected = hashlib.blake2b(body, key=self.key, digest_size=32).hexdigest()
        if not hmac.compare_digest(mac, expected.encode()):
            self._forged += 1
            return
        if self._pid is None:
            self._pid = pid
        elif pid != self._pid:
            self._forged += 1  # the key, used from another process than the reporter's
            return
        try:
            record = json.loads(body)
            seq = int(record["n"])
        except (ValueError, KeyError, TypeError):
            self._forged += 1
            return
        if seq != self._next:
            self._out_of_order += 1
        self._next = seq + 1
        for one in record.get("r") or []:
            if isinstance(one, dict):
                self._apply(one)

    def _apply(self, record: dict[str, Any]) -> None:
        report = self.report
        kind = record.get("t")
        if kind == "start":
            if not self._started:
                self._started = True
                report.sessions += 1
                report.runner = str(record.get("runner", ""))
                report.root = str(record.get("root", ""))[:4096]
                report.cwd = str(record.get("cwd", ""))[:4096]
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
        if self._second:
            self.report.problems.append(
                "a second test process started while one was reporting; one run gate reports "
                "one test session: give each test run a gate of its own"
            )
        return self.report


def _case(record: dict[str, Any], outcome: str) -> CaseResult:
    if outcome not in _WORST:
        outcome = "error"
    return CaseResult(
        id=str(record.get("id", ""))[:1_000],
        outcome=outcome,  # type: ignore[arg-type]  # one of _WORST, checked above
        file=str(record.get("f", ""))[:1_000],
        message=str(record.get("m", ""))[-TEXT_CHARS:],
        output=str(record.get("out", ""))[-TEXT_CHARS:],
        exception=str(record.get("x", ""))[:200],
        raised_at=str(record.get("at", ""))[:1_000],
    )
