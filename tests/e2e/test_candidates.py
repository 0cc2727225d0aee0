"""Many candidates, one verdict: scripted agents in parallel, judged by the same gates,
one kept (docs/concepts/candidates.md), on the real dev server, in basic and strict."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from loop.contracts import ApproveSignal, FinalAction, TaskResult, TaskState
from loop.errors import BadInput
from loop.settings import Settings
from loop.tasks import answer
from tests.support.agents import write_agent
from tests.support.host import LEVELS
from tests.support.repos import git
from tests.support.tasks import result_of, start, task, wait_for
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
