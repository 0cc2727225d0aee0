"""The composition root registers every declared activity stub; examples validate.

The worker as a process (metrics, drain on SIGTERM) is in tests/e2e/test_worker.py.
"""

from __future__ import annotations

import contextlib
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.workflow import _Definition

from loop import contracts
from loop.contracts import ALL_ACTIVITIES, TaskSpec
from loop.settings import Settings
from tests.support.repos import EXAMPLES, ROOT
from tests.support.temporal import activity_name, workflow_name
from worker import WORKFLOWS, StartingSandbox, activities_for


def declared() -> set[str]:
    """Every typed activity stub in loop.contracts, wherever it is grouped."""
    return {v.name for v in vars(contracts).values() if isinstance(v, contracts.ActivityDef)}


def test_worker_registers_every_declared_activity(tmp_path: Path):
    registered = {activity_name(a) for a in activities_for(Settings(home=tmp_path))}
    assert registered == declared()
    assert {d.name for d in ALL_ACTIVITIES} <= declared()


def defined_workflows() -> set[str]:
    """Every workflow class in ``workflows/`` (a ``@workflow.defn`` class of any module)."""
    found: set[str] = set()
    for file in sorted((ROOT / "workflows").glob("*.py")):
        module = importlib.import_module(f"workflows.{file.stem}")
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == module.__name__:
                with contextlib.suppress(Exception):
                    found.add(workflow_name(value))
    return found


def test_worker_registers_every_workflow():
    """A workflow left out of the worker is a task nobody runs (triage, eval, the ledger)."""
    names = {workflow_name(w) for w in WORKFLOWS}
    assert names == defined_workflows()
    assert {"TaskWorkflow", "AgentWorkflow", "PeriodBudgetWorkflow", "TriageWorkflow",
            "EvalWorkflow"} <= names  # fmt: skip


@pytest.mark.parametrize("name", ["claude-code.yaml", "codex.yaml", "aider.yaml", "openai.yaml"])
def test_example_task_files_are_valid(name: str):
    spec = TaskSpec.model_validate(yaml.safe_load((EXAMPLES / name).read_text()))
    if spec.agent.backend == "command":
        assert spec.agent.command and "LOOP_PROMPT_FILE" in " ".join(spec.agent.command)
    else:
        assert spec.agent.model and any(g.kind == "llm_review" for g in spec.verify)


def test_a_bad_setting_is_one_clear_error():
    from loop.errors import BadInput

    with pytest.raises(BadInput, match="LOOP_MAX_ACTIVITIES='many'"):
        Settings.from_env({"LOOP_MAX_ACTIVITIES": "many"})


def test_the_build_id_is_the_workflow_codes_digest(tmp_path: Path, monkeypatch):
    """Given to the SDK (its default hashes every loaded module at each start): the same
    code is the same id, one changed line of a workflow or of what it imports is another."""
    import shutil

    import worker

    for package in ("workflows", "loop"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("*.pyc"))
    ids = []
    monkeypatch.setattr(worker, "ROOT", tmp_path)
    for change in ("", "# one more line\n"):
        with (tmp_path / "workflows" / "task.py").open("a") as f:
            f.write(change)
        worker.build_id.cache_clear()
        ids.append(worker.build_id())
    monkeypatch.setattr(worker, "ROOT", ROOT)
    worker.build_id.cache_clear()
    assert ids[0] == worker.build_id(), "a copy of the same code has the same id"
    assert ids[1] != ids[0]
    assert ids[0].startswith("loopwork-") and len(ids[0]) == len("loopwork-") + 16


@pytest.mark.parametrize("workflow_class", WORKFLOWS, ids=lambda c: c.__name__)
async def test_every_workflow_imports_in_the_sdks_sandbox(workflow_class: type):
    """The check the worker no longer makes at each start (``StartingSandbox``): the SDK's
    sandbox imports the workflow's module with its restrictions, or raises."""
    SandboxedWorkflowRunner().prepare_workflow(_Definition.must_from_class(workflow_class))


def test_the_workers_sandbox_is_the_sdks_minus_the_start_check():
    """Workflows run in the SDK's sandbox, with its restrictions and its import per run."""
    assert issubclass(StartingSandbox, SandboxedWorkflowRunner)
    assert StartingSandbox().restrictions == SandboxedWorkflowRunner().restrictions


FIRST_USE_AT_ONCE = """
import sys, threading, yaml
from loop.contracts import TaskSpec
data = yaml.safe_load(open(sys.argv[1]))
start = threading.Barrier(16)
got, failed = [], []
def first_use():
    start.wait()
    try:
        got.append(TaskSpec.model_validate(data).model_dump_json())
    except Exception as e:
        failed.append(repr(e))
threads = [threading.Thread(target=first_use) for _ in range(16)]
for t in threads: t.start()
for t in threads: t.join()
print(len(set(got)), len(got), failed)
"""


def test_a_contract_model_built_at_first_use_is_safe_from_many_threads_at_once():
    """Models build their validators when first used, and a worker may first use one
    from a workflow thread and its event loop at once: in a fresh process, sixteen
    threads' first uses of the largest model all validate, alike (pydantic builds under a
    lock from 2.14, which pyproject.toml requires)."""
    example = str(EXAMPLES / "openai.yaml")
    ran = subprocess.run(
        [sys.executable, "-c", FIRST_USE_AT_ONCE, example],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert ran.stdout.split() == ["1", "16", "[]"], ran.stdout + ran.stderr[-2000:]
