"""A team's history as its benchmark: ``loop eval mine``, then ``loop eval`` of the suite.

A real server and worker, the real sandbox. The history is the shipped example's
(``examples/eval/mined/make_history.py``: five fixes each with the test that proves it, a
README change, a refactor whose tests pass before and after), with one more commit on
top that adds a flaky test (a coin served over HTTP, tails then heads). Mining finds
exactly the five fixes, each with the FAIL_TO_PASS ids that running pytest by hand at the
parent (with the fix's tests) and at the fix gives; then two harnesses run the suite with
the fix's tests hidden from them, and the case the hasty one misses is named.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from temporalio.client import Client

from loop.cli.evals import print_report, run_eval
from loop.contracts import MINE_WORKFLOW, MineInput, MineResult, SandboxPolicy
from loop.loaders import load_harness, load_suite
from loop.rules.tamper import is_test_path
from loop.settings import Settings
from tests.e2e.test_verdicts import Coin
from tests.support.repos import EXAMPLES, git
from worker import build_worker

pytestmark = pytest.mark.timeout(600)
MINED = EXAMPLES / "eval" / "mined"
RUN = f"{sys.executable} -m pytest -q -p no:cacheprovider tests"


def history(root: Path) -> tuple[Path, list[str]]:
    spec = importlib.util.spec_from_file_location("make_history", MINED / "make_history.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    repo = root / "textkit"
    return repo, module.build(repo)


def by_hand(repo: Path, commit: str, scratch: Path) -> list[str]:
    """FAIL_TO_PASS as a person gets it: pytest's own ``-rA`` at the parent with the fix's
    test files laid over it, and at the fix; the fix's tests failing there, passing here."""
    parent = git(repo, "rev-parse", f"{commit}^")
    changed = git(repo, "diff", "--name-only", "--diff-filter=AM", parent, commit).splitlines()
    tests = [f for f in changed if is_test_path(f)]

    def outcomes(tree: Path) -> dict[str, str]:
        done = subprocess.run(
            [*RUN.split(), "-rA", "--tb=no"], cwd=tree, capture_output=True, text=True,
            check=False,
        )  # fmt: skip
        found = {}
        for line in done.stdout.splitlines():
            m = re.match(r"^(PASSED|FAILED|ERROR) (\S+)", line)
            if m:
                found[m.group(2)] = m.group(1)
        return found

    trees = {}
    for name, at in (("parent", parent), ("fix", commit)):
        tree = scratch / f"{commit[:8]}-{name}"
        git(repo, "worktree", "add", "-q", "--detach", str(tree), at)
        trees[name] = tree
    for path in tests:
        (trees["parent"] / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(trees["fix"] / path, trees["parent"] / path)
    before, after = outcomes(trees["parent"]), outcomes(trees["fix"])
    return sorted(
        i for i, o in after.items()
        if o == "PASSED" and i.split("::")[0] in tests and before.get(i) != "PASSED"
    )  # fmt: skip


async def test_a_history_mined_into_a_suite_and_run_by_two_harnesses(
    client: Client, settings: Settings, tmp_path: Path
) -> None:
    repo, commits = history(tmp_path)
    coin = Coin("TH")
    try:
        (repo / "tests" / "test_flaky.py").write_text(coin.test_file())
        (repo / "textkit" / "words.py").write_text(
            (repo / "textkit" / "words.py").read_text() + "\n\nWORD = 'word'\n"
        )
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "Ask the coin service (a flaky test)")
        flaky = git(repo, "rev-parse", "HEAD")
        out = tmp_path / "suite"
        policy = SandboxPolicy(gate_network="proxy", allow_hosts=[coin.address])
        inp = MineInput(repo=str(repo), name="textkit", run=RUN, out=str(out), sandbox=policy)
        async with build_worker(client, settings):
            mined: MineResult = await client.execute_workflow(
                MINE_WORKFLOW, inp, id="mine-textkit", task_queue=settings.task_queue,
                result_type=MineResult,
            )  # fmt: skip
    finally:
        coin.server.shutdown()

    fixes = [commits[i] for i in (1, 3, 5, 6, 7)]  # oldest first: slug, clamp, words, title, money
    assert sorted(c.commit for c in mined.cases) == sorted(fixes), mined.dropped
    dropped = " | ".join(mined.dropped)
    assert commits[4][:12] in dropped and "pass on the parent's code too" in dropped  # refactor
    assert flaky[:12] in dropped and "flaky: tests/test_flaky.py::test_toss" in dropped
    assert commits[2][:12] not in dropped  # the README commit is no candidate at all
    for case in mined.cases:
        assert case.fail_to_pass == by_hand(repo, case.commit, tmp_path / "by-hand"), case.id
    assert {c.commit: c.fail_to_pass for c in mined.cases}[commits[7]] == [
        "tests/test_money.py::test_round", "tests/test_money.py::test_small_cents",
    ]  # fmt: skip

    # The suite: plain YAML, each case's repository one commit, its tests out of reach.
    suite_file = Path(mined.suite_path)
    written = yaml.safe_load(suite_file.read_text())
    assert [c["id"] for c in written["cases"]] == [c.id for c in mined.cases]
    for case in written["cases"]:
        case_repo = out / case["repo"]
        assert git(case_repo, "rev-list", "--all", "--count") == "1"
        assert git(case_repo, "rev-parse", "HEAD") == case["commit"]
        hidden = case["verify"][0]["hidden_tests"]
        for test_file in hidden["files"]:
            kept = (out / hidden["ref"] / test_file).read_bytes()
            there = case_repo / test_file
            assert not there.exists() or there.read_bytes() != kept, (
                "the fix's version of its tests is not in the case's repository"
            )
    assert oct(out.stat().st_mode & 0o777) == "0o711"
    assert oct((out / "hidden").stat().st_mode & 0o777) == "0o700"

    # Two harnesses on it: the careful one fixes all five, the hasty one misses the money.
    suite = load_suite(suite_file, settings.home)
    careful = load_harness(MINED / "careful.yaml")
    hasty = load_harness(MINED / "hasty.yaml")
    async with build_worker(client, settings):
        report = await run_eval(client, suite, [careful, hasty], settings.task_queue)
    by = {h.harness: h for h in report.harnesses}
    assert (by["careful"].accepted, by["hasty"].accepted) == (5, 4), report.outcomes
    money = next(c.id for c in mined.cases if c.commit == commits[7])
    assert [f.case for f in report.flipped] == [money]
    console = Console(record=True, width=160)
    print_report(console, report)
    text = console.export_text()
    assert f"flipped: {money}" in text and "cost / accepted" in text
    assert "FAIL_TO_PASS" in text and "2/2" in text and "0/2" in text, text
    saved = json.loads((settings.home / "eval-results.json").read_text())["runs"][0]
    assert saved["suite"] == "textkit"
