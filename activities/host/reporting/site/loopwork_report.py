"""Loopwork's test reporter, inside a gate's test process: pytest plugin and unittest hook.

This file runs in the process whose code is under test, on whatever Python the
gate's command starts, so it uses the standard library only and no syntax newer
than Python 3.8. It is found through ``PYTHONPATH`` in a folder the worker shows
read-only; ``sitecustomize`` imports it at interpreter start-up, before any code of
the repository can run, and ``-p loopwork_report`` registers it with pytest.

The channel: ``LOOP_REPORT_FD`` names one end of a socket pair (``SOCK_SEQPACKET``,
one message per write, never interleaved with another process's) whose other end
the worker holds. Claiming it takes the variable out of the environment, so test
subprocesses do not report, and reads one session key the worker put there; every
message then carries a keyed BLAKE2 MAC under that key and a sequence number. Code
under test that writes to the descriptor blind cannot make a message the worker
accepts; one that would has to read this module's memory, which the worker's diff
scan flags (docs/architecture.md, "Verdicts"). Records go in batches (a message
every ``BATCH`` tests or ``BATCH_CHARS`` characters): a run cut short loses its last
batch, which only makes its report incomplete, as it already is.

Only ``os``, ``sys`` and ``json`` are imported: every Python process of a gate pays
for this module's import when it reports, and the socket, hmac and hashlib modules
would double that.

Records: ``start``, ``collected`` (chunks of ``[id, file]``), ``deselected``,
``collect_error``, ``test`` (one per test: id, outcome, file, message, output),
and ``end`` when the session finished. A run that ends without ``end`` (an
``os._exit`` at import, a crash, a killed process) is reported as incomplete by
the worker, never as a pass.
"""

import json
import os
import sys

FD_VARIABLE = "LOOP_REPORT_FD"
MESSAGE_CHARS = 2000
OUTPUT_CHARS = 1000
CHUNK = 200
"""Ids per ``collected`` or ``deselected`` record."""
BATCH = 64
BATCH_CHARS = 48_000
"""A message stays well under a socket's send buffer (a record's texts are capped)."""
TEST_COMMANDS = ("pytest", "py.test", "unittest")
NO_KEY = b"no-key"
"""What a second test process says when the one key is taken (one gate, one session)."""


def _blake2b():
    try:
        from _blake2 import blake2b  # CPython's own, without OpenSSL's import cost
    except ImportError:
        from hashlib import blake2b
    return blake2b


# Bound now, while nothing of the repository has run: code under test that replaces
# json.dumps or os.write later changes nothing this module sends.
_encode = json.JSONEncoder(separators=(",", ":"), default=str).encode
_write, _read, _dup, _close = os.write, os.read, os.dup, os.close
_set_blocking, _pop = os.set_blocking, os.environ.pop
_mac = _blake2b()
_channel = None


class _Channel:
    def __init__(self, fd, session, key):
        self.fd = fd
        self.session = session
        self.key = key
        self.seq = 0
        self.bound = False
        self.pending = []
        self.chars = 0

    def send(self, record):
        self.pending.append(record)
        self.chars += len(record.get("m", "")) + len(record.get("out", "")) + 200
        if len(self.pending) >= BATCH or self.chars >= BATCH_CHARS or record["t"] != "test":
            self.flush()

    def flush(self):
        if not self.pending:
            return
        message = {"s": self.session, "n": self.seq, "r": self.pending}
        self.seq += 1
        self.pending, self.chars = [], 0
        body = _encode(message).encode("utf-8", "replace")
        mac = _mac(body, key=self.key, digest_size=32).hexdigest().encode("ascii")
        try:
            _write(self.fd, mac + b" " + body)
        except OSError:
            pass  # the worker stopped listening: the report stays incomplete, as it should


def claim():
    """This process's channel, taken once (None when the worker gave none).

    The worker puts one key in the channel; the first test process takes it. Another
    one finds none, says so, and reports nothing (the worker then tells the person to
    give each test run a gate of its own)."""
    global _channel
    if _channel is not None:
        return _channel or None
    _channel = False
    fd = _pop(FD_VARIABLE, "")
    if not fd.isdigit():
        return None
    try:
        own = _dup(int(fd))  # not inheritable: the tests' subprocesses do not get it
        _close(int(fd))
        _set_blocking(own, False)  # the key is there before the process starts, or taken
        try:
            session, _, key = _read(own, 256).decode("ascii").partition(":")
        except BlockingIOError:
            _write(own, NO_KEY)
            return None
        _set_blocking(own, True)
        _channel = _Channel(own, int(session), bytes.fromhex(key))
    except (OSError, ValueError):
        return None
    return _channel


def is_test_process(argv):
    """``python -m pytest|unittest`` or a ``pytest`` script: claim at start-up."""
    args = list(argv[1:])
    if "-m" in args[:-1]:
        return args[args.index("-m") + 1] in TEST_COMMANDS
    script = next((a for a in args if not a.startswith("-")), "")
    return os.path.basename(script) in TEST_COMMANDS


def _tail(text, limit):
    text = text or ""
    return text if len(text) <= limit else "…" + text[-limit:]


def _relative(path):
    if not path:
        return ""
    try:
        return os.path.relpath(path)
    except ValueError:
        return path


def _chunks(items):
    for i in range(0, len(items), CHUNK):
        yield items[i : i + CHUNK]


# ------------------------------------------------------------------ pytest


def pytest_configure(config):
    channel = claim()
    if channel is None or channel.bound:
        return
    channel.bound = True
    import pytest

    channel.send({"t": "start", "runner": "pytest", "version": pytest.__version__})
    reporter = _PytestReporter(channel)

    def makereport(item, call):
        # What each phase raised, noted before any other wrapper runs (tryfirst, and
        # registered after every conftest) and again once the report is made (unittest
        # cases get their exception there): a report that says "passed" while its phase
        # raised was rewritten on the way.
        raised = call.excinfo is not None
        yield
        if raised or call.excinfo is not None:
            reporter.exceptions.setdefault(item.nodeid, []).append(call.when)

    hook = pytest.hookimpl(hookwrapper=True, tryfirst=True)
    reporter.pytest_runtest_makereport = hook(makereport)
    config.pluginmanager.register(reporter, "loopwork-report-session")


def _file_of(nodeid):
    return nodeid.split("::", 1)[0]


class _PytestReporter:
    def __init__(self, channel):
        self.channel = channel
        self.phases = {}
        self.exceptions = {}

    def pytest_collectreport(self, report):
        if report.failed:
            self.channel.send(
                {
                    "t": "collect_error",
                    "id": report.nodeid or "<session>",
                    "f": _file_of(report.nodeid),
                    "m": _tail(report.longreprtext, MESSAGE_CHARS),
                }
            )

    def pytest_deselected(self, items):
        for chunk in _chunks([item.nodeid for item in items]):
            self.channel.send({"t": "deselected", "ids": chunk})

    def pytest_collection_finish(self, session):
        items = [[item.nodeid, _file_of(item.nodeid)] for item in session.items]
        for chunk in _chunks(items):
            self.channel.send({"t": "collected", "items": chunk})

    def pytest_runtest_logreport(self, report):
        self.phases.setdefault(report.nodeid, []).append(report)

    def pytest_runtest_logfinish(self, nodeid, location):
        reports = self.phases.pop(nodeid, [])
        if reports:
            self.channel.send(_pytest_record(nodeid, reports, self.exceptions.pop(nodeid, [])))

    def pytest_sessionfinish(self, session, exitstatus):
        for nodeid, reports in list(self.phases.items()):
            self.channel.send(_pytest_record(nodeid, reports, self.exceptions.pop(nodeid, [])))
        self.phases.clear()
        self.channel.send({"t": "end", "exit": int(exitstatus)})


_RANK = {"passed": 0, "skipped": 1, "xfailed": 2, "xpassed": 3, "failed": 5, "error": 5}


def _phase(r):
    """The outcome one report (setup, call, teardown, or a subtest) gives its test."""
    xfail = hasattr(r, "wasxfail")
    if r.when == "call":
        if r.passed:
            return "xpassed" if xfail else "passed"
        if r.failed:
            return "failed"
        return "xfailed" if xfail else "skipped"
    if r.failed:
        return "error"
    if r.skipped:
        return "xfailed" if xfail else "skipped"
    return "passed"


def _pytest_record(nodeid, reports, raised=()):
    """One record per test: its worst phase (a failed subtest fails the test); a phase
    that raised is never a pass, whatever its report says."""
    outcome, message, output = "passed", "", ""
    for r in reports:
        phase = _phase(r)
        if phase == "passed" and r.when in raised:
            phase = "failed" if r.when == "call" else "error"
            message = "the test raised, but its report was changed to say passed"
        if _RANK[phase] > _RANK[outcome]:
            outcome = phase
            if message.startswith("the test raised, but"):
                pass
            elif isinstance(r.longrepr, tuple) and len(r.longrepr) == 3:
                message = str(r.longrepr[2])
            else:
                message = r.longreprtext
        output += (getattr(r, "capstdout", "") or "") + (getattr(r, "capstderr", "") or "")
    return {
        "t": "test",
        "id": nodeid,
        "o": outcome,
        "f": _file_of(nodeid),
        "m": _tail(message, MESSAGE_CHARS),
        "out": _tail(output, OUTPUT_CHARS),
    }


# ------------------------------------------------------------------ unittest


def watch_unittest():
    """Report the run of ``python -m unittest``: its ``TestProgram`` runs a wrapped suite."""
    import unittest

    program = sys.modules["unittest.main"].TestProgram  # ``unittest.main`` is the class
    original = program.runTests

    def runTests(self):
        channel = claim()
        if channel is not None and not channel.bound and self.test is not None:
            channel.bound = True
            self.test = _reporting_suite(unittest, self.test, channel)
        return original(self)

    program.runTests = runTests


def _leaves(suite):
    try:
        children = list(suite)
    except TypeError:
        return [suite]
    found = []
    for child in children:
        found.extend(_leaves(child))
    return found


def _unittest_file(test):
    module = sys.modules.get(type(test).__module__)
    return _relative(getattr(module, "__file__", "") or "")


def _reporting_suite(unittest, inner, channel):
    class Reporting(unittest.TestSuite):
        def run(self, result, debug=False):
            channel.send({"t": "start", "runner": "unittest", "version": sys.version.split()[0]})
            items = []
            for test in _leaves(inner):
                if type(test).__name__ == "_FailedTest":
                    error = getattr(test, "_exception", "")
                    module = getattr(test, "_testMethodName", "")
                    channel.send(
                        {
                            "t": "collect_error",
                            "id": test.id(),
                            "f": module.replace(".", "/") + ".py" if module else "",
                            "m": _tail(str(error), MESSAGE_CHARS),
                        }
                    )
                else:
                    items.append([test.id(), _unittest_file(test)])
            for chunk in _chunks(items):
                channel.send({"t": "collected", "items": chunk})
            undo = _instrument(result, channel)
            try:
                outcome = unittest.TestSuite.run(self, result, debug)
            finally:
                undo()
            channel.send({"t": "end", "exit": 0 if result.wasSuccessful() else 1})
            return outcome

    return Reporting([inner])


def _instrument(result, channel):
    """Wrap the result's ``add*`` methods on the instance; returns the undo."""
    state = {}

    def text(err, test):
        to_string = getattr(result, "_exc_info_to_string", None)
        if to_string is not None:
            try:
                return to_string(err, test)
            except Exception:
                pass
        import traceback

        return "".join(traceback.format_exception(*err))

    def mark(test, outcome, message=""):
        key = test.id()
        current = state.get(key)
        if current is not None and current[0] in ("failed", "error") and outcome == "passed":
            return  # a failed subtest makes the whole test fail
        state[key] = (outcome, message, _unittest_file(test))
        if not hasattr(test, "_testMethodName"):
            emit(key)  # an error outside any test (setUpClass, a module fixture)

    def emit(key):
        outcome, message, path = state.pop(key, ("error", "no outcome recorded", ""))
        channel.send(
            {
                "t": "test",
                "id": key,
                "o": outcome,
                "f": path,
                "m": _tail(message, MESSAGE_CHARS),
                "out": "",
            }
        )

    def wrap(name, handler):
        original = getattr(result, name, None)
        if original is None:
            return

        def wrapped(*args, **kwargs):
            handler(*args)
            return original(*args, **kwargs)

        setattr(result, name, wrapped)

    wrap("addSuccess", lambda test: mark(test, "passed"))
    wrap("addFailure", lambda test, err: mark(test, "failed", text(err, test)))
    wrap("addError", lambda test, err: mark(test, "error", text(err, test)))
    wrap("addSkip", lambda test, reason: mark(test, "skipped", str(reason)))
    wrap("addExpectedFailure", lambda test, err: mark(test, "xfailed", text(err, test)))
    wrap("addUnexpectedSuccess", lambda test: mark(test, "xpassed"))

    def subtest(test, sub, err=None):
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            mark(test, "failed" if failed else "error", text(err, sub))

    wrap("addSubTest", subtest)

    def stopped(test):
        if test.id() in state:
            emit(test.id())

    wrap("stopTest", stopped)

    def undo():
        for name in (
            "addSuccess", "addFailure", "addError", "addSkip", "addExpectedFailure",
            "addUnexpectedSuccess", "addSubTest", "stopTest",
        ):  # fmt: skip
            result.__dict__.pop(name, None)

    return undo
