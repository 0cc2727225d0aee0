"""The report channel and the JUnit reader: what the worker accepts as per-test results.

Real test processes (pytest, ``python -m unittest``) with Loopwork's reporter on their
``PYTHONPATH``, outside the sandbox (the sandboxed runs are tests/e2e/test_verdicts.py),
and the forgeries that must not be accepted: records written blind to the descriptor,
a report that stops before its end, hostile JUnit files.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

from activities.host import reporting
from activities.host.reporting import junit
from activities.host.reporting.channel import Assembler, Channel
from loop.contracts import RunGate, SandboxPolicy, SuiteReport

TESTS = """\
import unittest


class T(unittest.TestCase):
    def test_ok(self):
        self.assertEqual(1, 1)

    def test_bad(self):
        self.assertEqual(1, 2)

    @unittest.skip("later")
    def test_skip(self):
        pass

    def test_sub(self):
        for i in range(2):
            with self.subTest(i=i):
                self.assertEqual(i, 0)
"""


async def run(folder: Path, argv: list[str], home: Path) -> SuiteReport | None:
    """``argv`` in ``folder`` with a gate's reporting around it (no sandbox)."""
    setup = reporting.prepare(RunGate(name="t", run="x"), SandboxPolicy(mode="off"), home, folder)
    env = dict(os.environ, **setup.env, PYTEST_ADDOPTS=reporting.pytest_options())
    setup.start()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=folder,
            env=env,
            pass_fds=setup.pass_fds,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        await proc.wait()
        return await setup.collect()
    finally:
        setup.close()


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "test_t.py").write_text(TESTS)
    return tmp_path


async def test_pytest_reports_every_test_with_its_outcome(suite: Path, tmp_path: Path) -> None:
    found = await run(suite, [sys.executable, "-m", "pytest", "-q", "tests"], tmp_path / "home")
    assert found is not None and found.complete, found
    outcomes = {i.rsplit("::", 1)[-1]: c.outcome for i, c in found.tests.items()}
    assert outcomes == {"test_ok": "passed", "test_bad": "failed", "test_skip": "skipped",
                        "test_sub": "failed"}  # fmt: skip
    bad = found.tests["tests/test_t.py::T::test_bad"]
    assert bad.file == "tests/test_t.py" and "AssertionError" in bad.message
    assert found.tests["tests/test_t.py::T::test_skip"].message.endswith("later")
    assert len(found.collected) == 4 and found.runner == "pytest"


async def test_unittest_reports_the_same_way(suite: Path, tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "unittest", "discover", "-s", "tests", "-t", "."]
    found = await run(suite, argv, tmp_path / "home")
    assert found is not None and found.complete, found
    assert found.runner == "unittest"
    outcomes = {i.rsplit(".", 1)[-1]: c.outcome for i, c in found.tests.items()}
    assert outcomes == {"test_ok": "passed", "test_bad": "failed", "test_skip": "skipped",
                        "test_sub": "failed"}  # fmt: skip
    assert found.tests["tests.test_t.T.test_ok"].file == "tests/test_t.py"


async def test_a_module_that_cannot_be_imported_is_a_collection_error(
    suite: Path, tmp_path: Path
) -> None:
    (suite / "tests" / "test_t.py").write_text("import nothing_here\n")
    argv = [sys.executable, "-m", "unittest", "discover", "-s", "tests", "-t", "."]
    found = await run(suite, argv, tmp_path / "home")
    assert found is not None and found.complete
    assert [c.file for c in found.collect_errors] == ["tests/test_t.py"]
    assert "nothing_here" in found.collect_errors[0].message
    pytest_run = await run(suite, [sys.executable, "-m", "pytest", "-q", "tests"], tmp_path / "h")
    assert pytest_run is not None and pytest_run.collect_errors[0].id == "tests/test_t.py"


async def test_a_process_ended_at_import_never_finishes_its_report(
    suite: Path, tmp_path: Path
) -> None:
    (suite / "tests" / "test_t.py").write_text("import os\nos._exit(0)\n")
    found = await run(suite, [sys.executable, "-m", "pytest", "-q", "tests"], tmp_path / "home")
    assert found is not None and found.sessions == 1 and found.finished == 0
    assert not found.complete


async def test_records_written_blind_to_the_descriptor_are_refused(
    suite: Path, tmp_path: Path
) -> None:
    """The code under test finds the channel (it is an open descriptor of its process)
    and writes what a reporter would: without the session's key it counts as forged."""
    forge = """\
import json, os, socket
for fd in map(int, os.listdir("/proc/self/fd")):
    try:
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        continue
    for n, record in enumerate([{"t": "start", "runner": "pytest"},
                                {"t": "test", "id": "tests/test_t.py::T::test_bad", "o": "passed"},
                                {"t": "end", "exit": 0}]):
        body = json.dumps({"s": 0, "n": n, "r": [record]})
        try:
            s.send(("0" * 64 + " " + body).encode())
        except OSError:
            pass
"""
    (suite / "tests" / "conftest.py").write_text(forge)
    found = await run(suite, [sys.executable, "-m", "pytest", "-q", "tests"], tmp_path / "home")
    assert found is not None and not found.complete, found
    assert any("failed authentication" in p for p in found.problems), found.problems
    assert found.tests["tests/test_t.py::T::test_bad"].outcome == "failed"


def test_the_assembler_checks_key_process_and_order() -> None:
    key = b"k" * 32

    def message(seq: int, signed_with: bytes = key, **body: object) -> bytes:
        text = json.dumps({"s": 0, "n": seq, "r": [body]}).encode()
        mac = hashlib.blake2b(text, key=signed_with, digest_size=32).hexdigest()
        return mac.encode() + b" " + text

    a = Assembler(key)
    a.feed(message(0, t="start", runner="pytest"), pid=10)
    a.feed(message(1, t="test", id="x", o="passed"), pid=10)
    a.feed(message(2, b"j" * 32, t="test", id="x", o="failed"), pid=10)  # another key
    a.feed(message(2, t="test", id="z", o="passed"), pid=11)  # the key, from another process
    a.feed(message(4, t="test", id="y", o="failed"), pid=10)  # a message went missing
    a.feed(b"not a message", pid=10)
    a.feed(message(5, t="end", exit=0), pid=10)
    done = a.done()
    assert done.tests["x"].outcome == "passed" and done.tests["y"].outcome == "failed"
    assert "z" not in done.tests
    assert done.problems == [
        "3 record(s) failed authentication: something other than Loopwork's reporter wrote "
        "to its channel",
        "1 record(s) arrived out of order",
    ]
    assert not done.complete


async def test_one_gate_reports_one_test_session(suite: Path, tmp_path: Path) -> None:
    line = f"{sys.executable} -m pytest -q tests; {sys.executable} -m pytest -q tests"
    found = await run(suite, ["bash", "-c", line], tmp_path / "home")
    assert found is not None and found.sessions == 1 and not found.complete
    assert any("give each test run a gate of its own" in p for p in found.problems)


PATCHES = {
    "json and os.write patched at import": """import json, os
_dumps, _write = json.dumps, os.write
def dumps(obj, *a, **k):
    for r in obj.get("r", ()) if isinstance(obj, dict) else ():
        if r.get("o") == "failed":
            r["o"] = "passed"
    return _dumps(obj, *a, **k)
json.dumps = dumps
def write(fd, data):
    n = _write(fd, data)
    if b'"t":"end"' in data:
        os._exit(0)
    return n
os.write = write
""",
    "the report class patched": """import pytest
_make = pytest.TestReport.from_item_and_call.__func__
def make(cls, item, call):
    report = _make(cls, item, call)
    if report.failed:
        report.outcome, report.longrepr = "passed", None
    return report
pytest.TestReport.from_item_and_call = classmethod(make)
""",
}


@pytest.mark.parametrize("name", list(PATCHES))
async def test_what_code_under_test_patches_later_does_not_change_the_report(
    suite: Path, tmp_path: Path, name: str
) -> None:
    (suite / "tests" / "conftest.py").write_text(PATCHES[name])
    found = await run(suite, [sys.executable, "-m", "pytest", "-q", "tests"], tmp_path / "home")
    assert found is not None
    assert found.tests["tests/test_t.py::T::test_bad"].outcome == "failed", name


async def test_the_key_cannot_be_read_again_from_the_channel(suite: Path, tmp_path: Path) -> None:
    """The key is in the channel once; the reporter took it before any test ran."""
    steal = """\
import os, socket
found, kept = [], []
for fd in range(3, 256):
    try:
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        continue
    kept.append(s)
    if s.type == socket.SOCK_SEQPACKET:
        try:
            found.append(s.recv(256, socket.MSG_DONTWAIT))
        except BlockingIOError:
            found.append(b"nothing")
open(os.environ["STOLEN"], "w").write(repr(found))
"""
    (suite / "tests" / "conftest.py").write_text(steal)
    stolen = tmp_path / "stolen.txt"
    os.environ["STOLEN"] = str(stolen)
    try:
        await run(suite, [sys.executable, "-m", "pytest", "-q", "tests"], tmp_path / "home")
    finally:
        del os.environ["STOLEN"]
    seen = stolen.read_text()
    assert seen.startswith("[b'nothing'") and set(eval(seen)) == {b"nothing"}  # found, no key


async def test_a_channel_that_nothing_used_gives_no_report(tmp_path: Path) -> None:
    channel = Channel()
    channel.start()
    found = await channel.finish()
    assert found.sessions == 0 and found.tests == {}


JUNIT = """<?xml version="1.0"?>
<testsuites>
  <testsuite name="s">
    <testcase classname="pkg.T" name="ok" file="t.go"/>
    <testcase classname="pkg.T" name="bad"><failure message="boom">trace</failure></testcase>
    <testcase classname="pkg.T" name="skip"><skipped/></testcase>
    <testcase classname="pkg.T" name="err"><error message="x"/></testcase>
  </testsuite>
  <testcase classname="top" name="bare"/>
</testsuites>
"""


def test_junit_cases_wherever_they_sit(tmp_path: Path) -> None:
    (tmp_path / "junit.xml").write_text(JUNIT)
    found = junit.read(tmp_path, "junit.xml")
    assert found is not None and found.complete and found.runner == "junit"
    assert {i: c.outcome for i, c in found.tests.items()} == {
        "pkg.T::ok": "passed", "pkg.T::bad": "failed", "pkg.T::skip": "skipped",
        "pkg.T::err": "error", "top::bare": "passed",
    }  # fmt: skip
    assert found.tests["pkg.T::bad"].message == "boom\ntrace"
    assert found.tests["pkg.T::ok"].file == "t.go"
    assert junit.read(tmp_path, "other-*.xml") is None


def test_hostile_junit_files_are_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.xml"
    secret.write_text(JUNIT)
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "a-link.xml").symlink_to(secret)
    os.mkfifo(folder / "b-fifo.xml")
    (folder / "c-bomb.xml").write_text(
        '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]>'
        "<testsuites><testcase classname='c' name='&b;'/></testsuites>"
    )
    (folder / "d-big.xml").write_bytes(b"<testsuites>" + b" " * (junit.FILE_BYTES + 10))
    found = junit.read(folder, "*.xml")
    assert found is not None and found.tests == {}
    assert not found.complete
    problems = " | ".join(found.problems)
    assert "a-link.xml is a symbolic link" in problems
    assert "b-fifo.xml is not a regular file" in problems
    assert "c-bomb.xml is not JUnit XML" in problems
    assert "d-big.xml is" in problems and "read the first" in problems


def test_the_reporters_folder_is_readable_by_everyone(tmp_path: Path) -> None:
    folder = reporting.site_dir(tmp_path / "home")
    assert sorted(p.name for p in folder.glob("*.py")) == ["loopwork_report.py", "sitecustomize.py"]
    assert folder.stat().st_mode & 0o777 == 0o755
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert len(files) == 6  # two sources, their bytecode, the entry point and its metadata
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in files)
    assert reporting.site_dir(tmp_path / "home") == folder


async def test_a_subtest_that_skips_is_not_a_rewritten_pass(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_k.py").write_text(
        "import unittest\n\n\nclass K(unittest.TestCase):\n"
        "    def test_some_skip(self):\n"
        "        for i in range(2):\n"
        "            with self.subTest(i=i):\n"
        "                if i:\n"
        "                    self.skipTest('not here')\n"
        "                self.assertEqual(i, 0)\n"
    )
    found = await run(tmp_path, [sys.executable, "-m", "pytest", "-q", "tests"], tmp_path / "home")
    assert found is not None and found.complete, found
    case = found.tests["tests/test_k.py::K::test_some_skip"]
    assert case.outcome == "passed", case
