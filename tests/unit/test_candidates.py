"""A task's candidates without a server: the task file's rules, the candidates' rules
(their tasks, their ranking, the choice's words, which approval takes which), the pool
on their host, and their branches in a real repository."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
from pathlib import Path

import pytest

from activities.candidates import _remove
from activities.host import pool
from activities.host.worktree import changed_files, diff_stat
from activities.workspace import WorkspaceActivities
from loop.contracts import (
    AttemptRecord,
    CandidateRecord,
    SharedBudget,
    TaskSpec,
    TaskState,
    Verdict,
)
from loop.errors import TaskFileError
from loop.loaders import load_task
from loop.rules import answers
from loop.rules import candidates as rules
from loop.rules.evaluation import pass_at
from loop.settings import Settings
from tests.unit.test_workspace import prepare, repo, sh  # noqa: F401  (the repo fixture)

BASE = {
    "id": "fix",
    "goal": "fix it",
    "repo": "/r",
    "agent": {"command": ["python3", "a.py"]},
    "verify": [{"name": "tests", "run": "true"}],
}


def spec(**more: object) -> TaskSpec:
    return TaskSpec.model_validate({**BASE, **more})


# --------------------------------------------------------------------------- the task file


def test_candidates_a_number_or_a_list_named_by_place() -> None:
    three = spec(candidates=3)
    assert [n for n, _ in rules.members(three)] == ["c1", "c2", "c3"]
    assert all(a == three.agent for _, a in rules.members(three))
    listed = spec(candidates=[{"agent": {"command": ["x"]}, "name": "claude"},
                              {"agent": {"command": ["y"]}}])  # fmt: skip
    assert [(n, a.command) for n, a in rules.members(listed)] == [
        ("claude", ["x"]), ("c2", ["y"])
    ]  # fmt: skip
    assert rules.members(spec()) == []


@pytest.mark.parametrize(
    ("more", "words"),
    [
        ({"candidates": 1}, "candidates: 1 is not between 2 and 8"),
        ({"candidates": 9}, "candidates: 9 is not between 2 and 8"),
        ({"candidates": [{"agent": {"command": ["x"]}, "name": "a"}] * 2}, "'a' is given twice"),
        # An unnamed second candidate is c2: a first one named c2 takes its name.
        (
            {
                "candidates": [
                    {"agent": {"command": ["x"]}, "name": "c2"},
                    {"agent": {"command": ["y"]}},
                ]
            },
            "'c2' is given twice",
        ),
        ({"candidates": [{"agent": {"command": ["x"]}, "name": "A/b"}]}, "pattern"),
        ({"max_parallel": 2}, "max_parallel is for a task with candidates"),
        ({"keep_candidates": True}, "keep_candidates is for a task with candidates"),
        ({"choose": "best"}, "choose is for a task with candidates"),
        ({"candidates": 2, "choose": "person"}, "autonomy: assisted"),
        ({"candidates": 2, "choose": "whim"}, "choose"),
        ({"candidates": [{"agent": {"command": ["x"]}, "nmae": "a"}]}, "nmae"),
    ],
)
def test_a_bad_candidates_key_is_refused(more: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        spec(**more)


def test_choose_person_with_assisted_and_every_default_pass() -> None:
    s = spec(candidates=2, choose="person", autonomy="assisted", max_parallel=1)
    assert (s.choose, s.max_parallel, s.keep_candidates) == ("person", 1, False)
    # A payload carries every field, defaults too: a task without candidates still loads.
    again = TaskSpec.model_validate_json(spec().model_dump_json())
    assert again.candidates is None and again.choose == "first"


def test_the_loader_refuses_a_candidates_id_and_checks_each_candidates_agent(
    tmp_path: Path,
    repo: Path,  # noqa: F811
) -> None:
    def load(**more: object) -> TaskSpec:
        file = tmp_path / "task.yaml"
        file.write_text(json.dumps({**BASE, "repo": str(repo), "base": "main",
                                    "agent": {"command": ["true"]}, **more}))  # fmt: skip
        return load_task(file)

    with pytest.raises(TaskFileError, match=r"'\+' is kept for a task's candidates"):
        load(id="fix+c2")
    bad = [{"agent": {"command": ["true"]}}, {"agent": {"command": ["no-such-agent-4713"]}}]
    with pytest.raises(TaskFileError, match=r"candidates\[1\]\.agent\.command runs"):
        load(candidates=bad)
    silent = [{"agent": {"command": ["true"]}}, {"agent": {"command": ["true"]}}]
    with pytest.raises(TaskFileError, match=r"this command agent \(candidates\[0\]\.agent\)"):
        load(candidates=silent, budget={"max_tokens": 100},
             agent={"command": ["true"], "usage": "file"})  # fmt: skip
    assert load(candidates=2).candidates == 2


# --------------------------------------------------------------------------- their tasks


def test_a_candidates_task_is_its_own_and_loads_as_one() -> None:
    task = spec(candidates=3, choose="best", keep_candidates=True, max_parallel=2,
                budget={"max_seconds": 600, "max_attempts": 3},
                github_issue={"repo": "o/r", "number": 4})  # fmt: skip
    agent = task.agent.model_copy(update={"command": ["other"]})
    mine = rules.member_spec(task, "c2", agent, max_attempts=5, max_tokens=900, max_cost_usd=None)
    assert mine.id == "fix+c2" and mine.agent.command == ["other"]
    assert (mine.budget.max_attempts, mine.budget.max_tokens, mine.budget.max_seconds) == (
        5, 900, None
    )  # fmt: skip
    assert mine.candidates is None and mine.github_issue is None and not mine.keep_candidates
    # Through the wire, as the candidate's workflow and its steps receive it.
    assert TaskSpec.model_validate_json(mine.model_dump_json()) == mine
    assert rules.candidate_id("fix", "c2") == "fix+c2"
    assert (rules.task_of("fix+c2"), rules.name_of("fix+c2")) == ("fix", "c2")
    assert (rules.task_of("fix"), rules.name_of("fix")) == ("fix", "")


def test_a_candidates_branch_is_under_its_tasks() -> None:
    from loop.contracts import branch_for

    assert branch_for("fix+c2") == "loop/fix/c2" and branch_for("fix") == "loop/fix"


def test_an_agent_in_a_few_words() -> None:
    words = rules.agent_words
    task = spec()
    assert words(task.agent.model_copy(update={"command": ["claude", "-p"]})) == "claude-code"
    assert words(task.agent.model_copy(update={"command": ["/usr/bin/python3", "/a/b.py"]})) == (
        "python3 b.py"
    )
    model = task.agent.model_copy(update={"backend": "openai", "model": "gpt-4o-mini"})
    assert words(model) == "openai gpt-4o-mini"


# --------------------------------------------------------------------------- the choice


def rec(
    name: str, state: TaskState = TaskState.DONE_WITH_EVIDENCE, **more: object
) -> CandidateRecord:
    verdict = Verdict(passed=state == TaskState.DONE_WITH_EVIDENCE, gates=[])
    attempts = [AttemptRecord(attempt=1, verdict=verdict)]
    return CandidateRecord(name=name, state=state, attempts=attempts, **more)  # type: ignore[arg-type]


def test_best_ranks_passed_then_fewer_lines_then_cost_then_name() -> None:
    order = rules.ranked([
        rec("a", TaskState.NEEDS_HUMAN, cost_usd=0.0),
        rec("b", changed_lines=12, cost_usd=0.01),
        rec("c", changed_lines=3, cost_usd=0.50),
        rec("d", changed_lines=3, cost_usd=0.10),
        rec("e", changed_lines=3, cost_usd=0.10),
    ])  # fmt: skip
    assert [r.name for r in order] == ["d", "e", "c", "b", "a"]
    said = rules.why_best(order)
    assert said.startswith("d: ranked first (passed, 3 changed lines, $0.1000); then e:")
    assert said.endswith("a: NEEDS_HUMAN")


def test_first_says_what_became_of_the_others() -> None:
    stopped = rec("three", TaskState.CANCELLED, reason="not started")
    said = rules.why_first(rec("two"), [rec("one", TaskState.RUNNING), stopped])
    assert said == (
        "two: the first whose verdict passed (attempt 1); one: stopped at attempt 1; "
        "three: stopped (not started)"
    )
    assert rules.why_person("two", " (by ann)", ["one", "two"]) == (
        "two: approved by a person (by ann) over one"
    )


def test_none_passed_blocked_only_when_all_blocked_budget_only_when_all_spent() -> None:
    blocked = rec("a", TaskState.BLOCKED, reason="policy violation: x")
    spent = rec("b", TaskState.NEEDS_HUMAN, budget=True, reason="attempts exhausted")
    unsure = rec("c", TaskState.NEEDS_HUMAN, reason="uncertain checker: tests")
    assert rules.none_passed([blocked, blocked]).state == TaskState.BLOCKED
    out = rules.none_passed([blocked, spent])
    assert (out.state, out.budget) == (TaskState.NEEDS_HUMAN, True)
    assert out.reason == (
        "no candidate passed: a: BLOCKED: policy violation: x; b: NEEDS_HUMAN: attempts exhausted"
    )
    assert not rules.none_passed([spent, unsure]).budget
    assert [r.name for r in rules.continuing([blocked, spent, unsure])] == ["b", "c"]


def test_an_approval_takes_the_candidate_it_names_and_only_with_its_commit() -> None:
    waiting = {"one": "a" * 40, "two": "b" * 40}
    chosen = answers.chosen
    assert chosen("t", "two", "", waiting) == ("two", "")
    assert chosen("t", "two", "b" * 7, waiting) == ("two", "")
    assert chosen("t", "", "a" * 12, waiting) == ("one", "")
    # The cheapest tricks: another's commit under one's name, a name not waiting, a
    # commit too short to name one, and naming none while two wait.
    assert "waits for approval of commit bbbbbbbbbbbb" in chosen("t", "two", "a" * 40, waiting)[1]
    assert "no candidate 'three' waiting (one, two)" in chosen("t", "three", "", waiting)[1]
    assert chosen("t", "", "aaaa", waiting)[0] == ""
    assert chosen("t", "", "", waiting) == (
        "", "task t has 2 candidates waiting (one, two); approve one: "
        "loop approve t --candidate NAME"
    )  # fmt: skip
    assert chosen("t", "", "", {"one": "a" * 40}) == ("one", "")


def test_a_record_as_the_status_shows_it() -> None:
    r = rec("two", commit="c" * 40, changed_lines=4, tokens=10, cost_usd=0.0012345678)
    v = rules.view(r)
    assert (v.name, v.attempt, v.commit, v.changed_lines, v.cost_usd) == (
        "two", 1, "c" * 40, 4, 0.001235
    )  # fmt: skip
    assert rules.view(rec("one", TaskState.NEEDS_HUMAN, commit="d" * 40)).commit == ""
    assert rules.view(r, waiting="e" * 40).commit == "e" * 40


def test_pass_at_1_and_k_per_case() -> None:
    from loop.contracts import CaseOutcome

    def case(accepted: bool, n: int = 0, passed: int = 0) -> CaseOutcome:
        return CaseOutcome(harness="h", case="c", task_id="t", state=TaskState.BLOCKED,
                           accepted=accepted, candidates=n, candidates_passed=passed)  # fmt: skip

    assert pass_at([case(True, 3, 1), case(False, 3, 0), case(True, 2, 2)]) == pytest.approx(
        ((1 / 3 + 0 + 1) / 3, 2 / 3)
    )
    assert pass_at([case(True), case(False)]) == (0.5, 0.5)  # one try each: the pass rate
    assert pass_at([]) == (0.0, 0.0)


# --------------------------------------------------------------------------- the pool


def shared(member: str, tokens: int | None = 1000) -> SharedBudget:
    return SharedBudget(key="fix-run1", member=member, tokens=tokens, cost_usd=None)


def test_the_pool_counts_everyones_calls_and_refuses_once_the_task_has_spent(
    tmp_path: Path,
) -> None:
    one, two = pool.Pool.of(tmp_path, shared("one")), pool.Pool.of(tmp_path, shared("two"))
    assert one.check() == ("", "")
    one.add(600, 0.01)
    assert two.check() == ("", "")
    two.add(500, 0.02)
    short, said = one.check()
    assert short == "token budget spent"
    assert said == "this task's token budget is spent by its candidates (1100 tokens of 1000)"
    tally = pool.read(one.path)
    assert (tally.tokens, tally.members["two"].tokens) == (1100, 500)
    assert tally.cost_usd == pytest.approx(0.03)


def test_a_chosen_candidate_stops_the_others_not_itself(tmp_path: Path) -> None:
    one, two = (
        pool.Pool.of(tmp_path, shared("one", None)),
        pool.Pool.of(tmp_path, shared("two", None)),
    )
    pool.choose(one.path, "two")
    assert one.check() == (
        "candidate two was chosen",
        "candidate two was chosen; candidate one stops",
    )
    assert two.check() == ("", "")


def test_a_line_cut_by_a_crash_or_forged_is_skipped(tmp_path: Path) -> None:
    p = pool.Pool.of(tmp_path, shared("one"))
    p.add(100, 0.0)
    with p.path.open("a") as f:
        f.write('{"m": "one", "t": 99')  # cut mid-line by a crash
        f.write('\n[1, 2]\n{"m": 3, "t": 5}\n{"m": "one", "t": "900"}\n')
    p.add(50, 0.0)
    assert pool.read(p.path).tokens == 150


def _adds(path: str, member: str, n: int) -> None:
    p = pool.Pool(Path(path), member, None, None)
    for _ in range(n):
        p.add(7, 0.001)


def test_pool_appends_from_many_processes_are_never_lost(tmp_path: Path) -> None:
    """Every worker process of the host appends to one pool without a lock: each line is
    one write on a descriptor opened for appending."""
    path = pool.pool_file(tmp_path, "fix-run1")
    procs = [
        multiprocessing.Process(target=_adds, args=(str(path), f"c{i}", 400)) for i in range(4)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(30)
    tally = pool.read(path)
    assert tally.tokens == 4 * 400 * 7
    assert {m: u.tokens for m, u in tally.members.items()} == {f"c{i}": 2800 for i in range(4)}


# --------------------------------------------------------------------------- their branches


async def test_a_candidate_branch_and_its_tasks_never_block_each_other(
    tmp_path: Path,
    repo: Path,  # noqa: F811
) -> None:
    """Git keeps no branch inside another's name: ``loop/fix`` left by an earlier run is
    kept aside when a candidate needs ``loop/fix/c1``, and candidates' branches when a
    task needs ``loop/fix``; what base holds already is dropped."""
    acts = WorkspaceActivities(Settings(home=tmp_path / "home"))
    sh(repo, "branch", "loop/fix")  # at base: base holds it
    sh(repo, "checkout", "-q", "-b", "side")
    (repo / "side.txt").write_text("kept\n")
    sh(repo, "add", ".")
    sh(repo, "commit", "-q", "-m", "side work")
    side = sh(repo, "rev-parse", "HEAD")
    sh(repo, "checkout", "-q", "main")
    sh(repo, "branch", "-f", "loop/fix", side)  # work base lacks: kept aside
    ws = await prepare(acts, repo, task_id="fix+c1", base="main")
    assert ws.branch == "loop/fix/c1"
    assert sh(repo, "rev-parse", f"loop/fix.prev-{side[:12]}") == side
    # The candidate's branch handed over, then a task of the same id without candidates.
    (Path(ws.path) / "c1.txt").write_text("c1\n")
    sh(Path(ws.path), "add", ".")
    sh(Path(ws.path), "commit", "-q", "-m", "c1")
    tip = sh(Path(ws.path), "rev-parse", "HEAD")
    sh(repo, "fetch", "-q", ws.path, "loop/fix/c1:loop/fix/c1")
    plain = await prepare(acts, repo, task_id="fix", run_id="r2", base="main")
    assert plain.branch == "loop/fix"
    assert sh(repo, "rev-parse", f"loop/fix.prev-c1-{tip[:12]}") == tip
    assert sh(repo, "branch", "--list", "loop/fix/*") == ""


async def test_the_diff_stat_counts_lines_both_ways_and_a_binary_file_once(
    tmp_path: Path,
    repo: Path,  # noqa: F811
) -> None:
    acts = WorkspaceActivities(Settings(home=tmp_path / "home"))
    ws = await prepare(acts, repo, task_id="t9", base="main")
    tree = Path(ws.path)
    (tree / "shared.txt").write_text("one\nTWO\nthree\nfour\n")  # 1 removed, 2 added
    (tree / "blob.bin").write_bytes(b"\x00\x01\x02" * 10)
    sh(tree, "add", ".")
    sh(tree, "commit", "-q", "-m", "x")
    head = sh(tree, "rev-parse", "HEAD")
    paths, lines = await diff_stat(ws, head)
    assert lines == 4
    assert paths == ["blob.bin", "shared.txt"] == await changed_files(ws, head)


async def test_the_diff_stat_names_the_paths_changed_files_names(
    tmp_path: Path,
    repo: Path,  # noqa: F811
) -> None:
    """One git call for both: a tab, a newline or bytes that are not UTF-8 in a name, a
    deleted file and one moved (no renames: both names) come out as ``changed_files``."""
    acts = WorkspaceActivities(Settings(home=tmp_path / "home"))
    ws = await prepare(acts, repo, task_id="t10", base="main")
    tree = Path(ws.path)
    (tree / "a\tb.txt").write_text("tab\n")
    (tree / "line\nbreak.txt").write_text("newline\n")
    (tree / os.fsdecode(b"caf\xe9.txt")).write_text("latin-1\n")
    sh(tree, "mv", "shared.txt", "moved.txt")
    sh(tree, "add", "-A")
    sh(tree, "commit", "-q", "-m", "x")
    head = sh(tree, "rev-parse", "HEAD")
    paths, lines = await diff_stat(ws, head)
    assert paths == await changed_files(ws, head)
    assert {"a\tb.txt", "line\nbreak.txt", "caf\\xe9.txt", "moved.txt", "shared.txt"} <= set(paths)
    assert lines >= 3


def test_closing_removes_a_tasks_clone_and_nothing_else(tmp_path: Path) -> None:
    plain = tmp_path / "not-a-clone"
    (plain / ".git").mkdir(parents=True)
    assert not _remove(str(plain)) and plain.exists()  # no alternates: not a task's clone
    assert _remove(str(tmp_path / "gone"))
    clone = tmp_path / "clone"
    subprocess.run(["git", "init", "-q", str(clone)], check=True)
    (clone / ".git" / "objects" / "info" / "alternates").write_text(f"{tmp_path}\n")
    assert _remove(str(clone)) and not clone.exists()
