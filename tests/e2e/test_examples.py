"""Every shipped example and every task file of the guides runs as written, with the
``loop`` a person types, against a scripted model endpoint: the examples on the demo's
repository (where their relative ``repo`` names it), the guides' task files on a second
repository laid out as they expect (``src/``, pytest). Only the model endpoint is the
test's, and, for an environment that installs from PyPI, this machine's way there.

The agent CLIs' own examples (claude-code.yaml, codex.yaml, aider.yaml) run in
test_agents.py, examples/eval in test_eval.py, examples/triage in test_readme.py and
examples/demo in test_devserver.py (``loop demo``).
"""

from __future__ import annotations

import re
import shutil
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from loop.contracts import FinalAction, TaskResult, TaskState, workflow_id_for
from loop.settings import Settings
from tests.e2e.test_environment_registry import allowed, trusted
from tests.support.agent_endpoints import ScriptedClaude, turn
from tests.support.agents import COMPLETE_FIX, needs_cli
from tests.support.model_server import ScriptedModel, reply
from tests.support.repos import EXAMPLES, ROOT, git, make_demo_repo, make_src_repo
from tests.support.tasks import result_of
from tests.support.ui import run_loop
from worker import build_worker

pytestmark = pytest.mark.timeout(300)


async def approved_to_the_end(
    env: WorkflowEnvironment, client: Client, settings: Settings, cwd: Path, file: Path
) -> TaskResult:
    """``loop start FILE --wait`` until it waits for approval (exit 3), ``loop approve``,
    and the task's result."""
    code, said = await run_loop(env, settings, "start", str(file), "--wait", cwd=cwd, within=240)
    assert code == 3 and "AWAITING_APPROVAL" in said, said
    task_id = yaml.safe_load(file.read_text())["id"]
    code, said = await run_loop(env, settings, "approve", task_id, cwd=cwd, within=240)
    assert code == 0 and "DONE_WITH_EVIDENCE: verified and merged" in said, said
    handle = client.get_workflow_handle(workflow_id_for(task_id), result_type=TaskResult)
    return await result_of(handle)


# --------------------------------------------------------------------------- examples


async def test_the_openai_example_runs_as_written_on_the_demo(
    env: WorkflowEnvironment,
    client: Client,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """examples/openai.yaml, its ``repo`` the demo's where `make demo` puts it, its model
    behind OPENAI_BASE_URL (the endpoint its comment names): the model loop fixes the bug
    within the example's own scope, and its reviewer passes it."""
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    (tmp_path / ".loop" / "demo").mkdir(parents=True)
    repo = make_demo_repo(tmp_path / ".loop" / "demo" / "repo")
    with ScriptedModel() as model:
        model.script(
            [
                reply(tool_calls=[("read_file", {"path": "slugify.py"})]),
                reply(tool_calls=[("write_file", {"path": "slugify.py", "content": COMPLETE_FIX})]),
                reply(tool_calls=[("finish", {"answer": "slugify joins words with hyphens"})]),
                reply('{"passed": true, "failures": []}'),  # the llm_review gate
            ]
        )
        endpoint = {"OPENAI_BASE_URL": model.url, "OPENAI_API_KEY": "sk-test-openai-0000"}
        for name, value in endpoint.items():
            monkeypatch.setenv(name, value)  # the worker's, in this process
        async with build_worker(client, settings):
            r = await approved_to_the_end(
                env, client, settings, tmp_path, tmp_path / "examples" / "openai.yaml"
            )
    assert r.state == TaskState.DONE_WITH_EVIDENCE and r.final_action == FinalAction.MERGED
    assert len(r.attempts) == 1 and r.attempts[0].verdict is not None
    assert [g.name for g in r.attempts[0].verdict.gates if g.passed] == [
        "tests", "scope", "keep-tests", "review"
    ]  # fmt: skip
    assert (repo / "slugify.py").read_text() == COMPLETE_FIX
    assert model.exhausted == 0 and len(model.requests) == 4


async def test_the_fleet_example_runs_as_written_on_a_bare_clone(
    env: WorkflowEnvironment,
    client: Client,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """examples/fleet.yaml, on a bare clone of the demo's as its comment makes one (at a
    path of the test's own, given with ``--repo``, where the file names /tmp/loop-app.git);
    its scripted agent without its 30 s wait (FLEET_AGENT_DELAY, which the file passes)."""
    bare = tmp_path / "loop-app.git"
    git(tmp_path, "clone", "-q", "--bare", str(demo_repo), str(bare))
    monkeypatch.setenv("FLEET_AGENT_DELAY", "0")  # the worker's, in this process
    async with build_worker(client, settings):
        code, said = await run_loop(
            env, settings, "start", str(EXAMPLES / "fleet.yaml"), "--repo", f"file://{bare}",
            "--wait", cwd=tmp_path, within=240,
        )  # fmt: skip
    assert code == 0 and "DONE_WITH_EVIDENCE" in said, said
    assert git(bare, "show", "main:slugify.py") == COMPLETE_FIX.strip()


# --------------------------------------------------------------------------- the guides

GUIDES = {
    "README.md": ROOT / "README.md",
    "getting-started": ROOT / "docs" / "getting-started.md",
    "your-repository": ROOT / "docs" / "guides" / "your-repository.md",
}
FIXED = '''"""Turn titles into URL slugs."""
import re


def slugify(text: str) -> str:
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))
'''
REGRESSION = """from slugify import slugify


def test_runs_of_punctuation_become_one_hyphen():
    assert slugify("Hello,  World!") == "hello-world"
"""


def to_the_registry(environment: dict[str, Any]) -> dict[str, Any]:
    """The environment as written, on this machine's way to PyPI (as test_environment_
    registry.py reaches it): its hosts' addresses where they resolve to a mirror's
    non-public one, pip with the system's CA bundle and none of the host's pip
    configuration. Skipped where the registry cannot be reached."""
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
    except OSError as e:
        pytest.skip(f"the package registry (pypi.org) cannot be reached: {e}")
    pip = f"{trusted()}PIP_CONFIG_FILE=/dev/null "
    setup = [f"{pip}{line}" if " pip " in f" {line} " else line for line in environment["setup"]]
    return environment | {"setup": setup, "allow_hosts": allowed(environment["allow_hosts"])}


def task_file_of(page: Path) -> dict[str, Any]:
    """The page's task file: its one YAML block with a goal, as written."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", page.read_text(), re.S | re.M)
    (found,) = [b for b in map(yaml.safe_load, blocks) if isinstance(b, dict) and "goal" in b]
    return found


@needs_cli("claude")
@pytest.mark.parametrize("guide", list(GUIDES))
async def test_a_guides_task_file_runs_as_written(
    env: WorkflowEnvironment,
    client: Client,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    guide: str,
) -> None:
    """The task file as the page shows it, beside a repository laid out as it expects
    (``./repo``): Claude Code, through the gateway to a scripted Anthropic endpoint, fixes
    the bug under ``src/`` and adds a regression test; every gate of the file passes; the
    approval merges it."""
    data = task_file_of(GUIDES[guide])
    data["id"] = f"{data['id']}-{uuid.uuid4().hex[:6]}"
    if "environment" in data:
        data["environment"] = to_the_registry(data["environment"])
    repo = make_src_repo(tmp_path / "repo")
    turns = [
        turn("Reading the code.", ("Read", {"file_path": "{cwd}/src/slugify.py"})),
        turn("", ("Write", {"file_path": "{cwd}/src/slugify.py", "content": FIXED})),
        turn("", ("Write", {"file_path": "{cwd}/tests/test_regression.py", "content": REGRESSION})),
        turn('slugify("Hello, World!") now returns "hello-world"; a regression test covers it.'),
    ]
    with ScriptedClaude(*turns) as model:
        data["agent"]["provider"]["base_url"] = model.url  # the one change: its endpoint
        file = tmp_path / "task.yaml"
        file.write_text(yaml.safe_dump(data, sort_keys=False))
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-guides-0000")
        async with build_worker(client, settings):
            r = await approved_to_the_end(env, client, settings, tmp_path, file)
    assert r.state == TaskState.DONE_WITH_EVIDENCE and r.final_action == FinalAction.MERGED
    (attempt,) = r.attempts
    assert attempt.verdict is not None and attempt.verdict.passed
    assert [g.name for g in attempt.verdict.gates] == [g["name"] for g in data["verify"]]
    assert git(repo, "show", "main:src/slugify.py") == FIXED.strip()
    assert "test_regression.py" in git(repo, "show", "--name-only", "--format=", "main")
