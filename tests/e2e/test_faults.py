"""Fault injection: kill -9 the worker inside each kind of activity and between them,
restart the Temporal server under running and waiting tasks, and kill one of two
workers while they share a batch of 20 tasks.

Technique. The worker runs as a subprocess (``python worker.py`` with
TEMPORAL_ADDRESS, LOOP_HOME, LOOP_TASK_QUEUE). To kill it *inside* an activity,
the activity is held there in a controlled way, and the test kills only once it
sees it held (no sleeps that hope for the best):

- explore, verify: a ``run`` gate that blocks (``exec sleep``) on one chosen run,
  counted in a file outside the worktree, after writing its pid;
- make (command backend): an agent that leaves half-done work and blocks on its first run;
- a model call: the scripted model answers that request only after a long delay;
- a tool call: a ``run`` tool command that blocks;
- prepare_and_explore, merge: the test holds the repository's cross-worker lock
  (``repo_lock``), as another worker would; the server shows the activity started;
- summarize: the test holds the lock of ``notes.md``, as another worker would;
- escalate: the webhook the worker posts to does not answer;
- between activities: while a task waits in AWAITING_APPROVAL no activity runs
  (history: nothing pending); the worker is killed then and the approval is sent
  while no worker is alive. This replaces "poll the history for
  ActivityTaskScheduled and kill at once", which lands before *or during* the
  short activity depending on timing; holding it makes the case deterministic.

A single kill -9 hits all of these at once (one task per kind; a crash in a busy
worker), then a new worker finishes them. Each task must end in the state it
reaches without a crash (``test_no_crash_baseline`` runs the same scenarios
uninterrupted), and the effects are counted: agent runs per attempt, model
requests (an answered call is never sent again), work-in-progress commits on
``loop/<id>``, commits on base after a merge, ``git status`` of the worktree and
the main checkout, the try number each activity finished on, and that the process
the crash orphaned was killed before the retry ran.

Every activity heartbeats (the worker's Liveness interceptor), so a kill inside a
short one (prepare, merge, summarize, escalate) is noticed within seconds too:
the matrix test holds it to that.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import random
import shutil
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowHandle

from activities.host.git import lock_file
from loop.client import connect
from loop.contracts import (
    QUERY_STATUS,
    SIGNAL_APPROVE,
    FinalAction,
    TaskResult,
    TaskSpec,
    TaskState,
    TaskStatus,
)
from loop.devserver import DevServer
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.agents import (
    COMPLETE_FIX,
    FIX_AT_ONCE,
    agent_calls,
    agent_file,
    write_agent,
)
from tests.support.model_server import ScriptedModel, reply
from tests.support.net import free_port
from tests.support.repos import ROOT, git, task_clones
from tests.support.tasks import UNITTEST, result_of, task
from worker import build_worker

pytestmark = pytest.mark.timeout(180)
STARTED = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED


HARNESS = {"mode": "off", "allow_unsafe_off": True}
"""These tests hold and release agents and gates through files of the test's own folder
(a pid, a "go on" mark, a run count), which a sandboxed command can neither write nor
even see. What they test is Temporal's side (kills, retries, outages), so their commands
run unconfined; the sandbox's own crash handling is tested in test_sandbox.py."""


def ftask(repo: Path, agent: list[str], **overrides: object) -> dict:
    return task(repo, agent, sandbox=HARNESS, **overrides)


# --------------------------------------------------------------------------- helpers


class Worker:
    """``python worker.py`` as a subprocess: kill -9 it, or stop it with SIGTERM."""

    def __init__(self, address: str, settings: Settings, log: Path, **env: str) -> None:
        self.address, self.settings, self.log, self.env = address, settings, log, env
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> Worker:
        env = {
            **os.environ,
            "TEMPORAL_ADDRESS": self.address,
            "LOOP_HOME": str(self.settings.home),
            "LOOP_TASK_QUEUE": self.settings.task_queue,
            **self.env,
        }
        with self.log.open("ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                str(ROOT / "worker.py"),
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
            )
        return self

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), 20)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


@contextlib.asynccontextmanager
async def running(*ws: Worker) -> AsyncIterator[None]:
    """Stop (SIGTERM) whichever of these workers still run when the block ends."""
    try:
        yield
    finally:
        for w in ws:
            await w.stop()


async def until(pred: Callable[[], Any], what: str, within: float = 60) -> Any:
    """Poll ``pred`` (sync or async) until it returns something truthy."""
    deadline = time.monotonic() + within
    while True:
        value = pred()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        await asyncio.sleep(0.05)


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its reaper counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def pending(handle: WorkflowHandle) -> dict[str, int]:
    """The workflow's pending activities: name -> state (scheduled, started, ...)."""
    desc = await handle.describe()
    return {p.activity_type.name: p.state for p in desc.raw_description.pending_activities}


async def inside(handle: WorkflowHandle, name: str) -> bool:
    return (await pending(handle)).get(name) == STARTED


async def awaiting_approval(handle: WorkflowHandle) -> bool:
    st = await handle.query(QUERY_STATUS, result_type=TaskStatus)
    return st.state == TaskState.AWAITING_APPROVAL and not await pending(handle)


async def answers(handle: WorkflowHandle) -> bool:
    try:
        await handle.describe()
    except Exception:
        return False
    return True


async def finished_tries(handle: WorkflowHandle) -> dict[str, list[int]]:
    """Per activity type, the try number each execution of it finished on (1 = no retry)."""
    names: dict[int, str] = {}
    tries: dict[str, list[int]] = {}
    async for ev in handle.fetch_history_events():
        if ev.HasField("activity_task_scheduled_event_attributes"):
            attrs = ev.activity_task_scheduled_event_attributes
            names[ev.event_id] = attrs.activity_type.name
        elif ev.HasField("activity_task_started_event_attributes"):
            started = ev.activity_task_started_event_attributes
            tries.setdefault(names[started.scheduled_event_id], []).append(started.attempt)
    return tries


def outcome(r: TaskResult) -> dict[str, Any]:
    """What a crash must not change: the terminal state and the verified work."""
    last = r.attempts[-1].make if r.attempts else None
    return {
        "state": r.state,
        "final_action": r.final_action,
        "verdicts": [a.verdict.passed if a.verdict else None for a in r.attempts],
        "changed": last.changed_files if last else [],
    }


def wip_commits(repo: Path, result: TaskResult) -> int:
    """Commits on the task branch past its base, counted in the task's clone; where the
    repository has the branch too (handed over for review), it is the same commit."""
    worktree, branch = result.worktree, f"loop/{result.task_id}"
    marker = Path(worktree).parents[1] / "runs" / result.task_id / "workspace.json"
    base = json.loads(marker.read_text())["base_commit"]
    tip = git(Path(worktree), "rev-parse", branch)
    if git(repo, "branch", "--list", branch):
        assert git(repo, "rev-parse", branch) == tip, f"{branch} differs from the task's clone"
    return int(git(Path(worktree), "rev-list", "--count", f"{base}..{branch}"))


def clean(path: Path | str) -> bool:
    return git(Path(path), "status", "--porcelain", "--untracked-files=all") == ""


def merged_commits(repo: Path, task_id: str) -> list[str]:
    """Commits on main carrying the task's trailer: a merge applied once shows one."""
    return git(repo, "log", "--format=%H", f"--grep=Loop-Task: {task_id}$", "main").split()


def new_repo(tmp_path: Path, name: str, demo_repo: Path) -> Path:
    """A copy of the demo repository: its own main, its own repository lock."""
    repo = tmp_path / name
    shutil.copytree(demo_repo, repo, symlinks=True)
    return repo


@contextlib.contextmanager
def flock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on ``path``, as another worker would."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def trace_ok(r: TaskResult) -> bool:
    return TaskResult.model_validate_json(Path(r.trace_path).read_text()).state == r.state


DONE_IN_WORKTREE = {
    "state": TaskState.DONE_WITH_EVIDENCE,
    "final_action": FinalAction.LEFT_IN_WORKTREE,
    "verdicts": [True],
    "changed": ["slugify.py"],
}


# --------------------------------------------------------------------------- scenarios

# Counts its runs in a file; the chosen run writes its pid and blocks (unless noblock).
BLOCKING_GATE = (
    "n=$(cat {count} 2>/dev/null || echo 0); echo $((n+1)) > {count}; "
    'if [ ! -e {noblock} ] && [ "$n" = {run} ]; then {before} echo $$ > {pid}; '
    "exec sleep 120; fi; {unittest}"
)

BLOCKING_AGENT = """
runs = [c for c in map(json.loads, log.read_text().splitlines()) if c["attempt"] == attempt]
if len(runs) == 1 and not os.path.exists({noblock!r}):
    # Half-done work in the worktree when the worker dies: the retry must not see it.
    pathlib.Path("notes").mkdir(exist_ok=True)
    pathlib.Path("notes/partial.txt").write_text("half-done")
    pathlib.Path("slugify.py").write_text("def slugify(t):\\n    return 'half'\\n")
    pathlib.Path({pid!r}).write_text(str(os.getpid()))
    time.sleep(120)
pathlib.Path("slugify.py").write_text(COMPLETE)
out.write_text("done")
"""

MODEL_DELAY = 40
"""Seconds the held model request waits for its answer; the worker is dead long before."""


@dataclass
class Case:
    """One scenario: its task, how to see the worker held inside, what must come out."""

    kind: str
    spec: TaskSpec
    held: Callable[[WorkflowHandle], Awaitable[bool]]
    expected: dict[str, Any]
    folder: Path
    orphan: Path | None = None
    """Where the held process wrote its pid; the retry must have killed it."""
    agent: list[str] = field(default_factory=list)
    model: ScriptedModel | None = None
    script_len: int = 0

    @property
    def repo(self) -> Path:
        return Path(self.spec.repo)


def model_spec(repo: Path, model: ScriptedModel) -> TaskSpec:
    data = ftask(repo, ["true"])
    data["agent"] = {"backend": "openai", "model": "gpt-4o-mini", "base_url": model.url}
    data["agent"]["timeout"] = 120
    return TaskSpec.model_validate(data)


def make_case(kind: str, folder: Path, repo: Path, model: ScriptedModel, *, crash: bool) -> Case:
    """The scenario ``kind`` on ``repo``; with ``crash=False`` nothing blocks (baseline)."""
    folder.mkdir(parents=True, exist_ok=True)
    noblock, pid, count = folder / "noblock", folder / "held.pid", folder / "gate.count"
    if not crash:
        noblock.write_text("")

    async def pid_written(_: WorkflowHandle) -> bool:
        return pid.exists() and pid.read_text().strip() != ""

    if kind in ("explore", "verify"):
        agent = write_agent(folder, FIX_AT_ONCE)
        data = ftask(repo, agent)
        # explore runs the gate at base twice (runs 0 and 1: a test that flips between
        # them is flaky), verify after the attempt (run 2). The held verify first
        # litters the worktree, as a gate killed half-way would.
        run = 0 if kind == "explore" else 2
        data["verify"][0]["run"] = BLOCKING_GATE.format(
            count=count,
            noblock=noblock,
            run=run,
            before="echo junk >> slugify.py;" if run else "",
            pid=pid,
            unittest=UNITTEST,
        )
        spec = TaskSpec.model_validate(data)
        return Case(kind, spec, pid_written, DONE_IN_WORKTREE, folder, pid, agent)
    if kind == "make":
        agent = write_agent(folder, BLOCKING_AGENT.format(noblock=str(noblock), pid=str(pid)))
        spec = TaskSpec.model_validate(ftask(repo, agent))
        return Case(kind, spec, pid_written, DONE_IN_WORKTREE, folder, pid, agent)
    write = ("write_file", {"path": "slugify.py", "content": COMPLETE_FIX})
    if kind == "model":
        # Request 2 is answered only after MODEL_DELAY s: the worker dies waiting, that
        # answer is never received, and the retry asks again (one more scripted entry).
        script = [
            reply(tool_calls=[("read_file", {"path": "slugify.py"})], usage=(100, 10)),
            reply(tool_calls=[write], usage=(200, 20), delay=MODEL_DELAY if crash else 0),
            *([reply(tool_calls=[write], usage=(10, 5))] if crash else []),
            reply(tool_calls=[("run", {"command": UNITTEST})], usage=(300, 30)),
            reply(tool_calls=[("finish", {"answer": "fixed"})], usage=(400, 40)),
        ]
        model.script(script)

        async def second_request(_: WorkflowHandle) -> bool:
            return len(model.requests) >= 2

        return Case(
            kind,
            model_spec(repo, model),
            second_request,
            DONE_IN_WORKTREE,
            folder,
            model=model,
            script_len=len(script),
        )
    if kind == "tool":
        # The held command has an effect first: a retry must not apply it again.
        command = (
            "mkdir -p notes && echo ran >> notes/ran.txt; "
            f"[ -e {noblock} ] || {{ echo $$ > {pid}; exec sleep 120; }}"
        )
        script = [
            reply(tool_calls=[("read_file", {"path": "slugify.py"})]),
            reply(tool_calls=[("run", {"command": command})]),
            reply(tool_calls=[write]),
            reply(tool_calls=[("run", {"command": UNITTEST})]),
            reply(tool_calls=[("finish", {"answer": "fixed"})]),
        ]
        model.script(script)
        return Case(
            kind,
            model_spec(repo, model),
            pid_written,
            {**DONE_IN_WORKTREE, "changed": ["notes/ran.txt", "slugify.py"]},
            folder,
            pid,
            model=model,
            script_len=len(script),
        )
    raise AssertionError(kind)


HEARTBEATING = ["explore", "make", "verify", "model", "tool"]


async def test_no_crash_baseline(client: Client, settings: Settings, demo_repo: Path, tmp_path):
    """The crash scenarios uninterrupted: the terminal states a crash must not change."""
    with contextlib.ExitStack() as stack:
        cases = [
            make_case(
                kind,
                tmp_path / kind,
                new_repo(tmp_path, f"repo-{kind}", demo_repo),
                stack.enter_context(ScriptedModel()),
                crash=False,
            )
            for kind in HEARTBEATING
        ]
        async with build_worker(client, settings):
            handles = [(await start_task(client, c.spec, settings.task_queue))[0] for c in cases]
            results = await asyncio.gather(*(result_of(h) for h in handles))
    for case, r in zip(cases, results, strict=True):
        assert outcome(r) == case.expected, (case.kind, r.reason)
        assert clean(r.worktree) and wip_commits(case.repo, r) == 1, case.kind
        if case.model is not None:
            assert len(case.model.requests) == case.script_len, case.kind
        if case.agent:
            assert [c["attempt"] for c in agent_calls(settings, case.spec.id)] == [1], case.kind


# --------------------------------------------------------------------------- the kill matrix


class Webhook:
    """A local escalation webhook that never answers the first message about one task."""

    def __init__(self, stall_task: str) -> None:
        self.stall_task = stall_task
        self.bodies: list[dict[str, Any]] = []
        self.release = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.bodies.append(body)
                if body["task_id"] == owner.stall_task and owner.count(owner.stall_task) == 1:
                    owner.release.wait(200)  # the worker dies while it waits for this
                    self.close_connection = True
                    return
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def count(self, task_id: str) -> int:
        return len([b for b in self.bodies if b["task_id"] == task_id])

    def __enter__(self) -> Webhook:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


SHORT = ["prepare", "merge", "summarize", "escalate", "between"]
RECOVERY: dict[str, float] = {}
"""Seconds from kill -9 to the end of each task of the matrix."""


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_kill_9_inside_every_activity_kind(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
):
    address = client.service_client.config.target_host
    repos = {k: new_repo(tmp_path, f"repo-{k}", demo_repo) for k in HEARTBEATING + SHORT}
    base = {k: git(r, "rev-parse", "main") for k, r in repos.items()}
    fixer = write_agent(tmp_path, FIX_AT_ONCE)
    with contextlib.ExitStack() as stack:
        cases = {
            k: make_case(
                k, tmp_path / k, repos[k], stack.enter_context(ScriptedModel()), crash=True
            )
            for k in HEARTBEATING
        }
        specs = {k: c.spec for k, c in cases.items()}
        for k in SHORT:
            autonomy = "report" if k in ("summarize", "prepare") else "assisted"
            specs[k] = TaskSpec.model_validate(ftask(repos[k], fixer, autonomy=autonomy))
        ids = {k: s.id for k, s in specs.items()}
        hook = stack.enter_context(Webhook(stall_task=ids["escalate"]))
        log = tmp_path / "worker.log"
        first = await Worker(address, settings, log, LOOP_WEBHOOK_URL=hook.url).start()
        second = Worker(address, settings, log, LOOP_WEBHOOK_URL=hook.url)
        async with running(first, second), contextlib.AsyncExitStack() as locks:
            # The summarize task's summarize waits for notes.md, as behind another worker.
            locks.enter_context(flock(settings.notes.with_name("notes.md.lock")))
            # The prepare task's first step waits for its repository's lock to prepare.
            locks.enter_context(flock(lock_file(settings.locks, str(repos["prepare"].resolve()))))
            h = {k: (await start_task(client, s, settings.task_queue))[0] for k, s in specs.items()}
            for k, c in cases.items():
                await until(lambda c=c, k=k: c.held(h[k]), f"the worker held inside {k}")
            await until(lambda: inside(h["prepare"], "prepare_and_explore"), "prepare held")
            await until(lambda: inside(h["summarize"], "summarize"), "summarize held")
            await until(lambda: inside(h["escalate"], "escalate"), "escalate held")
            for k in ("merge", "between"):
                await until(lambda k=k: awaiting_approval(h[k]), f"{k}: awaiting approval")
            # The merge task's merge waits for its repository's lock.
            locks.enter_context(flock(lock_file(settings.locks, str(repos["merge"].resolve()))))
            await h["merge"].signal(SIGNAL_APPROVE, {"note": "go"})
            await until(lambda: inside(h["merge"], "merge"), "merge held")
            assert len(cases["model"].model.requests) == 2  # its answer is still due

            await first.kill()
            killed_at = time.monotonic()
            await locks.aclose()  # the locks the dead worker waited for are free again
            # Between activities: the approval arrives while no worker runs at all.
            await h["between"].signal(SIGNAL_APPROVE, {"note": "go"})
            await second.start()
            await h["escalate"].signal(SIGNAL_APPROVE, {"note": "go"})

            async def end(k: str) -> TaskResult:
                result = await result_of(h[k], within=200)
                RECOVERY[k] = round(time.monotonic() - killed_at, 1)
                return result

            results = dict(zip(h, await asyncio.gather(*(end(k) for k in h)), strict=True))
        print(f"seconds from kill -9 to the end of each task: {RECOVERY}")
        requests = {k: list(c.model.requests) for k, c in cases.items() if c.model}
        tries = {k: await finished_tries(h[k]) for k in h}

        # --- every task: the no-crash terminal state, clean trees, one record each
        notes = settings.notes.read_text()
        for k, r in results.items():
            assert trace_ok(r), k
            assert notes.count(f"<!-- loop:{ids[k]} -->") == 1, k  # summarized once
            assert clean(repos[k]), k  # nothing leaked into the main checkout
        for k, case in cases.items():
            r = results[k]
            assert outcome(r) == case.expected, (k, r.reason)
            assert clean(r.worktree), (k, git(Path(r.worktree), "status", "--porcelain"))
            assert wip_commits(case.repo, r) == 1, k  # no commit made twice
            if case.orphan is not None:
                assert not alive(int(case.orphan.read_text())), f"{k}: orphan still runs"
        for k in ("summarize", "prepare"):
            assert outcome(results[k]) == DONE_IN_WORKTREE, (k, results[k].reason)
            assert clean(results[k].worktree) and wip_commits(repos[k], results[k]) == 1, k
        # No worktree lost, none made twice: one per task left in its worktree.
        for k in [*HEARTBEATING, "summarize", "prepare"]:
            assert task_clones(settings.home, repos[k]) == [results[k].worktree], k
        for k in ("merge", "escalate", "between"):
            r = results[k]
            assert (r.state, r.final_action) == (
                TaskState.DONE_WITH_EVIDENCE,
                FinalAction.MERGED,
            ), (k, r.reason)
            # Merged once: one commit more on main, the task's, and the checkout updated.
            assert int(git(repos[k], "rev-list", "--count", f"{base[k]}..main")) == 1, k
            assert len(merged_commits(repos[k], ids[k])) == 1, k
            assert "findall" in (repos[k] / "slugify.py").read_text(), k
            assert not Path(r.worktree).exists(), k  # merged and clean: removed
            assert task_clones(settings.home, repos[k]) == [], k
            assert git(repos[k], "branch", "--list", f"loop/{ids[k]}") == "", k

        # --- where the worker died, the activity finished on its second try
        for k, name in [
            ("prepare", "prepare_and_explore"),
            ("explore", "prepare_and_explore"),
            ("make", "make"),
            ("verify", "verify"),
            ("merge", "merge"),
            ("summarize", "summarize"),
            ("escalate", "escalate"),
        ]:
            assert tries[k][name] == [2], (k, tries[k])
        assert tries["between"]["merge"] == [1], tries["between"]
        for k, step in (("model", "model_step"), ("tool", "tool_step")):
            child = await finished_tries(client.get_workflow_handle(f"{h[k].id}-attempt-1"))
            assert sorted(child[step]) == [1] * (len(child[step]) - 1) + [2], (k, child)

        # --- effects, counted
        for k in ("explore", "verify"):
            runs = int((cases[k].folder / "gate.count").read_text())
            # base twice, verify and its witness; one of them held and retried once
            assert runs == 5, k
            assert [c["attempt"] for c in agent_calls(settings, cases[k].spec.id)] == [1], k
            assert (Path(results[k].worktree) / "slugify.py").read_text() == COMPLETE_FIX, k
        assert [c["attempt"] for c in agent_calls(settings, cases["make"].spec.id)] == [1, 1]
        # The retried make started from the attempt's start commit: half-done work gone.
        assert not (Path(results["make"].worktree) / "notes" / "partial.txt").exists()
        made = sum(len(agent_calls(settings, specs[k].id)) for k in SHORT)
        assert made == len(SHORT)  # one make per task: none ran twice

        bodies = [json.dumps(r["body"]["messages"], sort_keys=True) for r in requests["model"]]
        assert len(bodies) == cases["model"].script_len
        assert bodies[1] == bodies[2]  # only the call that never answered was sent again
        assert len(set(bodies)) == len(bodies) - 1
        made = results["model"].attempts[0].make
        assert made.tokens == 110 + 15 + 330 + 440  # the lost answer is not counted

        bodies = [json.dumps(r["body"]["messages"], sort_keys=True) for r in requests["tool"]]
        assert len(bodies) == cases["tool"].script_len == len(set(bodies))  # each call once
        # The command the worker died in was not started again: one line, not two.
        assert (Path(results["tool"].worktree) / "notes" / "ran.txt").read_text() == "ran\n"
        step = settings.runs / ids["tool"] / "attempt-1" / "step-0002.tool-0.json"
        told = json.loads(step.read_text())["message"]["content"]
        assert told.startswith("error: the worker stopped while this command was running")
        assert results["tool"].attempts[0].make.tool_calls == 5

        # The escalation went to the inbox once and was delivered by the retry.
        inbox = [json.loads(x) for x in (settings.home / "inbox.jsonl").read_text().splitlines()]
        assert [m["task_id"] for m in inbox].count(ids["escalate"]) == 1
        assert hook.count(ids["escalate"]) == 2  # the lost try and the retry
        assert "notify-failed" not in [e.kind for e in results["escalate"].events]
    # Heartbeating activities are noticed within seconds.
    assert max(RECOVERY[k] for k in [*HEARTBEATING, "between"]) < 25, RECOVERY
    # Short activities heartbeat too (the worker's Liveness interceptor): no 120 s stall.
    assert max(RECOVERY[k] for k in ("prepare", "merge", "summarize", "escalate")) < 25, RECOVERY


# --------------------------------------------------------------------------- server restart

SLOW_AGENT = """
pathlib.Path(str(log) + ".making").write_text(os.environ["LOOP_TASK_ID"])
time.sleep(8)
pathlib.Path("slugify.py").write_text(COMPLETE)
out.write_text("done")
"""
OUTAGE = 6
"""Seconds the server stays down: longer than a heartbeat timeout (5 s)."""


@pytest.mark.slow
async def test_server_restart_mid_attempt_and_while_awaiting_approval(
    settings: Settings, demo_repo: Path, tmp_path: Path
):
    """The dev server (its SQLite file under tmp) is stopped and, after an outage longer
    than a heartbeat timeout, started again on the same port, while one task's agent
    runs, one task's gate runs, one task's model call is in flight and one task waits for
    approval. The worker reconnects by itself; all four finish, none twice."""
    server_home, port = tmp_path / "server", free_port()
    server = DevServer.start(home=server_home, port=port, headless=True)
    await server.wait_ready()
    worker = Worker(server.address, settings, tmp_path / "worker.log")
    try:
        client = await connect(server.address)
        await worker.start()
        repos = {k: new_repo(tmp_path, f"repo-{k}", demo_repo) for k in "abcd"}
        slow_agent = write_agent(tmp_path, SLOW_AGENT)
        fix_agent = write_agent(tmp_path, FIX_AT_ONCE)
        gate_mark = tmp_path / "gate.running"
        b = ftask(repos["b"], fix_agent)
        b["verify"][0]["run"] = (
            "if git log -1 --format=%s | grep -q attempt; "
            f"then touch {gate_mark}; sleep 8; fi; {UNITTEST}"
        )
        with ScriptedModel() as model:
            write = ("write_file", {"path": "slugify.py", "content": COMPLETE_FIX})
            script = [
                reply(tool_calls=[("read_file", {"path": "slugify.py"})]),
                reply(tool_calls=[write], delay=4),  # answers while the server is down
                reply(tool_calls=[("run", {"command": UNITTEST})]),
                reply(tool_calls=[("finish", {"answer": "fixed"})]),
            ]
            model.script(script)
            specs = {
                "a": TaskSpec.model_validate(ftask(repos["a"], slow_agent)),
                "b": TaskSpec.model_validate(b),
                "c": TaskSpec.model_validate(ftask(repos["c"], fix_agent, autonomy="assisted")),
                "d": model_spec(repos["d"], model),
            }
            base_c = git(repos["c"], "rev-parse", "main")
            h = {k: (await start_task(client, s, settings.task_queue))[0] for k, s in specs.items()}
            making = agent_file(settings, specs["a"].id, 1, "calls.jsonl.making")
            await until(making.exists, "a in make")
            await until(gate_mark.exists, "b in verify")
            await until(lambda: len(model.requests) >= 2, "d in a model call")
            await until(lambda: awaiting_approval(h["c"]), "c awaiting approval")

            down_at = time.monotonic()
            assert server.stop() is not None
            await asyncio.sleep(OUTAGE)
            server = DevServer.start(home=server_home, port=port, headless=True)
            await server.wait_ready()
            downtime = time.monotonic() - down_at
            await until(lambda: answers(h["c"]), "the client reconnected", within=30)
            await h["c"].signal(SIGNAL_APPROVE, {"note": "after the restart"})
            results = {k: await result_of(x, within=120) for k, x in h.items()}
            requests = len(model.requests)
        runs_a = len(agent_calls(settings, specs["a"].id))
        print(f"server down for {downtime:.1f} s; agent runs {runs_a}")
    finally:
        await worker.stop()
        server.stop()

    for k in "abd":
        assert task_clones(settings.home, repos[k]) == [results[k].worktree], k
        assert outcome(results[k]) == DONE_IN_WORKTREE, (k, results[k].reason)
        assert clean(results[k].worktree) and wip_commits(repos[k], results[k]) == 1, k
        assert trace_ok(results[k]), k
    # The agent is rerun only when its heartbeat timed out during the outage, never more.
    assert 1 <= len(agent_calls(settings, specs["a"].id)) <= 2
    # The answer that arrived while the server was down was kept, not asked for again.
    assert requests == len(script)
    c = results["c"]
    assert (c.state, c.final_action) == (TaskState.DONE_WITH_EVIDENCE, FinalAction.MERGED)
    assert int(git(repos["c"], "rev-list", "--count", f"{base_c}..main")) == 1
    assert len(merged_commits(repos["c"], specs["c"].id)) == 1 and clean(repos["c"])
    assert worker.proc is not None and worker.proc.returncode == 0  # it lived, then drained


# --------------------------------------------------------------------------- two workers

BATCH_AGENT = """
import random
with open({ids!r}, "a") as f:
    f.write(os.environ["LOOP_TASK_ID"] + "\\n")
time.sleep(random.Random(os.environ["LOOP_TASK_ID"]).uniform(0.5, 1.0))
pathlib.Path("slugify.py").write_text(COMPLETE)
out.write_text("done")
"""


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_two_workers_one_killed_during_a_batch_of_20(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
):
    """Two workers share a task queue and LOOP_HOME; one is killed at a random (seeded)
    moment while 20 tasks on one repository run, and started again. All 20 end
    DONE_WITH_EVIDENCE; the ten unattended ones are merged into main once each."""
    rng = random.Random(20)
    address = client.service_client.config.target_host
    ids_file = tmp_path / "agent-runs.ids"
    agent = write_agent(tmp_path, BATCH_AGENT.format(ids=str(ids_file)))

    def agent_runs() -> list[str]:
        """The task id of each agent run so far, in order."""
        return ids_file.read_text().split() if ids_file.exists() else []

    base = git(demo_repo, "rev-parse", "main")
    specs = [
        TaskSpec.model_validate(
            ftask(demo_repo, agent, autonomy="unattended" if i % 2 else "report")
        )
        for i in range(20)
    ]
    victim = await Worker(address, settings, tmp_path / "victim.log").start()
    other = await Worker(address, settings, tmp_path / "other.log").start()
    again = Worker(address, settings, tmp_path / "victim.log")
    async with running(victim, other, again):
        handles = [(await start_task(client, s, settings.task_queue))[0] for s in specs]
        ending = [asyncio.ensure_future(result_of(h, within=200)) for h in handles]
        # A random moment of the batch, whatever this machine's speed: just after the
        # k-th agent run started, plus a random fraction of an agent's run.
        k, extra = rng.randint(3, 15), rng.uniform(0.0, 1.0)
        await until(lambda: len(agent_runs()) >= k, f"agent run {k} of the batch")
        await asyncio.sleep(extra)
        unfinished = sum(1 for f in ending if not f.done())
        victim_pid = victim.proc.pid if victim.proc else 0
        await victim.kill()
        killed_at = time.monotonic()
        await again.start()
        results = await asyncio.gather(*ending)
        took = time.monotonic() - killed_at
    retried: dict[str, dict[str, list[int]]] = {}
    by_victim = 0
    for spec, hd in zip(specs, handles, strict=True):
        for name, tries in (await finished_tries(hd)).items():
            if max(tries) > 1:
                retried.setdefault(spec.id, {})[name] = tries
        async for ev in hd.fetch_history_events():
            for attrs in ("workflow_task_started", "activity_task_started"):
                if ev.HasField(f"{attrs}_event_attributes"):
                    who = getattr(ev, f"{attrs}_event_attributes").identity
                    by_victim += who.startswith(f"{victim_pid}@")
    print(
        f"killed a worker after {k} agent runs + {extra:.1f} s, {unfinished}/20 tasks "
        f"unfinished; the batch ended {took:.1f} s after; activities retried: {retried}"
    )
    assert unfinished > 0  # the kill landed during the batch
    assert by_victim > 0  # and the killed worker had its share of it

    runs = agent_runs()
    for spec, r in zip(specs, results, strict=True):
        assert r.state == TaskState.DONE_WITH_EVIDENCE, (spec.id, r.reason)
        assert [a.verdict.passed for a in r.attempts if a.verdict] == [True], spec.id
        assert trace_ok(r), spec.id
        # The agent ran once, or twice when the worker died inside this task's make.
        most = 2 if "make" in retried.get(spec.id, {}) else 1
        assert 1 <= runs.count(spec.id) <= most, spec.id
        if spec.autonomy == "unattended":
            assert r.final_action == FinalAction.MERGED, spec.id
            assert len(merged_commits(demo_repo, spec.id)) == 1, spec.id
            assert not Path(r.worktree).exists(), spec.id
        else:
            assert r.final_action == FinalAction.LEFT_IN_WORKTREE, spec.id
            assert clean(r.worktree) and wip_commits(demo_repo, r) == 1, spec.id
    trailers = git(demo_repo, "log", "--format=%H", "--grep=^Loop-Task: ", f"{base}..main")
    assert len(trailers.split()) == 10  # ten merges, none twice
    assert clean(demo_repo) and "findall" in (demo_repo / "slugify.py").read_text()
    # No worktree lost or doubled: the ten report tasks keep theirs, the merged are gone.
    kept = sorted(r.worktree for s, r in zip(specs, results, strict=True) if s.autonomy == "report")
    assert sorted(task_clones(settings.home, demo_repo)) == kept
    notes = settings.notes.read_text()
    assert all(notes.count(f"<!-- loop:{s.id} -->") == 1 for s in specs)  # no update lost
