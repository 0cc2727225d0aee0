"""A repository's own environment, end to end: built once in the sandbox, laid read-only into
every attempt's and gate's sandbox, shared by tasks on the same key (docs/guides/environment.md).

The calc repository (``tests.support.environments``) cannot import without its environment:
its code is in ``src/`` (importable only through the editable install's path) and imports
``dep`` (installed by the setup). Tests that need the package registry are in
test_environment_registry.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from activities.host import environments
from activities.gates import Ran
from loop.contracts import SETUP_TREE, GateResult, SuiteReport, TaskResult, TaskState
from loop.settings import Settings
from tests.support.agents import write_agent
from tests.support.environments import FIXED, TESTS, environment, make_env_repo
from tests.support.host import LEVELS
from tests.support.tasks import result_of, start, task
from worker import build_worker

pytestmark = pytest.mark.timeout(180)

FIX_AND_TRY_THE_ENVIRONMENT = f"""
calc = pathlib.Path("src/calc/__init__.py")
calc.write_text({FIXED!r})
pathlib.Path("tests/test_more.py").write_text(
    "import unittest\\nfrom calc import add\\n\\n\\nclass More(unittest.TestCase):\\n"
    "    def test_one_and_one(self):\\n        self.assertEqual(add(1, 1), 2)\\n"
)
site = next(pathlib.Path(".venv/lib").glob("python3*/site-packages"))
tried = {{}}
for name, write in (
    ("dep", lambda: (site / "dep.py").write_text("VALUE = 99\\n")),
    ("new", lambda: (site / "planted.py").write_text("X = 1\\n")),
    ("through the link", lambda: pathlib.Path({SETUP_TREE!r}, ".venv", "planted").write_text("")),
    ("emptied", lambda: __import__("shutil").rmtree(".venv")),
    ("moved away", lambda: pathlib.Path(".venv").rename("venv-aside")),
):
    try:
        write()
        tried[name] = "written"
    except OSError as e:
        tried[name] = e.errno
(own / "tried.json").write_text(json.dumps(tried))
out.write_text("fixed add")
"""
"""Fixes the bug, adds a regression test, and tries to change the environment four ways."""


def env_task(repo: Path, agent: list[str], level: str, **overrides: object) -> dict:
    spec = task(
        repo,
        agent,
        verify=[
            {"name": "tests", "run": TESTS, "timeout": 60},
            {"name": "new-test", "regression_test": True},
        ],
        environment=environment(),
        sandbox={"mode": level},
    )
    spec.update(overrides)
    return spec


def events(result: TaskResult, kind: str) -> list[str]:
    return [e.detail for e in result.events if e.kind == kind]


def gate(result: TaskResult, name: str) -> GateResult:
    verdict = result.attempts[-1].verdict
    assert verdict is not None
    return next(g for g in verdict.gates if g.name == name)


def report(result: TaskResult, name: str) -> SuiteReport:
    """The per-test report the gate's verdict was made of (kept with its run)."""
    summary = gate(result, name).evidence.tests
    assert summary is not None
    ran = Ran.model_validate_json(Path(summary.report_path).read_text())
    assert ran.report is not None
    return ran.report


@pytest.mark.parametrize("level", LEVELS)
async def test_a_task_needing_its_environment_reaches_done(
    client: Client, settings: Settings, tmp_path: Path, level: str
) -> None:
    repo = make_env_repo(tmp_path / "repo")
    agent = write_agent(tmp_path, FIX_AND_TRY_THE_ENVIRONMENT)
    spec = env_task(repo, agent, level)
    async with build_worker(client, settings):
        result = await result_of(await start(client, settings, spec), within=150)
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert len(result.attempts) == 1
    built = events(result, "environment")
    assert len(built) == 1 and ": built in " in built[0], built

    # At base the tests ran and failed by id (not at import): the environment was there.
    brief = Path(result.explore_brief).read_text()
    assert "fails at base: `tests.test_calc.Calc.test_add`" in brief, brief
    # The commit's run: judged by test id, the one failing at base passes now.
    tests = report(result, "tests")
    assert tests.tests["tests.test_calc.Calc.test_add"].outcome == "passed"
    assert "1 required now pass" in gate(result, "tests").evidence.detail
    # regression_test ran the new test on base's code, with the environment too: it
    # failed there on the bug, not on an import.
    regression = gate(result, "new-test").evidence.tests
    assert regression is not None
    [failing] = regression.failing
    assert failing.id == "tests.test_more.More.test_one_and_one"
    assert failing.outcome == "failed" and "AssertionError: 0 != 2" in failing.message, failing

    # The agent could change nothing of it: every write refused, the folder stayed.
    tried = json.loads(
        (settings.runs / spec["id"] / "attempt-1" / "agent" / "tried.json").read_text()
    )
    erofs, ebusy = 30, 16
    assert set(tried.values()) <= {erofs, ebusy}, tried
    assert tried["moved away"] == ebusy and tried["dep"] == erofs, tried
    [kept] = environments.listing(settings.home)
    root = environments.envs(settings.home) / kept.key / "tree" / ".venv"
    [dep] = root.glob("lib/python3*/site-packages/dep.py")
    assert dep.read_text() == "VALUE = 1\n"
    assert not list(root.glob("lib/python3*/site-packages/planted.py"))
    # Nothing of it is left in the worktree: no empty .venv the agent would seem to make.
    assert not (Path(result.worktree) / ".venv").exists()
    assert result.attempts[0].make is not None and not result.attempts[0].make.ignored_files
