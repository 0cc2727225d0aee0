"""Many candidates, one verdict: scripted agents in parallel, judged by the same gates,
one kept (docs/concepts/candidates.md), on the real dev server, in basic and strict."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from datetime import UTC
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from activities.host import pool
from activities.host.pool import Pool
from activities.host.sandbox import holders as sandbox_holders
from loop.contracts import (
    ApproveSignal,
    FeedbackSignal,
    FinalAction,
    RejectSignal,
    SharedBudget,
    TaskResult,
    TaskState,
)
from loop.errors import BadInput
from loop.settings import Settings
from loop.tasks import answer, with_live_candidates
from tests.support.agents import COMPLETE_FIX, write_agent
from tests.support.gateway import KEY, attached, bearer, grant
from tests.support.host import LEVELS
from tests.support.model_server import Entry, ScriptedModel, reply
from tests.support.repos import git
from tests.support.tasks import replays, result_of, start, task, wait_for
from tests.support.ui import LOOP, ui_env
from tests.support.workers import Host
from worker import build_worker

pytestmark = pytest.mark.timeout(180)

WRONG_SLOWLY = """
pathlib.Path("slugify.py").write_text("def slugify(t):\\n    return 'wrong'\\n")
time.sleep(float(os.environ.get("SLOW", "20")))
"""
"""A candidate that cannot fix the bug, and takes its time failing."""
WRONG = """
pathlib.Path("slugify.py").write_text(f"def slugify(t):\\n    return 'wrong{attempt}'\\n")
"""
FIX = """
pathlib.Path("slugify.py").write_text(COMPLETE)
out.write_text("fixed")
"""


def three(tmp_path: Path, first: str, third: str) -> list[dict]:
    """Three candidates; only the second one's agent can fix the bug."""
    return [
        {"name": "one", "agent": {"command": write_agent(tmp_path, first), "timeout": 60}},
        {"name": "two", "agent": {"command": write_agent(tmp_path, FIX), "timeout": 60}},
        {"name": "three", "agent": {"command": write_agent(tmp_path, third), "timeout": 60}},
    ]


def by_name(r: TaskResult) -> dict[str, object]:
    return {c.name: c for c in r.candidates}


@pytest.mark.parametrize("level", LEVELS)
async def test_first_keeps_the_second_and_stops_the_others(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, level: str
) -> None:
    spec = task(
        demo_repo,
        ["true"],
        candidates=three(tmp_path, WRONG_SLOWLY, WRONG_SLOWLY),
        choose="first",
        autonomy="unattended",
        sandbox={"mode": level},
    )
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        # While they run, the task's status says what each one's own workflow says.
        st = await wait_for(handle, lambda s: len(s.candidates) == 3 and s.phase == "make")
        deadline = time.monotonic() + 60
        while True:
            views = {v.name: v for v in (await with_live_candidates(client, st)).candidates}
            if views["one"].phase == "make" or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert (views["one"].phase, views["one"].attempt) == ("make", 1), views["one"]
        result: TaskResult = await result_of(handle, within=150)
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert result.final_action == FinalAction.MERGED
    assert result.chosen == "two" and "first whose verdict passed" in result.choice
    cands = by_name(result)
    assert cands["two"].passed and cands["two"].chosen
    assert cands["one"].state == cands["three"].state == TaskState.CANCELLED
    # Candidate two's commit is what base holds now.
    merged = git(demo_repo, "log", "-1", "--format=%B", "main")
    assert f"Loop-Task: {spec['id']}+two" in merged, merged
    assert "findall" in (demo_repo / "slugify.py").read_text() or "findall" in git(
        demo_repo, "show", "main:slugify.py"
    )
    # Every candidate's branch is gone (the chosen one merged, the others deleted).
    branches = git(demo_repo, "branch", "--list", f"loop/{spec['id']}*")
    assert branches.strip() == "", branches


@pytest.mark.parametrize("level", LEVELS)
async def test_best_ranks_the_second_first_and_waits_for_its_approval(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, level: str
) -> None:
    spec = task(
        demo_repo,
        ["true"],
        candidates=three(tmp_path, WRONG, WRONG),
        choose="best",
        autonomy="assisted",
        max_parallel=2,
        keep_candidates=True,
        budget={"max_attempts": 2, "max_stalled_attempts": 3},
        sandbox={"mode": level},
    )
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        st = await wait_for(handle, lambda s: s.state == TaskState.AWAITING_APPROVAL, within=150)
        # All three ran to their end: the two that cannot fix it spent both attempts.
        views = {c.name: c for c in st.candidates}
        assert [views[n].rank for n in ("one", "two", "three")] == [2, 1, 3], views
        assert views["two"].chosen and views["two"].state == TaskState.DONE_WITH_EVIDENCE
        assert views["one"].attempt == views["three"].attempt == 2
        assert views["one"].state == TaskState.NEEDS_HUMAN  # attempts exhausted
        # The commit waiting is candidate two's, on its own branch.
        branch = f"loop/{spec['id']}/two"
        assert st.commit and git(demo_repo, "rev-parse", branch) == st.commit
        assert f"Loop-Task: {spec['id']}+two" in git(demo_repo, "log", "-1", "--format=%B", branch)
        # An approval of another candidate's commit is refused; of the one waiting, taken.
        other = git(demo_repo, "rev-parse", "main")
        with pytest.raises(BadInput, match="waits for approval of commit"):
            await answer(client, spec["id"], "approve", ApproveSignal(commit=other), "ann", None)
        await answer(client, spec["id"], "approve", ApproveSignal(commit=st.commit), "ann", None)
        result: TaskResult = await result_of(handle, within=60)
        # Both replay on this code (and are kept for tests/workflow: LOOP_RECORD_HISTORIES).
        await replays(handle, "candidates_best")
        await replays(client.get_workflow_handle(f"task-{spec['id']}+two"), "candidates_best_two")
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert result.final_action == FinalAction.MERGED
    assert result.chosen == "two" and result.choice.startswith("two: ranked first"), result.choice
    assert "one: NEEDS_HUMAN" in result.choice and "three: NEEDS_HUMAN" in result.choice
    git(demo_repo, "merge-base", "--is-ancestor", st.commit, "main")  # raises where it is not
    # The task's spend is all of theirs: five attempts in all, each its own uid's.
    assert sum(len(c.attempts) for c in result.candidates) == 5
    assert [a.attempt for a in result.attempts] == [1]  # the chosen one's
    uids = {c.attempts[0].make.sandbox_level.split()[1] for c in result.candidates}
    assert len(uids) == 3, uids
    # The others' branches stay (keep_candidates), each with its last attempt's commit.
    for c in result.candidates:
        if c.name != "two":
            assert git(demo_repo, "rev-parse", f"loop/{spec['id']}/{c.name}") == c.commit
    # Two at a time (max_parallel): the third started once one of the first two ended.
    spans = {}
    for c in result.candidates:
        desc = await client.get_workflow_handle(c.workflow_id).describe()
        spans[c.name] = (desc.start_time, desc.close_time)
    assert spans["three"][0] >= min(spans["one"][1], spans["two"][1]), spans


CALLER = """
import urllib.error, urllib.request
base, token = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
if POOLS:  # the cheapest trick: make the task forget what its candidates spent
    try:
        for f in pathlib.Path(POOLS).iterdir():
            f.write_text("")
        (own / "tampered").write_text("yes")
    except OSError as e:
        (own / "tampered").write_text(type(e).__name__)
calls = []
deadline = time.time() + FOR_S
while time.time() < deadline:
    body = {"model": "gpt-4o-mini",
            "messages": [{"role": "user", "content": os.environ["LOOP_TASK_ID"]}]}
    request = urllib.request.Request(
        base + "/chat/completions", data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    sent = time.time()
    try:
        status = urllib.request.urlopen(request, timeout=30).status
    except urllib.error.HTTPError as e:
        status = e.code
    calls.append({"t": sent, "status": status})
    with (own / "model-calls.jsonl").open("a") as f:  # one line a call: it may be killed
        f.write(json.dumps(calls[-1]) + "\\n")
    if status != 200 and UNTIL_REFUSED:
        break
    time.sleep(PAUSE_S)
if FIXES:
    pathlib.Path("slugify.py").write_text(COMPLETE)
else:
    pathlib.Path("slugify.py").write_text("def slugify(t):\\n    return 'wrong'\\n")
"""


def caller(tmp_path: Path, url: str, *, fixes: bool, until_refused: bool, for_s: float,
           pause_s: float = 0.05, pools: str = "") -> dict:  # fmt: skip
    """An agent that calls its model through the gateway, for ``for_s`` seconds at most
    (first trying to empty the pools in ``pools``, where given)."""
    head = (f"FOR_S = {for_s}\nUNTIL_REFUSED = {until_refused}\nFIXES = {fixes}\n"
            f"PAUSE_S = {pause_s}\nPOOLS = {pools!r}\n")  # fmt: skip
    return {
        "command": write_agent(tmp_path, head + CALLER),
        "model": "gpt-4o-mini",
        "timeout": 60,
        "provider": {"api": "openai", "base_url": url},
    }


def model_calls(settings: Settings, task_id: str, name: str) -> list[dict]:
    """The calls a ``caller`` agent made, as it noted them (a line cut by its end skipped)."""
    found = []
    for log in sorted(settings.runs.glob(f"{task_id}+{name}/attempt-*/agent/model-calls.jsonl")):
        for line in log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                found.append(json.loads(line))
    return found


async def test_one_budget_for_all_candidates_overshoots_by_a_call_each_at_most(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Three candidates calling as fast as they can under 3,000 tokens for the task: each
    call is 350 tokens; alone, each candidate would spend 3,000 (the pool is what holds
    them to one budget together)."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ScriptedModel() as model:
        model.script([reply("ok", usage=(300, 50), delay=0.2)] * 60)
        pools = str(settings.home / "pools")
        agent = caller(
            tmp_path, model.url, fixes=False, until_refused=True, for_s=60, pause_s=0, pools=pools
        )
        spec = task(
            demo_repo,
            ["true"],
            candidates=3,
            choose="best",
            budget={"max_attempts": 3, "max_tokens": 3000},
            approval_timeout=2,
        )
        spec["agent"] = agent
        async with build_worker(client, settings):
            handle = await start(client, settings, spec)
            result: TaskResult = await result_of(handle, within=150)
    forwarded = 350 * len(model.requests)
    assert 3000 <= forwarded <= 3000 + 3 * 350, (forwarded, result.reason)
    assert result.tokens == forwarded  # the task's spend is every candidate's, as measured
    assert result.state == TaskState.BUDGET_EXCEEDED, result.reason
    assert "no candidate passed" in result.reason
    for c in result.candidates:
        assert c.budget and c.reason.startswith("token budget spent"), c.reason
    # Each candidate's agent was refused in the end, with the task's words for why; none
    # could reach the pool to make the task forget what they spent.
    for name in ("c1", "c2", "c3"):
        calls = model_calls(settings, spec["id"], name)
        assert calls and calls[-1]["status"] == 400, (name, calls)
        tried = settings.runs / f"{spec['id']}+{name}" / "attempt-1" / "agent" / "tampered"
        assert tried.read_text() in ("PermissionError", "FileNotFoundError"), tried.read_text()


async def test_first_stops_the_others_calls_within_a_second_of_the_verdict(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ScriptedModel() as model:
        model.script([reply("ok", usage=(10, 5), delay=0.05)] * 2000)
        busy = caller(tmp_path, model.url, fixes=False, until_refused=False, for_s=20)
        fixer = caller(tmp_path, model.url, fixes=True, until_refused=True, for_s=0.5)
        spec = task(
            demo_repo,
            ["true"],
            candidates=[
                {"name": "one", "agent": busy},
                {"name": "two", "agent": fixer},
                {"name": "three", "agent": busy},
            ],
            choose="first",
            budget={"max_attempts": 1},
        )
        async with build_worker(client, settings):
            handle = await start(client, settings, spec)
            result: TaskResult = await result_of(handle, within=150)
            verdict_at = await verified_at(client, f"task-{spec['id']}+two")
    assert result.state == TaskState.DONE_WITH_EVIDENCE and result.chosen == "two", result.reason
    for name in ("one", "three"):
        calls = model_calls(settings, spec["id"], name)
        paid = [c["t"] for c in calls if c["status"] == 200]
        # It was calling up to the verdict (so this is no idle agent), no call it made a
        # second after it was paid, and it was stopped (it meant to call for 20 s).
        assert paid and verdict_at - 1.0 < max(paid) <= verdict_at + 1.0, (name, calls[-3:])
        assert max(c["t"] for c in calls) < verdict_at + 3.0, (name, calls[-3:])
        assert result.choice and f"{name}: stopped" in result.choice
        record = by_name(result)[name]
        assert record.state == TaskState.CANCELLED, record


async def verified_at(client: Client, workflow_id: str) -> float:
    """When the candidate's verify step completed (the server's clock), as a timestamp."""
    names: dict[int, str] = {}
    done = 0.0
    async for ev in client.get_workflow_handle(workflow_id).fetch_history_events():
        if ev.HasField("activity_task_scheduled_event_attributes"):
            names[ev.event_id] = ev.activity_task_scheduled_event_attributes.activity_type.name
        elif ev.HasField("activity_task_completed_event_attributes"):
            scheduled = ev.activity_task_completed_event_attributes.scheduled_event_id
            if names.get(scheduled) == "verify":
                done = ev.event_time.ToDatetime(tzinfo=UTC).timestamp()
    assert done, f"{workflow_id} has no completed verify"
    return done


class ByStep(ScriptedModel):
    """Answers each conversation by its own step (the assistant turns it holds so far),
    so candidates calling at once each get their own script, in any interleaving."""

    def __init__(self, steps: list[Entry]) -> None:
        super().__init__()
        self.steps = steps

    def _next(self, record: dict) -> Entry | None:
        with self._lock:
            self.requests.append(record)
        done = step_of(record)
        return self.steps[done] if done < len(self.steps) else None


def step_of(request: dict) -> int:
    """A model request's step in its conversation: the assistant turns it holds."""
    return sum(m.get("role") == "assistant" for m in request["body"].get("messages", []))


SLOW_FIX = [
    reply(tool_calls=[("read_file", {"path": "slugify.py"})], usage=(1000, 50)),
    reply(tool_calls=[("run", {"command": "sleep 6"})], usage=(1100, 20)),
    reply(
        tool_calls=[("write_file", {"path": "slugify.py", "content": COMPLETE_FIX})],
        usage=(1200, 80),
    ),
    reply(tool_calls=[("finish", {"answer": "slugify fixed"})], usage=(1300, 10)),
]


@pytest.mark.timeout(240)
async def test_kill_9_with_three_candidates_running_resumes_all_paying_nothing_twice(
    client: Client, settings: Settings, demo_repo: Path
) -> None:
    """The worker is killed while each of three candidates' model loops runs a tool
    between its calls; a new worker resumes all three, and every call the model answered
    was sent once."""
    with ByStep(SLOW_FIX) as model:
        spec = task(demo_repo, ["true"], candidates=3, choose="best")
        spec["agent"] = {"backend": "openai", "model": "gpt-4o-mini", "base_url": model.url}
        host = Host(client, settings.home, settings.task_queue)
        await host.start()
        try:
            handle = await start(client, settings, spec)
            deadline = time.monotonic() + 90
            while len(model.requests) < 6:  # each of the three in its `sleep 6`
                assert time.monotonic() < deadline, (len(model.requests), host.tail())
                await asyncio.sleep(0.1)
            at_kill = Counter(step_of(r) for r in model.requests)
            await host.kill()
            await host.start()
            result: TaskResult = await result_of(handle, within=150)
        finally:
            await host.stop()
        steps = Counter(step_of(r) for r in model.requests)
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert [c.state for c in result.candidates] == [TaskState.DONE_WITH_EVIDENCE] * 3
    # Each candidate made each of its four calls once: twelve in all, three of each step
    # (each needs all four to finish, so one paid twice would make thirteen).
    assert steps == dict.fromkeys(range(len(SLOW_FIX)), 3), steps
    assert at_kill == {0: 3, 1: 3}, at_kill  # all three were between their calls
    assert result.tokens == 3 * (1050 + 1120 + 1280 + 1310)


FIX_SIGNED = """
pathlib.Path("slugify.py").write_text(COMPLETE + "# by NAME\\n")
out.write_text("fixed, NAME's way")
"""


def signed_fixes(tmp_path: Path) -> list[dict]:
    """Two candidates that fix it, each its own way (a comment with its name), and one
    that cannot."""
    return [
        {"name": n, "agent": {"command": write_agent(tmp_path, body.replace("NAME", n))}}
        for n, body in (("one", FIX_SIGNED), ("two", FIX_SIGNED), ("three", WRONG))
    ]


async def loop_cli(env: WorkflowEnvironment, settings: Settings, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        LOOP, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**ui_env(env, settings), "COLUMNS": "200"},
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode()


async def test_person_approves_one_candidate_by_name_from_the_cli(
    env: WorkflowEnvironment, client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    spec = task(
        demo_repo,
        ["true"],
        candidates=signed_fixes(tmp_path),
        choose="person",
        autonomy="assisted",
        budget={"max_attempts": 1},
    )
    task_id = spec["id"]
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        st = await wait_for(handle, lambda s: s.state == TaskState.AWAITING_APPROVAL, within=120)
        waiting = {c.name: c.commit for c in st.candidates if c.commit}
        assert set(waiting) == {"one", "two"} and not st.commit, st
        # Each waiting commit is its candidate's branch in the repository.
        for name, commit in waiting.items():
            assert git(demo_repo, "rev-parse", f"loop/{task_id}/{name}") == commit
        code, out = await loop_cli(env, settings, "status", task_id)
        assert code == 0 and "candidate" in out and "three" in out, out
        code, out = await loop_cli(env, settings, "inbox")
        assert f"candidate two: {waiting['two']}  (loop approve {task_id} --candidate two)" in out
        # An approval that names none of them is refused, with how to name one.
        code, out = await loop_cli(env, settings, "approve", task_id)
        assert code == 2 and "2 candidates waiting (one, two)" in out, out
        code, out = await loop_cli(env, settings, "approve", task_id, "--candidate", "three")
        assert code == 2 and "no candidate 'three' waiting" in out, out
        code, out = await loop_cli(env, settings, "approve", task_id, "--candidate", "two")
        assert code == 0 and "approved candidate two" in out, out
        result: TaskResult = await result_of(handle, within=60)
        await replays(handle, "candidates_person")
        code, traced = await loop_cli(env, settings, "trace", task_id)
    assert code == 0 and "chosen: two: approved by a person" in traced, traced
    assert all(name in traced for name in ("one", "two", "three")), traced
    assert result.state == TaskState.DONE_WITH_EVIDENCE and result.final_action == "merged"
    assert result.chosen == "two" and "approved by a person" in result.choice, result.choice
    assert "# by two" in git(demo_repo, "show", "main:slugify.py")
    git(demo_repo, "merge-base", "--is-ancestor", waiting["two"], "main")
    # The one not chosen was handed over for review while it waited; deleted at the end.
    assert git(demo_repo, "branch", "--list", f"loop/{task_id}/*") == ""


async def test_two_candidates_runs_at_the_gateway_share_one_pool(tmp_path: Path) -> None:
    """Each run alone may spend 3,000 tokens (three calls of 1,050); together they are
    held to 3,000 by the pool, over it by one call each at most. Once one is chosen, the
    other's next call is refused in the provider's error shape."""
    with ScriptedModel() as model:
        model.script([reply("x", usage=(1000, 50), delay=0.2)] * 20)
        runs = {
            n: grant(model.url, task=f"fix+{n}", max_tokens=3000,
                     pool=Pool.of(tmp_path, SharedBudget(key="k", member=n, tokens=3000)))
            for n in ("one", "two")
        }  # fmt: skip
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        async with attached(runs["one"]) as one, attached(runs["two"]) as two:
            calls = [c.post("/v1/chat/completions", json=body, headers=bearer(runs[n]))
                     for n, c in (("one", one), ("two", two)) for _ in range(4)]  # fmt: skip
            answered = await asyncio.gather(*calls)
            forwarded = len(model.requests)
            assert 3000 <= 1050 * forwarded <= 3000 + 2 * 1050, forwarded
            refused = [a.json()["error"]["message"] for a in answered if a.status_code == 400]
            assert refused and all("spent by its candidates" in m for m in refused), refused

            pool.choose(pool.pool_file(tmp_path, "k"), "two")
            runs["one"].pool.tokens = runs["two"].pool.tokens = None  # type: ignore[union-attr]
            runs["one"].max_tokens = runs["two"].max_tokens = None
            stopped = await one.post("/v1/chat/completions", json=body, headers=bearer(runs["one"]))
            going = await two.post("/v1/chat/completions", json=body, headers=bearer(runs["two"]))
    assert stopped.status_code == 400 and going.status_code == 200
    assert "candidate two was chosen; candidate one stops" in stopped.json()["error"]["message"]
    assert runs["one"].stopped == "candidate two was chosen"


async def test_a_cancelled_task_stops_its_candidates_and_keeps_their_branches(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    """`loop cancel` while three candidates run: each one's agent is stopped, its uid
    given back and its worktree removed; none was chosen, so their branches would be
    kept, but none made a commit: nothing is left in the repository."""
    slow = write_agent(tmp_path, WRONG_SLOWLY)
    spec = task(demo_repo, ["true"], candidates=3, budget={"max_attempts": 1})
    spec["agent"] = {"command": slow, "timeout": 60}
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        await wait_for(handle, lambda s: s.phase == "make" and len(s.candidates) == 3)
        await asyncio.sleep(1.5)  # each agent in its sleep, its attempt's first commit to come
        await handle.cancel()
        result: TaskResult = await result_of(handle, within=60)
    assert result.state == TaskState.CANCELLED, result.reason
    assert [c.state for c in result.candidates] == [TaskState.CANCELLED] * 3
    for c in result.candidates:
        assert c.workspace is not None and not Path(c.workspace.path).exists(), c.name
    assert not sandbox_holders(settings.home), "every candidate's uid given back"
    assert git(demo_repo, "branch", "--list", f"loop/{spec['id']}*") == ""
    for name in ("c1", "c2", "c3"):
        events = [e.detail for e in result.events if e.kind == "candidate"]
        assert any(d.startswith(f"{name} closed") for d in events), events


async def test_a_goal_met_at_base_asks_before_any_candidate_runs(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    """slugify is fixed on main already: explore, once for all candidates, sees every gate
    pass at base, so no candidate could show a fix; the task asks a person before any of
    them spends an attempt, as a single task does, and a reject ends it."""
    (demo_repo / "slugify.py").write_text(COMPLETE_FIX)
    git(demo_repo, "commit", "-qam", "fixed by hand")
    spec = task(demo_repo, ["true"], candidates=three(tmp_path, FIX, FIX), approval_timeout=600)
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        st = await wait_for(handle, lambda s: s.state == TaskState.NEEDS_HUMAN)
        await answer(client, spec["id"], "reject", RejectSignal(reason="no"), "ann", None)
        result: TaskResult = await result_of(handle, within=60)
    assert st.reason.startswith("goal already met at base"), st.reason
    assert [c.attempt for c in st.candidates] == [0, 0, 0], st.candidates
    assert result.state == TaskState.REJECTED, result.reason
    assert all(not c.attempts for c in result.candidates), result.candidates


async def test_a_candidate_whose_workflow_still_runs_waits_and_the_others_go_on(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    """An earlier run's candidate still running under the id (its task was terminated):
    that candidate cannot start, says why, and the others are not held up."""
    fixer = {"command": write_agent(tmp_path, FIX)}
    named = [{"name": "c1", "agent": fixer}, {"name": "c2", "agent": fixer}]
    spec = task(demo_repo, ["true"], budget={"max_attempts": 1}, candidates=named)
    squatter = await client.start_workflow(
        "Nothing", id=f"task-{spec['id']}+c1", task_queue=f"{settings.task_queue}-nobody"
    )
    try:
        async with build_worker(client, settings):
            handle = await start(client, settings, spec)
            result: TaskResult = await result_of(handle, within=120)
    finally:
        await squatter.terminate()
    assert result.state == TaskState.DONE_WITH_EVIDENCE and result.chosen == "c2", result.reason
    c1 = by_name(result)["c1"]
    assert c1.state == TaskState.NEEDS_HUMAN and "still runs" in c1.reason, c1


SECOND_WITH_FEEDBACK = """
if attempt == 1:
    pathlib.Path("slugify.py").write_text("def slugify(t):\\n    return t.lower()\\n")
else:
    prompt = pathlib.Path(os.environ["LOOP_PROMPT_FILE"]).read_text()
    assert "use a regular expression" in prompt, prompt
    assert json.loads(pathlib.Path(os.environ["LOOP_FEEDBACK_FILE"]).read_text())["failed"]
    pathlib.Path("slugify.py").write_text(COMPLETE)
"""


async def test_feedback_after_no_candidate_passed_starts_another_round_from_where_they_were(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    spec = task(
        demo_repo,
        ["true"],
        candidates=[
            {"name": "one", "agent": {"command": write_agent(tmp_path, WRONG)}},
            {"name": "two", "agent": {"command": write_agent(tmp_path, SECOND_WITH_FEEDBACK)}},
        ],
        budget={"max_attempts": 1},
    )
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        st = await wait_for(handle, lambda s: s.state == TaskState.NEEDS_HUMAN, within=120)
        assert st.reason.startswith("no candidate passed: one: NEEDS_HUMAN"), st.reason
        await answer(client, spec["id"], "feedback",
                     FeedbackSignal(text="use a regular expression"), "ann", None)  # fmt: skip
        result: TaskResult = await result_of(handle, within=120)
    assert result.state == TaskState.DONE_WITH_EVIDENCE and result.chosen == "two", result.reason
    cands = by_name(result)
    # Each went on from where it stopped: attempt 2 in the same worktree, with the feedback
    # of its attempt 1's verdict and the person's text.
    assert [a.attempt for a in cands["two"].attempts] == [1, 2]
    assert [a.attempt for a in cands["one"].attempts] == [1, 2]
    assert cands["two"].attempts[1].feedback is not None
    assert [a.attempt for a in result.attempts] == [1, 2]  # the chosen one's
