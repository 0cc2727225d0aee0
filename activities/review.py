"""review: the ``llm_review`` gate, a checker in a fresh context.

The reviewer sees the goal, the task's fixed rubric, the diff of the attempt
and the other gates' evidence, never the maker's conversation, and must answer
in a fixed JSON shape in which every failure cites evidence. An answer that
does not validate is "uncertain": the task escalates rather than pass on a
checker's shrug. Like a model step, the answer is kept as an artifact before
the activity returns, so a retry after a crash never pays for it twice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator
from temporalio import activity

from activities.host.git import git
from activities.host.proc import heartbeating
from activities.model import classify, client_for, display_url, key, write_once
from loop.contracts import REVIEW, Evidence, GateResult, ReviewInput
from loop.errors import permanent
from loop.logs import log_for
from loop.pricing import cost, load_prices
from loop.settings import Settings

DIFF_CHARS = 30_000
REVIEW_CALL_S = 300
EVIDENCE_CHARS = 1_500

SYSTEM = """\
You are a strict code reviewer. You judge one change against a fixed rubric.
You did not write the change. Judge only what the diff and the evidence show.
Answer with one JSON object and nothing else:
{"passed": true|false,
 "failures": [{"requirement": "<rubric item not met>",
               "evidence": "<what in the diff or the gate output shows it>",
               "required_correction": "<what must change>"}]}
"passed" is true only when every rubric item is met; then "failures" is [].
When "passed" is false, list every failure, each citing concrete evidence."""


class Failure(BaseModel):
    requirement: str = Field(min_length=1)
    evidence: str = Field(min_length=1)
    required_correction: str = Field(min_length=1)


class Answer(BaseModel):
    passed: bool
    failures: list[Failure] = Field(default_factory=list)

    @field_validator("failures")
    @classmethod
    def _consistent(cls, failures: list[Failure], info: Any) -> list[Failure]:
        passed = info.data.get("passed")
        if passed and failures:
            raise ValueError("passed is true but failures are listed")
        if passed is False and not failures:
            raise ValueError("passed is false but no failure is cited")
        return failures


class ReviewActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.prices = load_prices(settings.home)

    @activity.defn(name=REVIEW.name)
    async def review(self, inp: ReviewInput) -> GateResult:
        gate, task = inp.gate, inp.task
        spec = gate.llm_review
        model = spec.model or task.agent.model
        if not model:
            raise permanent(f"gate {gate.name}: llm_review needs a model (in the gate or agent)")
        folder = Path(inp.workspace.run_dir) / f"attempt-{inp.attempt}"
        folder.mkdir(parents=True, exist_ok=True)
        artifact = folder / f"review-{gate.name}.json"
        log = log_for(task.id, inp.attempt, "review").bind(gate=gate.name)
        if not artifact.exists():
            messages = [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": await self._brief(inp)},
            ]
            answer = await self._ask(model, spec.base_url or task.agent.base_url, messages)
            write_once(artifact, json.dumps(answer, indent=2).encode())
        else:
            log.info("review already answered; not asking again")
        stored = json.loads(artifact.read_text())
        result = judge(gate.name, spec.rubric, stored["content"])
        log.info("review", passed=result.passed, uncertain=result.uncertain)
        return result

    async def _brief(self, inp: ReviewInput) -> str:
        diff = await git(
            ["diff", "--no-color", "--no-ext-diff", f"{inp.workspace.base_commit}..{inp.artifact}"],
            inp.workspace.path,
        )
        if len(diff) > DIFF_CHARS:
            diff = diff[:DIFF_CHARS] + f"\n[diff cut at {DIFF_CHARS} characters]"
        lines = [
            "## Goal",
            inp.task.goal.strip(),
            "",
            "## Rubric (fixed)",
            inp.gate.llm_review.rubric,
            "",
            "## Diff against base",
            "```diff",
            diff or "(no changes)",
            "```",
            "",
            "## Evidence from the other gates",
        ]
        for g in inp.evidence:
            tail = g.evidence.output_tail.strip()[-EVIDENCE_CHARS:]
            lines.append(
                f"- {g.name} ({g.kind}): {'pass' if g.passed else 'FAIL'} "
                f"{g.evidence.detail}".rstrip()
            )
            if tail and not g.passed:
                lines += ["```", tail, "```"]
        if inp.claim:
            lines += ["", "## The maker's claim (not evidence)", inp.claim.strip()[:2_000]]
        return "\n".join(lines)

    async def _ask(self, model: str, base_url: str | None, messages: list) -> dict[str, Any]:
        import openai  # at first use (``activities.model.client_for`` says why)

        api_key = key()
        async with client_for(base_url, REVIEW_CALL_S) as client:
            where = f"review model {model} at {display_url(str(client.base_url))}"
            try:
                response = await heartbeating(
                    client.chat.completions.create(
                        model=model,
                        messages=messages,
                        response_format={"type": "json_object"},
                        temperature=0,
                    )
                )
            except openai.OpenAIError as e:
                raise classify(e, where, api_key) from None
        choice = response.choices[0] if response.choices else None
        usage = response.usage
        tokens_in = usage.prompt_tokens if usage else 0
        tokens_out = usage.completion_tokens if usage else 0
        return {
            "content": (choice.message.content if choice else None) or "",
            "model": model,
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
            "cost_usd": cost(model, tokens_in, tokens_out, self.prices),
        }


def judge(name: str, rubric: str, content: str) -> GateResult:
    """The gate's result from the reviewer's raw answer; unparseable means uncertain."""
    requirement = f"an independent review finds every rubric item met: {rubric.strip()[:200]}"
    try:
        answer = Answer.model_validate(json.loads(content))
    except (ValueError, ValidationError) as e:
        reason = str(e).splitlines()[0][:200]
        return GateResult(
            name=name,
            kind="llm_review",
            passed=False,
            uncertain=True,
            requirement=requirement,
            evidence=Evidence(
                detail=f"uncertain: the review did not validate ({reason})",
                output_tail=content[:EVIDENCE_CHARS],
            ),
        )
    if answer.passed:
        return GateResult(
            name=name,
            kind="llm_review",
            passed=True,
            requirement=requirement,
            evidence=Evidence(detail="the review found every rubric item met"),
        )
    detail = "; ".join(
        f"{f.requirement}: {f.evidence} -> {f.required_correction}" for f in answer.failures
    )
    return GateResult(
        name=name,
        kind="llm_review",
        passed=False,
        requirement=requirement,
        evidence=Evidence(
            detail=detail[:2_000], output_tail=json.dumps([f.model_dump() for f in answer.failures])
        ),
    )
