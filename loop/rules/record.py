"""What a task writes down about itself: the hash of its spec, its commit messages."""

from __future__ import annotations

import hashlib
import json

from loop.contracts import TaskSpec, Verdict

SUBJECT_CHARS = 72


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
