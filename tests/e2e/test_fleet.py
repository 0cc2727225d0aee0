"""Several hosts on one Temporal server: worker processes with their own LOOP_HOME and
host id, tasks on git URLs (bare repositories on disk) and on local paths.

- every step that touches a task's worktree runs on the host that prepared it;
- merges land on the remote once each, racing ones by a merge commit;
- a host killed mid-``make``: its tasks on a URL move to another host from their pushed
  branch; its task on a local path waits in NEEDS_HUMAN until the host is back;
- a pull request instead of a merge, opened through a local stand-in for GitHub's API.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from temporalio.client import Client, WorkflowHandle

from loop.contracts import (
    SIGNAL_EXTEND_BUDGET,
    ExtendBudgetSignal,
    FinalAction,
    TaskResult,
    TaskSpec,
    TaskState,
)
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.agents import agent_calls, write_agent
from tests.support.repos import git
from tests.support.tasks import result_of, task, wait_for
from tests.support.workers import Host
from worker import build_worker

pytestmark = pytest.mark.timeout(420)

HOST_STEPS = {
    "explore", "make", "verify", "commit_branch", "merge", "remove_workspace", "summarize",
}  # fmt: skip

# Fixes the bug, and leaves a note of its own so no two tasks change the same new file.
FIX_WITH_NOTE = """
pathlib.Path("slugify.py").write_text(COMPLETE)
pathlib.Path("notes").mkdir(exist_ok=True)
pathlib.Path("notes", os.environ["LOOP_TASK_ID"] + ".md").write_text("fixed\\n")
"""

# Attempt 1 hangs (its host is killed under it); any later attempt fixes the bug.
HANG_THEN_FIX = """
if attempt == 1:
    time.sleep(300)
pathlib.Path("slugify.py").write_text(COMPLETE)
"""


def bare_remote(repo: Path, folder: Path, name: str) -> str:
    """A bare clone of ``repo``: the remote the tasks' URLs name."""
    target = folder / f"{name}.git"
    git(folder, "clone", "-q", "--bare", str(repo), str(target))
    return target.as_uri()


def merged_once(remote: str, task_id: str) -> int:
    bare = Path(remote.removeprefix("file://"))
    bodies = git(bare, "log", "main", "--format=%B%x00").split("\0")
    return sum(f"Loop-Task: {task_id}" in body for body in bodies)


async def queues_of(handle: WorkflowHandle) -> dict[str, set[str]]:
    """Per activity type, the task queues it was scheduled on (from the history)."""
    found: dict[str, set[str]] = {}
    async for ev in handle.fetch_history_events():
        if ev.HasField("activity_task_scheduled_event_attributes"):
            attrs = ev.activity_task_scheduled_event_attributes
            found.setdefault(attrs.activity_type.name, set()).add(attrs.task_queue.name)
    return found


@pytest.fixture
def queue() -> str:
    return f"fleet-{uuid.uuid4().hex[:8]}"


async def test_twenty_tasks_on_three_hosts(
    client: Client, demo_repo: Path, tmp_path: Path, queue: str
) -> None:
    hosts = [Host(client, tmp_path / f"h{i}", queue, host_id=f"h{i}") for i in (1, 2, 3)]
    remotes = [bare_remote(demo_repo, tmp_path, name) for name in ("app-a", "app-b")]
    agent = write_agent(tmp_path, FIX_WITH_NOTE)
    specs = [
        TaskSpec.model_validate(
            task(remotes[i % 2], agent, autonomy="unattended", budget={"max_attempts": 2})  # type: ignore[arg-type]
        )
        for i in range(20)
    ]
    try:
        for h in hosts:
            await h.start()
        for h in hosts:
            await h.ready()
        handles = [(await start_task(client, s, queue))[0] for s in specs]
        results: list[TaskResult] = await asyncio.gather(
            *(result_of(h, within=360) for h in handles)
        )
    finally:
        for h in hosts:
            await h.stop()

    host_queues = {f"{queue}@h{i}" for i in (1, 2, 3)}
    used: set[str] = set()
    for spec, handle, r in zip(specs, handles, results, strict=True):
        assert r.state == TaskState.DONE_WITH_EVIDENCE, (spec.id, r.reason)
        assert r.final_action == FinalAction.MERGED, spec.id
        queues = await queues_of(handle)
        assert queues["prepare_and_explore"] == {queue}, spec.id  # any host may prepare
        steps = set().union(*(queues[a] for a in HOST_STEPS if a in queues))
        assert len(steps) == 1 and steps <= host_queues, (spec.id, queues)
        assert steps == {f"{queue}@{r.host}"}, (spec.id, r.host)
        used |= steps
        assert merged_once(spec.repo, spec.id) == 1, spec.id
    assert len(used) >= 2, f"all 20 tasks ran on one host: {used}"
    # Racing merges into one remote: the ones after the first land by a merge commit.
    for remote in remotes:
        bare = Path(remote.removeprefix("file://"))
        merges = git(bare, "rev-list", "--merges", "--count", "main")
        assert int(merges) >= 1, remote
        assert git(bare, "branch", "--list", "loop/*") == ""  # merged branches are deleted
    found = await client.count_workflows(f'LoopHost="{results[0].host}"')
    assert found.count >= 1


async def test_a_lost_host_moves_url_tasks_and_parks_local_ones(
    client: Client, demo_repo: Path, tmp_path: Path, queue: str
) -> None:
    fast = {"LOOP_HOST_LOST_AFTER": "3"}
    h1, h2, h3 = (Host(client, tmp_path / f"h{i}", queue, f"h{i}", dict(fast)) for i in (1, 2, 3))
    agent = write_agent(tmp_path, HANG_THEN_FIX)
    remote = bare_remote(demo_repo, tmp_path, "app")
    moving = [
        TaskSpec.model_validate(task(remote, agent, autonomy="unattended"))  # type: ignore[arg-type]
        for _ in range(2)
    ]
    staying = TaskSpec.model_validate(task(demo_repo, agent, autonomy="unattended"))
    h1_settings = Settings(home=h1.home, task_queue=queue, host_id="h1")
    try:
        await h1.start()  # alone: it prepares every task
        await h1.ready()
        handles = {s.id: (await start_task(client, s, queue))[0] for s in [*moving, staying]}
        deadline = time.monotonic() + 120
        while not all(agent_calls(h1_settings, s.id) for s in [*moving, staying]):
            assert time.monotonic() < deadline, h1.tail()
            await asyncio.sleep(0.2)
        for h in (h2, h3):
            await h.start()
        for h in (h2, h3):
            await h.ready()
        await h1.kill()  # mid-make, with the agents it ran
        # Another machine's disk is out of reach: nothing the moved tasks wrote on h1's
        # (explore's brief among it) may be needed where they go on.
        for s in moving:
            shutil.rmtree(h1.home / "runs" / s.id)

        moved = await asyncio.gather(*(result_of(handles[s.id], within=180) for s in moving))
        for r in moved:
            assert r.state == TaskState.DONE_WITH_EVIDENCE, r.reason
            assert r.host in ("h2", "h3")
            first, second = r.attempts
            assert not first.verdict.passed
            assert first.verdict.gates[0].evidence.detail == "host h1 lost"
            assert second.verdict.passed
            assert any(ev.kind == "moved" and "from host h1" in ev.detail for ev in r.events)
            assert merged_once(remote, r.task_id) == 1
            prompt = tmp_path / r.host / "runs" / r.task_id / "attempt-2" / "prompt.md"
            assert "## Brief" in prompt.read_text()  # explore's brief reached the new host

        local = handles[staying.id]
        st = await wait_for(local, lambda s: s.state == TaskState.NEEDS_HUMAN, within=120)
        assert "host h1 lost" in st.reason and "cannot move" in st.reason
        await h1.start()
        await h1.ready()
        await local.signal(SIGNAL_EXTEND_BUDGET, ExtendBudgetSignal(attempts=1))
        r = await result_of(local, within=120)
        assert r.state == TaskState.DONE_WITH_EVIDENCE, r.reason
        assert r.host == "h1"
        assert f"Loop-Task: {staying.id}" in git(demo_repo, "log", "-1", "--format=%B", "main")
    finally:
        for h in (h1, h2, h3):
            await h.stop()


class FakeGitHub(BaseHTTPRequestHandler):
    """GitHub's pulls endpoint, as far as opening one goes; it records what it got."""

    seen: ClassVar[list[dict]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeGitHub.seen.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "json": body}
        )
        answer = json.dumps({"html_url": "https://github.example/acme/app/pull/7"}).encode()
        self.send_response(201)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


async def test_a_pull_request_instead_of_a_merge(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, monkeypatch
) -> None:
    server = HTTPServer(("127.0.0.1", 0), FakeGitHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_testtoken0123456789")
    monkeypatch.setenv("GITHUB_API_URL", f"http://127.0.0.1:{server.server_port}")
    remote = bare_remote(demo_repo, tmp_path, "app")
    before = git(Path(remote.removeprefix("file://")), "rev-parse", "main")
    spec = TaskSpec.model_validate(
        task(
            remote,  # type: ignore[arg-type]
            write_agent(tmp_path, FIX_WITH_NOTE),
            autonomy="unattended",
            finalize={"pull_request": True, "github": "acme/app", "pull_request_wait": 0},
        )
    )
    try:
        async with build_worker(client, settings):
            handle, _ = await start_task(client, spec, settings.task_queue)
            r = await result_of(handle, within=120)
    finally:
        server.shutdown()
    assert r.state == TaskState.DONE_WITH_EVIDENCE, r.reason
    assert r.final_action == FinalAction.PULL_REQUEST
    assert r.reason == "verified; pull request opened: https://github.example/acme/app/pull/7"
    bare = Path(remote.removeprefix("file://"))
    assert git(bare, "rev-parse", "main") == before  # nothing merged
    pushed = git(bare, "rev-parse", f"refs/heads/loop/{spec.id}")
    assert f"Loop-Task: {spec.id}" in git(bare, "log", "-1", "--format=%B", pushed)
    [request] = [s for s in FakeGitHub.seen if s["path"].endswith("/pulls")]
    statuses = [s for s in FakeGitHub.seen if "/statuses/" in s["path"]]
    # loopwork/verify on the attempt's commit and on the pull request's head
    assert [(s["json"]["state"], s["json"]["context"]) for s in statuses] == [
        ("success", "loopwork/verify")
    ] * 2
    assert f"/repos/acme/app/statuses/{pushed}" in {s["path"] for s in statuses}
    assert request["path"] == "/repos/acme/app/pulls"
    assert request["auth"] == "Bearer ghp_testtoken0123456789"
    assert request["json"]["head"] == f"loop/{spec.id}" and request["json"]["base"] == "main"
    assert "## Evidence" in request["json"]["body"] and "**tests** pass" in request["json"]["body"]
    text = (settings.runs / spec.id / "pull-request.md").read_text()
    assert text.startswith("# slugify") and f"branch `loop/{spec.id}` → `main`" in text
