"""Turning a failed verdict into the next attempt's input, and the prompt itself.

Pure functions: the workflow builds feedback (bookkeeping needs no activity of its
own) and the ``make`` activity renders the prompt file from the same pieces, so
what the agent reads and what the trace records cannot drift apart.
"""

from __future__ import annotations

import json
from typing import Any

from loop.contracts import (
    PREVIOUS_OUTPUT_CHARS,
    FailedRequirement,
    Feedback,
    MakeResult,
    PromptParts,
    TaskSpec,
    Verdict,
)
from loop.rules.gates import describe_gate, required_correction
from loop.rules.verdicts import headline


def build(attempt: int, make: MakeResult, verdict: Verdict, human: list[str]) -> Feedback:
    """Structured feedback, never "try again": what failed, what it saw, what to change."""
    previous = make.claim or make.output_tail
    return Feedback(
        after_attempt=attempt,
        previous_output=previous[-PREVIOUS_OUTPUT_CHARS:],
        failed=[
            FailedRequirement(
                gate=g.name,
                requirement=g.requirement,
                evidence=g.evidence,
                required_correction=required_correction(g),
            )
            for g in verdict.failed
        ],
        passing=[g.name for g in verdict.gates if g.passed],
        human_feedback=list(human),
    )


def from_task(spec: TaskSpec) -> dict[str, Any]:
    """The prompt's parts that are the task file's (``PromptParts.from_task``)."""
    return {
        "goal": spec.goal,
        "gates": [describe_gate(g) for g in spec.verify],
        "backend": spec.agent.backend,
        "instructions": spec.instructions,
    }


def render_prompt(parts: PromptParts, attempt: int) -> str:
    """The markdown the agent reads from LOOP_PROMPT_FILE."""
    out = [f"# Task (attempt {attempt})", "", "## Goal", "", parts.goal.strip(), ""]
    if parts.instructions.strip():
        out += ["## Guidance", "", parts.instructions.strip(), ""]
    if parts.gates:
        out += ["## How the result is checked (fixed; you cannot change these)", ""]
        out += [f"- {line}" for line in parts.gates]
        out.append("")
    if parts.brief:
        out += ["## Brief", "", parts.brief.strip(), ""]
    fb = parts.feedback
    if fb is not None:
        out += [f"## Feedback from attempt {fb.after_attempt}", ""]
        if fb.passing:
            out += [f"Already passing: {', '.join(fb.passing)}", ""]
        for f in fb.failed:
            out += [
                f"### Failed: {f.gate}",
                f"- requirement: {f.requirement}",
                f"- required correction: {f.required_correction}",
            ]
            if f.evidence.exit_code is not None:
                out.append(f"- exit code: {f.evidence.exit_code}")
            if f.evidence.files:
                out.append(f"- files: {', '.join(f.evidence.files)}")
            if f.evidence.detail:
                out.append(f"- detail: {f.evidence.detail}")
            tests = f.evidence.tests
            if tests is not None and tests.failing:
                out.append("- failing tests:")
                for case in tests.failing:
                    at_base = f", at base: {case.at_base}" if case.at_base else ""
                    out.append(
                        f"  - `{case.id}` ({case.outcome}{at_base}): {headline(case.message)}"
                    )
                if tests.more_failing:
                    out.append(f"  - … and {tests.more_failing} more")
            if f.evidence.failure:
                out.append("- what failed (from the output):")
                out += [f"  - `{line}`" for line in f.evidence.failure]
            if f.evidence.quoted:
                out.append("- lines a person must look at:")
                out += [f"  - {q}" for q in f.evidence.quoted]
            if f.evidence.output_tail:
                out += ["", "```", f.evidence.output_tail.strip(), "```"]
            out.append("")
        if fb.previous_output:
            out += [
                "### Your previous output (tail)",
                "",
                "```",
                fb.previous_output.strip(),
                "```",
                "",
            ]
    if parts.human_feedback:
        out += ["## From a person", ""]
        out += [f"- {t}" for t in parts.human_feedback]
        out.append("")
    if parts.backend == "openai":
        protocol = [
            "Work only through the tools, inside your git worktree. When you are done, call",
            "finish(answer) with your final answer. Your claim is recorded, not trusted: the",
            "gates above decide.",
        ]
    else:
        protocol = [
            "Work in the current directory (your git worktree). Write your final answer or claim",
            "to the file named by LOOP_OUTPUT_FILE. Your claim is recorded, not trusted: the gates",
            "above decide.",
        ]
    out += ["## Protocol", "", *protocol, ""]
    return "\n".join(out)


def feedback_json(fb: Feedback) -> str:
    """The LOOP_FEEDBACK_FILE content: the previous failed verdict, machine-readable."""
    return json.dumps(fb.model_dump(mode="json"), indent=2)
