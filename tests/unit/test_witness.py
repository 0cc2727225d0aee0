"""The witness (``activities/host/reporting/witness``): a suite run again outside pytest,
test by test, against the reporter's outcomes under pytest. Real processes, no sandbox
(the sandboxed runs are tests/e2e/test_verdict_attacks.py and tests/e2e/test_real_suites.py).
"""

from __future__ import annotations

import asyncio
import collections
import os
import sys
from pathlib import Path

from activities.host import reporting
from loop.contracts import RunGate, SandboxPolicy, SuiteReport

CONFTEST = """\
import pytest


@pytest.fixture(scope="module")
def shared():
    return {"n": 0}


@pytest.fixture
def counter(shared):
    shared["n"] += 1
    yield shared["n"]
    shared["n"] -= 1


@pytest.fixture(autouse=True)
def marker(monkeypatch):
    monkeypatch.setenv("SUITE_MARK", "on")
"""

SUITE = """\
import itertools
import os
import subprocess
import sys
import unittest

import pytest


def test_plain():
    assert 1 + 1 == 2


def test_fixtures(counter, tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    print("hello")
    assert capsys.readouterr().out == "hello\\n"
    assert counter == 1 and os.environ["SUITE_MARK"] == "on"


def test_capfd(capfd):
    subprocess.run([sys.executable, "-c", "print('from a child')"], check=True)
    assert capfd.readouterr().out == "from a child\\n"


@pytest.mark.parametrize("text", ["", "a b", "ü"])
@pytest.mark.parametrize("n", itertools.chain([1], [2]))
def test_ids(text, n):
    assert isinstance(text, str) and n in (1, 2)


@pytest.mark.parametrize("x", [pytest.param(1, id="one"), pytest.param(2, marks=pytest.mark.xfail)])
def test_marks(x):
    assert x == 1


def test_knows_it_is_tested():
    assert any(k.startswith("PYTEST") for k in os.environ)


def test_sees_no_witness():
    assert not [m for m in sys.modules if m.startswith("loopwork_witness")]
    assert not [p for p in sys.path if "/witness/" in p + "/"]


def test_needs_a_plugin(mocker):
    assert mocker


class TestClass:
    @pytest.fixture
    def value(self):
        return 3

    def test_method(self, value):
        assert value == 3


class Case(unittest.TestCase):
    def test_subtests(self):
        for i in range(2):
            with self.subTest(i=i):
                if i:
                    self.skipTest("not this one")
                self.assertEqual(i, 0)
"""


async def run(tree: Path, home: Path, setup: reporting.Reporting) -> SuiteReport:
    env = dict(os.environ, **setup.env, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    env["PYTEST_ADDOPTS"] = "-p no:cacheprovider -p pytest_asyncio.plugin"
    if reporting.FD_VARIABLE in setup.env:
        env["PYTEST_ADDOPTS"] += f" {reporting.pytest_options()}"
    setup.start()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "pytest", "-q", "tests", cwd=tree, env=env,
            pass_fds=setup.pass_fds, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        await proc.wait()
        found = await setup.collect()
    finally:
        setup.close()
    assert found is not None
    return found


async def test_the_witness_sees_what_pytest_saw_and_what_only_pytest_makes_true(
    tmp_path: Path,
) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text(CONFTEST)
    (tmp_path / "tests" / "test_s.py").write_text(SUITE)
    gate, off, home = RunGate(name="t", run="x"), SandboxPolicy(mode="off"), tmp_path / "home"
    first = await run(tmp_path, home, reporting.prepare(gate, off, home, tmp_path / "r"))
    assert first.complete, first.problems
    files: dict[str, list[str]] = collections.defaultdict(list)
    for case in first.tests.values():
        files[case.file].append(case.id)
    plan = {"runner": first.runner, "root": first.root, "files": sorted(files.items())}
    seen = await run(
        tmp_path, home, reporting.prepare_witness(gate, off, home, tmp_path / "w", plan)
    )
    assert seen.complete and seen.runner == "witness", seen.problems
    outcomes = {i: (c.outcome, seen.tests[i].outcome) for i, c in first.tests.items()}
    base = "tests/test_s.py::"
    assert outcomes[base + "test_knows_it_is_tested"] == ("passed", "failed")
    assert outcomes[base + "test_needs_a_plugin"][1] == "missing"
    assert "mocker" in seen.tests[base + "test_needs_a_plugin"].message
    assert outcomes[base + "test_sees_no_witness"] == ("passed", "passed")
    assert outcomes[base + "test_marks[one]"] == ("passed", "passed")
    assert outcomes[base + "test_marks[2]"] == ("xfailed", "xfailed")
    assert outcomes[base + "Case::test_subtests"] == ("passed", "passed")
    assert {i for i in outcomes if i.startswith(base + "test_ids[")} == {
        base + f"test_ids[{n}-{t}]" for n in (1, 2) for t in ("", "a b", "\\xfc")
    }
    same = [i for i, (a, b) in outcomes.items() if a == b]
    assert len(same) == len(outcomes) - 2, outcomes
