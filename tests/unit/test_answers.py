"""Answers: when one applies (the rule the task's validators and signals share), the
signature a person's tool makes and the check the worker runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from activities.answers import AnswerActivities
from loop.contracts import (
    WAITING_APPROVAL,
    WAITING_DECISION,
    WAITING_PULL_REQUEST,
    ApproveSignal,
    CheckAnswerInput,
    ExtendBudgetSignal,
    TaskState,
)
from loop.errors import BadInput
from loop.hardened import answers
from loop.rules import answers as rules
from loop.settings import Settings
from loop.tasks import signed

WF = "task-fix-1"


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "answer.key"
    assert answers.create_key(path)
    assert not answers.create_key(path)  # never replaced
    assert path.stat().st_mode & 0o777 == 0o600
    return path


async def check(settings: Settings, answer: str, fields: dict, received: datetime | None = None):
    when = (received or datetime.now(UTC)).isoformat(timespec="seconds")
    inp = CheckAnswerInput(workflow_id=WF, answer=answer, fields=fields, received=when)
    return await AnswerActivities(settings).check_answer(inp)


async def test_a_signed_answer_is_accepted_and_credits_its_sender(
    tmp_path: Path, key_file: Path
) -> None:
    settings = Settings(home=tmp_path, answer_key_file=key_file)
    payload = signed(ApproveSignal(note="ok"), "fix-1", "approve", "alice", key_file)
    assert payload.by == "alice" and len(payload.signature) == 64
    result = await check(settings, "approve", payload.model_dump(mode="json"))
    assert result.accepted and result.signed


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"by": "mallory"}, "the signature does not hold"),  # a name it chose
        ({"note": "lgtm"}, "the signature does not hold"),
        ({"signature": ""}, "unsigned"),
        ({"signature": "0" * 64}, "the signature does not hold"),
    ],
)
async def test_a_changed_or_unsigned_answer_is_refused(
    tmp_path: Path, key_file: Path, change: dict, why: str
) -> None:
    settings = Settings(home=tmp_path, answer_key_file=key_file)
    fields = signed(ApproveSignal(note="ok"), "fix-1", "approve", "alice", key_file).model_dump()
    result = await check(settings, "approve", {**fields, **change})
    assert not result.accepted and result.why == why


async def test_an_answer_for_another_task_or_another_answer_is_refused(
    tmp_path: Path, key_file: Path
) -> None:
    settings = Settings(home=tmp_path, answer_key_file=key_file)
    fields = signed(ApproveSignal(), "fix-2", "approve", "alice", key_file).model_dump()
    assert not (await check(settings, "approve", fields)).accepted  # signed for task-fix-2
    assert not (await check(settings, "reject", fields)).accepted


async def test_a_stale_answer_is_refused(tmp_path: Path, key_file: Path) -> None:
    settings = Settings(home=tmp_path, answer_key_file=key_file)
    fields = signed(ExtendBudgetSignal(attempts=1), "fix-1", "extend", "a", key_file).model_dump()
    later = datetime.now(UTC) + timedelta(seconds=answers.MAX_AGE_S + 5)
    result = await check(settings, "extend_budget", fields, received=later)
    assert not result.accepted and "stale" in result.why


async def test_without_a_key_answers_are_taken_unsigned(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    assert settings.answer_key is None
    result = await check(settings, "approve", ApproveSignal(by="anyone").model_dump())
    assert result.accepted and not result.signed
    assert result.why == "the worker has no answer key"


async def test_the_default_key_is_found_in_loop_home(tmp_path: Path) -> None:
    answers.create_key(tmp_path / answers.KEY_NAME)
    assert Settings(home=tmp_path).answer_key == tmp_path / answers.KEY_NAME


def test_a_bad_key_file_is_one_line_of_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.key"
    bad.write_text("not hex\n")
    with pytest.raises(BadInput, match="not a hex key"):
        signed(ApproveSignal(), "fix-1", "approve", "a", bad)
    with pytest.raises(BadInput, match="No such file"):
        signed(ApproveSignal(), "fix-1", "approve", "a", tmp_path / "missing.key")


# --------------------------------------------------------------------------- when one applies


@pytest.mark.parametrize(
    ("state", "waiting_for", "applying"),
    [
        (TaskState.AWAITING_APPROVAL, WAITING_APPROVAL, {"approve", "reject"}),
        (TaskState.NEEDS_HUMAN, WAITING_APPROVAL, {"approve", "reject"}),  # a merge to retry
        (TaskState.NEEDS_HUMAN, WAITING_DECISION, {"reject", "feedback", "extend_budget"}),
        (TaskState.RUNNING, "", {"feedback", "extend_budget"}),
        (TaskState.NEEDS_HUMAN, "", set()),  # ended NEEDS_HUMAN: nobody waits any more
        (TaskState.DONE_WITH_EVIDENCE, "", set()),
        # its pull request is open on GitHub: a review is feedback, a close ends it
        (
            TaskState.AWAITING_APPROVAL,
            WAITING_PULL_REQUEST,
            {"reject", "feedback", "pull_request_closed"},
        ),
    ],
)
def test_one_rule_says_which_answers_apply(
    state: TaskState, waiting_for: str, applying: set[str]
) -> None:
    names = ("approve", "reject", "feedback", "extend_budget", "pull_request_closed")
    assert {n for n in names if rules.applies(n, state, waiting_for)} == applying
    for name in names:
        why = rules.refusal("t1", name, state, waiting_for)
        assert (why == "") == (name in applying), (name, why)


def test_a_refusal_says_what_the_task_is_doing_in_one_line() -> None:
    running = rules.refusal("t1", "approve", TaskState.RUNNING, "")
    assert running == "task t1 is RUNNING; approve does not apply now"
    waiting = rules.refusal("t1", "feedback", TaskState.AWAITING_APPROVAL, WAITING_APPROVAL)
    assert waiting == (
        "task t1 is AWAITING_APPROVAL, waiting for approval (loop approve, or loop reject); "
        "feedback does not apply now"
    )
    ended = rules.refusal("t1", "reject", TaskState.NEEDS_HUMAN, "")
    assert ended == "task t1 has ended NEEDS_HUMAN; reject does not apply"
    with pytest.raises(ValueError, match="unknown answer"):
        rules.applies("merge", TaskState.RUNNING, "")


def test_an_extension_reads_as_what_it_adds() -> None:
    assert rules.extension(ExtendBudgetSignal(attempts=1, seconds=600)) == "+1 attempt, +600 s"
    assert rules.extension(ExtendBudgetSignal(attempts=2, cost_usd=0.5)) == "+2 attempts, +$0.5"
    assert rules.extension(ExtendBudgetSignal()) == "nothing added"
