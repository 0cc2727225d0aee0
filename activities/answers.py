"""check_answer: whether an answer a task received was signed with the answer key.

A local activity: it runs on the worker that runs the workflow, reads the key there
(``loop.hardened.answers``: the key never enters history or a payload), and gives the
workflow one recorded verdict, so a replay decides the same way. An answer is
accepted when its signature holds, it was signed at most ``MAX_AGE_S`` before the
workflow received it (and not after), and, with no key on this worker, always (the
trace then says it was unsigned).
"""

from __future__ import annotations

from datetime import datetime

from temporalio import activity

from loop.contracts import CHECK_ANSWER, CheckAnswerInput, CheckAnswerResult
from loop.hardened import answers
from loop.settings import Settings

SKEW_S = 60
"""How far ahead of the worker's clock a person's clock may be."""


class AnswerActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=CHECK_ANSWER.name)
    async def check_answer(self, inp: CheckAnswerInput) -> CheckAnswerResult:
        path = self.settings.answer_key
        if path is None:
            return CheckAnswerResult(accepted=True, why="the worker has no answer key")
        try:
            key = answers.read_key(path)
        except answers.AnswerKeyError as e:
            # Every answer would be refused: say so rather than silently ignore people.
            return CheckAnswerResult(accepted=False, why=str(e))
        if not inp.fields.get("signature"):
            return CheckAnswerResult(accepted=False, why="unsigned")
        if not answers.valid(key, inp.workflow_id, inp.answer, inp.fields):
            return CheckAnswerResult(accepted=False, why="the signature does not hold")
        try:
            signed = datetime.fromisoformat(str(inp.fields.get("at", "")))
            received = datetime.fromisoformat(inp.received)
        except ValueError:
            return CheckAnswerResult(accepted=False, why="no time of signing")
        age = (received - signed).total_seconds()
        if age > answers.MAX_AGE_S or age < -SKEW_S:
            return CheckAnswerResult(
                accepted=False, why=f"signed {age:.0f} s before it arrived (stale)"
            )
        return CheckAnswerResult(accepted=True, signed=True)
