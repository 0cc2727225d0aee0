"""What a task writes down about itself: the hash of its spec, its commit messages."""

from __future__ import annotations

import hashlib
import json

from loop.contracts import TaskResult, TaskSpec, Verdict

SUBJECT_CHARS = 72


def spent(tokens: int, cost_usd: float, tool_calls: int) -> str:
    """What an attempt or a task spent, as a person reads it. Tool calls are counted by
    Loopwork's own model loop only; an agent CLI's are its own business, so for it the
    count would be a false "0" and is left out."""
    text = f"{tokens:,} tokens · ${cost_usd:.4f}"
    return f"{text} · {tool_calls:,} tool calls" if tool_calls else text


def spec_hash(spec: TaskSpec) -> str:
    """Gates, budget and protected paths, hashed into the trace: what the task was held to."""
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def subject(text: str, limit: int = SUBJECT_CHARS) -> str:
    """The first line of ``text`` as a commit subject: at most ``limit`` characters, cut
    at a word boundary with an ellipsis, never in the middle of a word."""
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    if len(line) <= limit:
        return line
    cut = line[: limit - 1]
    if " " in cut:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,.;:") + "…"


def commit_message(spec: TaskSpec, verdict: Verdict) -> str:
    gates = "\n".join(f"- {g.name}: pass" for g in verdict.gates)
    return f"{subject(spec.goal)}\n\nVerified by Loopwork ({spec.id}):\n{gates}"


def merge_message(branch: str, spec: TaskSpec) -> str:
    prefix = f"Merge {branch}: "
    return prefix + subject(spec.goal, max(SUBJECT_CHARS - len(prefix), 24))


def pull_request(spec: TaskSpec, result: TaskResult) -> tuple[str, str]:
    """Title and body of the pull request a verified task hands over: the goal, the
    evidence per gate, what it took."""
    lines = ["## Goal", "", spec.goal.strip(), "", "## Evidence", ""]
    for g in result.evidence:
        detail = f": {g.evidence.detail}" if g.evidence.detail else ""
        lines.append(f"- **{g.name}** {'pass' if g.passed else 'FAIL'} ({g.requirement}){detail}")
    lines += [
        "",
        "## What it took",
        "",
        f"- attempts: {len(result.attempts)}",
        f"- spent: {spent(result.tokens, result.cost_usd, result.tool_calls)}",
        f"- task: `{spec.id}` (Loopwork), spec hash `{result.spec_hash[:12]}`",
    ]
    return subject(spec.goal), "\n".join(lines)
