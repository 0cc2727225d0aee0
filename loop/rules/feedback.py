"""Turning a failed verdict into the next attempt's input, and the prompt itself.

Pure functions: the workflow builds feedback (bookkeeping needs no activity of its
own) and the ``make`` activity renders the prompt file from the same pieces, so
what the agent reads and what the trace records cannot drift apart.
"""

from __future__ import annotations

import json

from loop.contracts import (
    FailedRequirement,
    Feedback,
    Gate,
    GateResult,
    MakeResult,
    PromptParts,
    Verdict,
)
from loop.rules.verdicts import expects_report, headline

_PREVIOUS_OUTPUT_CHARS = 1_500


def required_correction(g: GateResult) -> str:
    """What the agent must change, per gate kind, in words it can act on."""
    files = ", ".join(g.evidence.files)
    match g.kind:
        case "run":
            return _run_correction(g)
        case "diff_scope":
            return f"revert your changes to files outside the allowed scope: {files}"
        case "no_removed_tests":
            return f"restore the removed, skipped or deselected tests: {files}"
        case "regression_test":
            return (
                "add (or change) a test in a test file that fails on base's code and passes with "
                f"your change; what was checked: {g.evidence.detail}"
            )
        case "contains":
            missing = g.evidence.detail.removeprefix("missing: ")
            return f"write a final answer to LOOP_OUTPUT_FILE that includes: {missing}"
        case _:
            return g.evidence.detail or "satisfy the gate"


def _run_correction(g: GateResult) -> str:
    detail, tests = g.evidence.detail, g.evidence.tests
    if g.uncertain:
        return (
            "remove what ends or steers the test process (quoted below): while it is there the "
            "verdict cannot be trusted and a person is asked"
        )
    if detail.startswith("timed out"):
        return f"make the command finish in time ({detail}); do not hang"
    if "ended before it reported" in detail:
        return (
            "let the test run finish and report every test: do not end the process early, and "
            "do not skip, deselect or hide tests"
        )
    if tests is not None and tests.failing:
        names = ", ".join(c.id for c in tests.failing[:5])
        more = tests.more_failing + max(0, len(tests.failing) - 5)
        return (
            f"change the code so that these tests pass: {names}"
            + (f" (and {more} more)" if more else "")
            + "; each one's assertion is listed under its name"
        )
    return (
        f"change the code so that the command exits 0 (it exited {g.evidence.exit_code});"
        " read the output tail for the failing check"
    )


def build(attempt: int, make: MakeResult, verdict: Verdict, human: list[str]) -> Feedback:
    """Structured feedback, never "try again": what failed, what it saw, what to change."""
    previous = make.claim or make.output_tail
    return Feedback(
        after_attempt=attempt,
        previous_output=previous[-_PREVIOUS_OUTPUT_CHARS:],
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


def describe_gate(g: Gate) -> str:
    """The gates are shown to the agent, so it knows the bar; it cannot change them."""
    match g.kind:
        case "run":
            if not expects_report(g):
                return f"{g.name}: `{g.run}` must exit 0 (timeout {g.timeout} s)"
            return (
                f"{g.name}: `{g.run}` (timeout {g.timeout} s), judged test by test against base: "
                "every test passing at base must still pass, "
                + (
                    "every test failing at base must pass"
                    if g.fail_to_pass == "auto"
                    else f"these must pass: {', '.join(g.fail_to_pass)}"
                )
                + ", no test may fail; ending the test process early fails it"
            )
        case "regression_test":
            return (
                f"{g.name}: add or change a test that fails on base's code and passes with "
                "your change"
            )
        case "diff_scope":
            scope = g.diff_scope
            assert scope is not None
            text = f"{g.name}: change only {', '.join(scope.allow)}"
            if scope.protect:
                text += f"; never touch {', '.join(scope.protect)} (that blocks the task)"
            return text
        case "no_removed_tests":
            return f"{g.name}: do not remove, skip, xfail or deselect any existing test"
        case "contains":
            assert g.contains is not None
            return f"{g.name}: your final answer must contain: {', '.join(g.contains)}"
        case _:
            return g.name


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
