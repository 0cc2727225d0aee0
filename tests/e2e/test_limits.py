"""Limits never wedge a task: what is too big is cut, said so, and the task goes on.

A real server and worker. An attempt that changes 10,000 files, claims 3 MB and
has a gate that prints 50 MB; a triage of 10,000 GitHub issues, one of them with a
body of 900 KB. Each ends in a named state or a triage result, no payload near
Temporal's limits, no workflow task failed, nothing left neither running nor ended.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle

from loop.contracts import CHANGED_SHOWN, OUTPUT_TAIL_CHARS, TaskSpec, TaskState, workflow_id_for
from loop.settings import Settings
from loop.tasks import start_task
from tests.e2e.test_triage import run_triage, started_spec
from tests.support.agents import write_agent
from tests.support.tasks import result_of, task
from tests.support.triage import NOTHING, template, write_sources
from worker import build_worker

pytestmark = pytest.mark.timeout(240)

MANY = """
notes = pathlib.Path("notes")
notes.mkdir(exist_ok=True)
for i in range(10_000):
    (notes / f"n{i:05}.md").write_text(f"{i}\\n")
pathlib.Path("slugify.py").write_text(COMPLETE)
out.write_text("claim " * (3 << 19))  # 3 MB
"""
LOUD = "head -c 50000000 /dev/zero | tr '\\\\0' x; echo; exit 0"
HISTORY_BOUND = 2 << 20
"""A task's whole history stays below this (Temporal's limit is per payload 2 MB, per
history 50 MB; a task should be nowhere near either)."""


async def history_size(handle: WorkflowHandle) -> tuple[int, list[str]]:
    total, failed = 0, []
    async for ev in handle.fetch_history_events():
        total += ev.ByteSize()
        if ev.HasField("workflow_task_failed_event_attributes"):
            failed.append(ev.workflow_task_failed_event_attributes.failure.message)
    return total, failed


async def test_an_attempt_too_big_everywhere_is_cut_and_ends(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    spec = task(demo_repo, write_agent(tmp_path, MANY), budget={"max_attempts": 1})
    spec["verify"] += [{"name": "loud", "run": LOUD, "report": "exit", "timeout": 120}]
    spec["verify"][1]["diff_scope"]["allow"] = ["slugify.py", "notes/**"]
    spec["approval_timeout"] = 1
    async with build_worker(client, settings):
        handle, _ = await start_task(client, TaskSpec.model_validate(spec), settings.task_queue)
        result = await result_of(handle, within=200)
        size, failed = await history_size(handle)
    assert result.state in (TaskState.NEEDS_HUMAN, TaskState.BUDGET_EXCEEDED), result.reason
    made = result.attempts[0].make
    assert made is not None
    assert made.changed_count == 10_001 and len(made.changed_files) == CHANGED_SHOWN
    assert len(made.claim) < 20_000 and "bytes; read the first" in made.claim
    verdict = result.attempts[0].verdict
    assert verdict is not None
    gates = {g.name: g for g in verdict.gates}
    assert gates["tests"].evidence.tests is not None  # judged by test all the same
    assert gates["scope"].passed and "10001 changed file(s)" in gates["scope"].evidence.detail
    assert len(gates["loud"].evidence.output_tail) < OUTPUT_TAIL_CHARS + 200
    assert gates["loud"].evidence.exit_code == 0  # 50 MB of output is only a long log
    assert "diff-size" in gates["tests"].evidence.detail  # a change that size: a person looks
    assert failed == [], failed
    assert size < HISTORY_BOUND, size
    assert len(json.dumps(result.model_dump(mode="json"))) < HISTORY_BOUND


async def test_ten_thousand_issues_and_a_huge_body_are_cut(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    issues = [
        {"number": n, "title": f"Issue {n}", "body": "x", "labels": [], "state": "open"}
        for n in range(1, 10_001)
    ]
    issues[0]["body"] = "A long report. " * 60_000  # 900 KB
    (tmp_path / "issues.json").write_text(json.dumps(issues))
    name = f"gh{uuid.uuid4().hex[:6]}"
    source = {"name": name, "kind": "github_issues", "path": "issues.json", "max_items": 200}
    tmpl = template(demo_repo, write_agent(tmp_path, NOTHING), approval_timeout=1)
    file = write_sources(tmp_path, tmpl, [source], max_new=1)
    triage_id = f"triage-limits-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, settings):
        result = await run_triage(client, settings, file, workflow_id=triage_id)
        spec, _ = await started_spec(client, f"{name}-1")
        await result_of(client.get_workflow_handle(workflow_id_for(f"{name}-1")), within=120)
        for workflow_id in (triage_id, workflow_id_for(f"{name}-1")):
            size, failed = await history_size(client.get_workflow_handle(workflow_id))
            assert failed == [] and size < HISTORY_BOUND, (workflow_id, size, failed)
    assert "9800 more items past max_items=200 not listed" in " ".join(result.notes), result.notes
    assert len(spec.goal) <= 20_000 and spec.goal.endswith("[… cut]")
