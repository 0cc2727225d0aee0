"""Loopwork's test reporter, inside a gate's test process: pytest plugin and unittest hook.

This file runs in the process whose code is under test, on whatever Python the
gate's command starts, so it uses the standard library only and no syntax newer
than Python 3.8. It is found through ``PYTHONPATH`` in a folder the worker shows
read-only; ``sitecustomize`` calls ``install`` at interpreter start-up, before any
code of the repository can run, and ``-p loopwork`` registers it with pytest.

The channel: ``LOOP_REPORT_FD`` names one end of a socket pair (``SOCK_SEQPACKET``,
one message per write, never interleaved with another process's) whose other end
the worker holds. Claiming it takes the variable out of the environment, so test
subprocesses do not report, and reads one session key the worker put there; the key
goes at once into a keyed BLAKE2 state (C memory no Python object shows) and every
message carries that MAC and a sequence number. Nothing of the channel is a module
global: ``install`` keeps it in the closures of the hooks it makes, so no lookup of a
module's names finds it; reaching it takes a walk through ``__closure__`` or the
runner's plugin manager, which the worker's diff scan flags (docs/architecture.md,
"Verdicts"). The worker also reads the runner's own output and exit status and checks
them against these records. Records go in batches (a message every ``BATCH`` tests or
``BATCH_CHARS`` characters): a run cut short loses its last batch, which only makes its
report incomplete, as it already is.

Only ``os``, ``sys`` and ``json`` are imported at start-up: every Python process of a
gate pays for this module's import when it reports.

Records: ``start`` (the runner, its version, its rootdir), ``collected`` (chunks of
``[id, file]``), ``deselected``, ``collect_error``, ``test`` (one per test: id,
outcome, file, message, output, the exception's type and the file of its innermost
frame), and ``end`` when the session finished. A run that ends without ``end`` (an
``os._exit`` at import, a crash, a killed process) is reported as incomplete by the
worker, never as a pass.

``LOOP_REPORT_ONLY`` (a file of test ids, one a line) runs only those tests: the
worker's rerun of tests that failed once.
"""

import json
import os
import sys

FD_VARIABLE = "LOOP_REPORT_FD"
ONLY_VARIABLE = "LOOP_REPORT_ONLY"
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
KEY_BYTES = 32


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
_claimed = []
"""Whether this process has tried to claim the channel (one try per process)."""


def install(argv):
    """Claim the channel when ``argv`` is a test process, and make its hooks: pytest's as
    this module's ``pytest_configure``, unittest's around ``TestProgram.runTests``."""
    if _claimed or not is_test_process(argv):
        return
    send = _claim()
    if send is None:
        return
    only = _only()
    globals()["pytest_configure"] = _pytest_configure(send, only)
    if "unittest" in argv:
        _watch_unittest(send, only)


def _claim():
    """This process's sender, taken once (None when the worker gave none, or another
    process has the key).

    The worker puts one key in the channel; the first test process takes it. Another
    one finds none, says so, and reports nothing (the worker then tells the person to
    give each test run a gate of its own)."""
    _claimed.append(True)
    fd = _pop(FD_VARIABLE, "")
    if not fd.isdigit():
        return None
    try:
        own = _dup(int(fd))  # not inheritable: the tests' subprocesses do not get it
        _close(int(fd))
        _set_blocking(own, False)  # the key is there before the process starts, or taken
        try:
            first = _read(own, 256)
        except BlockingIOError:
            _write(own, NO_KEY)
            return None
        _set_blocking(own, True)
        session, _, key = first.partition(b":")
        if len(key) != KEY_BYTES:
            return None
        mac = _blake2b()(key=key, digest_size=32)
        del first, key
        return _sender(own, int(session), mac)
    except (OSError, ValueError):
        return None


def _sender(fd, session, mac):
    """``send(record)``, batching records into signed, numbered messages (any record but a
    test's sends at once). Its state is this closure's: no object outside it holds the
    descriptor."""
    state = {"seq": 0, "chars": 0}
    pending = []

    def flush():
        if not pending:
            return
        message = {"s": session, "n": state["seq"], "r": list(pending)}
        state["seq"] += 1
        del pending[:]
        state["chars"] = 0
        body = _encode(message).encode("utf-8", "replace")
        signer = mac.copy()
        signer.update(body)
        try:
            _write(fd, signer.hexdigest().encode("ascii") + b" " + body)
        except OSError:
            pass  # the worker stopped listening: the report stays incomplete, as it should

    def send(record):
        pending.append(record)
        state["chars"] += len(record.get("m", "")) + len(record.get("out", "")) + 200
        if len(pending) >= BATCH or state["chars"] >= BATCH_CHARS or record["t"] != "test":
            flush()

    return send


def _only():
    """The ids this run is limited to (None: every test the command selects)."""
    path = _pop(ONLY_VARIABLE, "")
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return {line.rstrip("\n") for line in f if line.strip()}
    except OSError:
        return set()


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


def _raised(exc_type, tb):
    """The exception's qualified type and the file of its innermost frame in the checkout
    (the code that raised it, below any library's): what tells an assertion from an error
    of the environment or of code the attempt added."""
    name = ""
    if exc_type is not None:
        module = getattr(exc_type, "__module__", "") or ""
        qualname = getattr(exc_type, "__qualname__", "") or getattr(exc_type, "__name__", "")
        name = qualname if module in ("builtins", "") else module + "." + qualname
    where = ""
    while tb is not None:
        path = _relative(tb.tb_frame.f_code.co_filename)
        inside = path and not path.startswith(("..", "/", "<"))
        if inside and "site-packages" not in path and "dist-packages" not in path:
            where = path  # the innermost frame of the checkout (not the runner's, not a library's)
        tb = tb.tb_next
    return name, where


# ------------------------------------------------------------------ pytest


def _pytest_configure(send, only):
    def pytest_configure(config):
        import pytest

        root = getattr(config, "rootpath", None) or getattr(config, "rootdir", "")
        send({"t": "start", "runner": "pytest", "version": pytest.__version__,
              "root": str(root), "cwd": os.getcwd()})  # fmt: skip
        plugin = _Session()
        for name, hook in _pytest_hooks(send, only).items():
            setattr(plugin, name, hook)
        config.pluginmanager.register(plugin, "loopwork-report-session")

    return pytest_configure


class _Session:
    """The session's plugin: its hooks are closures set on the instance (pluggy needs an
    object it can hash, which a ``SimpleNamespace`` is not)."""


def _pytest_hooks(send, only):
    """The session's hooks, as closures over ``send``."""
    import unittest

    import pytest

    phases = {}
    raised = {}
    skips = (unittest.SkipTest, pytest.skip.Exception)
    """What a test raises to be skipped (a subtest's ``skipTest`` too): not a failure."""

    def makereport(item, call):
        # What each phase raised, noted before any other wrapper runs (tryfirst, and
        # registered after every conftest) and again once the report is made (unittest
        # cases get their exception there): a report that says "passed" while its phase
        # raised was rewritten on the way.
        info = call.excinfo
        yield
        info = info or call.excinfo
        if info is not None and not info.errisinstance(skips):
            exc, where = _raised(info.type, info.tb)
            raised.setdefault(item.nodeid, []).append((call.when, exc, where))

    def pytest_collectreport(report):
        if report.failed:
            message = _tail(report.longreprtext, MESSAGE_CHARS)
            send({"t": "collect_error", "id": report.nodeid or "<session>",
                  "f": _file_of(report.nodeid), "m": message})  # fmt: skip

    def pytest_collection_modifyitems(config, items):
        if only is None:
            return
        kept = [item for item in items if item.nodeid in only]
        others = [item for item in items if item.nodeid not in only]
        if others:
            config.hook.pytest_deselected(items=others)
        items[:] = kept

    def pytest_deselected(items):
        for chunk in _chunks([item.nodeid for item in items]):
            send({"t": "deselected", "ids": chunk})

    def pytest_collection_finish(session):
        items = [[item.nodeid, _file_of(item.nodeid)] for item in session.items]
        for chunk in _chunks(items):
            send({"t": "collected", "items": chunk})

    def pytest_runtest_logreport(report):
        phases.setdefault(report.nodeid, []).append(report)

    def pytest_runtest_logfinish(nodeid, location):
        reports = phases.pop(nodeid, [])
        if reports:
            send(_pytest_record(nodeid, reports, raised.pop(nodeid, [])))

    def pytest_sessionfinish(session, exitstatus):
        for nodeid, reports in list(phases.items()):
            send(_pytest_record(nodeid, reports, raised.pop(nodeid, [])))
        phases.clear()
        send({"t": "end", "exit": int(exitstatus)})

    return {
        "pytest_runtest_makereport": pytest.hookimpl(hookwrapper=True, tryfirst=True)(makereport),
        "pytest_collectreport": pytest_collectreport,
        "pytest_collection_modifyitems": pytest.hookimpl(trylast=True)(
            pytest_collection_modifyitems
        ),
        "pytest_deselected": pytest_deselected,
        "pytest_collection_finish": pytest_collection_finish,
        "pytest_runtest_logreport": pytest_runtest_logreport,
        "pytest_runtest_logfinish": pytest_runtest_logfinish,
        "pytest_sessionfinish": pytest_sessionfinish,
    }


def _file_of(nodeid):
    return nodeid.split("::", 1)[0]


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
    phases_raised = {when for when, _, _ in raised}
    for r in reports:
        phase = _phase(r)
        if phase in ("skipped", "xfailed") and hasattr(r, "context"):
            continue  # a subtest skipped (pytest's subtests, pytest-subtests): its test goes on
        if phase == "passed" and r.when in phases_raised:
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
    exc, where = "", ""
    if outcome in ("failed", "error", "xfailed") and raised:
        _, exc, where = raised[0]
    return {
        "t": "test",
        "id": nodeid,
        "o": outcome,
        "f": _file_of(nodeid),
        "m": _tail(message, MESSAGE_CHARS),
        "out": _tail(output, OUTPUT_CHARS),
        "x": exc,
        "at": where,
    }


# ------------------------------------------------------------------ unittest


def _watch_unittest(send, only):
    """Report the run of ``python -m unittest``: its ``TestProgram`` runs a wrapped suite."""
    import unittest

    program = sys.modules["unittest.main"].TestProgram  # ``unittest.main`` is the class
    original = program.runTests
    bound = []

    def runTests(self):
        if not bound and self.test is not None:
            bound.append(True)
            self.test = _reporting_suite(unittest, self.test, send, only)
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


def _reporting_suite(unittest, inner, send, only):
    class Reporting(unittest.TestSuite):
        def run(self, result, debug=False):
            send({"t": "start", "runner": "unittest", "version": sys.version.split()[0],
                  "root": os.getcwd(), "cwd": os.getcwd()})  # fmt: skip
            items, skipped = [], []
            for test in _leaves(inner):
                if type(test).__name__ == "_FailedTest":
                    error = getattr(test, "_exception", "")
                    module = getattr(test, "_testMethodName", "")
                    send(
                        {
                            "t": "collect_error",
                            "id": test.id(),
                            "f": module.replace(".", "/") + ".py" if module else "",
                            "m": _tail(str(error), MESSAGE_CHARS),
                        }
                    )
                elif only is not None and test.id() not in only:
                    skipped.append(test.id())
                else:
                    items.append([test.id(), _unittest_file(test)])
            for chunk in _chunks(items):
                send({"t": "collected", "items": chunk})
            for chunk in _chunks(skipped):
                send({"t": "deselected", "ids": chunk})
            undo = _instrument(result, send, only)
            try:
                outcome = unittest.TestSuite.run(self, result, debug)
            finally:
                undo()
            send({"t": "end", "exit": 0 if result.wasSuccessful() else 1})
            return outcome

    if only is not None:
        kept = [t for t in _leaves(inner) if t.id() in only or type(t).__name__ == "_FailedTest"]
        return Reporting(kept)
    return Reporting([inner])


def _instrument(result, send, only):
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

    def mark(test, outcome, message="", err=None):
        key = test.id()
        current = state.get(key)
        if current is not None and current[0] in ("failed", "error") and outcome == "passed":
            return  # a failed subtest makes the whole test fail
        exc, where = _raised(err[0], err[2]) if err else ("", "")
        if current is not None and current[0] in ("failed", "error") and current[3]:
            exc, where = current[3], current[4]  # the first failure says what failed
        state[key] = (outcome, message, _unittest_file(test), exc, where)
        if not hasattr(test, "_testMethodName"):
            emit(key)  # an error outside any test (setUpClass, a module fixture)

    def emit(key):
        outcome, message, path, exc, where = state.pop(
            key, ("error", "no outcome recorded", "", "", "")
        )
        send(
            {
                "t": "test",
                "id": key,
                "o": outcome,
                "f": path,
                "m": _tail(message, MESSAGE_CHARS),
                "out": "",
                "x": exc,
                "at": where,
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
    wrap("addFailure", lambda test, err: mark(test, "failed", text(err, test), err))
    wrap("addError", lambda test, err: mark(test, "error", text(err, test), err))
    wrap("addSkip", lambda test, reason: mark(test, "skipped", str(reason)))
    wrap("addExpectedFailure", lambda test, err: mark(test, "xfailed", text(err, test), err))
    wrap("addUnexpectedSuccess", lambda test: mark(test, "xpassed"))

    def subtest(test, sub, err=None):
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            mark(test, "failed" if failed else "error", text(err, sub), err)

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
