"""Harness evaluation on the example suite: the table matches the runs; harnesses can't cheat.

What needs no server (the loaders' refusal, snapshots) is in tests/unit/test_eval.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from rich.console import Console
from temporalio.client import Client

from loop.cli.evals import print_report, run_eval
from loop.contracts import TaskResult, TaskState, workflow_id_for
from loop.loaders import load_harness, load_suite
from loop.settings import Settings
from tests.support.repos import EXAMPLES
from tests.support.tasks import result_of
from worker import build_worker

pytestmark = pytest.mark.timeout(180)
EVAL = EXAMPLES / "eval"


async def test_two_harnesses_on_the_example_suite(client: Client, settings: Settings):
    suite = load_suite(EVAL / "suite.yaml", settings.home)
    careful, hasty = load_harness(EVAL / "careful.yaml"), load_harness(EVAL / "hasty.yaml")
    async with build_worker(client, settings):
        report = await run_eval(client, suite, [careful, hasty], settings.task_queue)
    by = {h.harness: h for h in report.harnesses}
    assert (by["careful"].accepted, by["hasty"].accepted) == (3, 1)
    assert by["careful"].pass_rate == 1.0 and by["hasty"].pass_rate == pytest.approx(1 / 3)
    assert by["careful"].mean_attempts == pytest.approx((2 + 1 + 2) / 3)
    assert by["hasty"].escalations == 2  # the two stalled cases asked for a person
    assert sorted(f.case for f in report.flipped) == ["slugify", "wordcount"]
    # The table is computed from the runs: every outcome is its child task's result.
    for o in report.outcomes:
        result = await result_of(
            client.get_workflow_handle(workflow_id_for(o.task_id), result_type=TaskResult)
        )
        assert (o.state, o.attempts) == (result.state, len(result.attempts))
        assert (result.spec_hash and result.final_action == "left_in_worktree") or not o.accepted
    saved = json.loads((settings.home / "eval-results.json").read_text())["runs"][0]
    assert saved["suite_hash"] == report.suite_hash and saved["run"] == report.run
    assert all(o.state != TaskState.RUNNING for o in report.outcomes)
    console = Console(record=True, width=150)
    print_report(console, report)
    text = console.export_text()
    assert "careful" in text and "100%" in text and "33%" in text
    assert "flipped: slugify" in text and "hasty vs careful: pass rate -67%" in text


async def test_cli_refuses_a_cheating_harness_with_exit_2(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: cheat\nagent: {command: [python3, x.py]}\nrubric: lenient\n")
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "loop"),
        "eval",
        str(EVAL / "suite.yaml"),
        "--harness",
        str(bad),
        env={**os.environ, "LOOP_HOME": str(tmp_path / "home")},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 2
    assert "may not change the gates" in err.decode() and "Traceback" not in err.decode()


async def test_a_harness_with_candidates_reports_pass_at_1_and_pass_at_k(
    client: Client, settings: Settings
) -> None:
    """Two tries per case, one attempt each: the hasty guess fails slugify and wordcount,
    the sure fix passes all three. pass@1 is the share of tries that passed per case,
    pass@k whether one did; the cost per accepted task counts both tries."""
    suite = load_suite(EVAL / "suite.yaml", settings.home)
    careful, tries = load_harness(EVAL / "careful.yaml"), load_harness(EVAL / "two-tries.yaml")
    async with build_worker(client, settings):
        report = await run_eval(client, suite, [careful, tries], settings.task_queue)
    by = {h.harness: h for h in report.harnesses}
    two = by["two-tries"]
    assert (two.k, two.accepted, two.pass_at_k) == (2, 3, 1.0)
    assert two.pass_at_1 == pytest.approx((1 / 2 + 2 / 2 + 1 / 2) / 3)
    assert by["careful"].k == 1 and by["careful"].pass_at_1 == by["careful"].pass_rate == 1.0
    outcomes = [o for o in report.outcomes if o.harness == "two-tries"]
    assert sorted((o.case, o.candidates, o.candidates_passed) for o in outcomes) == [
        ("clamp", 2, 2), ("slugify", 2, 1), ("wordcount", 2, 1)
    ]  # fmt: skip
    console = Console(record=True, width=160)
    print_report(console, report)
    text = console.export_text()
    assert "67%" in text and "100% (k=2)" in text, text
