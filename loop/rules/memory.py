"""Memory across runs: what tasks on a repository learned, for the next task's brief.

``LOOP_HOME/memory.json`` holds, per repository, facts (which gate commands
pass on verified changes, which fail at base) and failure patterns (a failure
fingerprint with its count, an example of its evidence and the change that
finally passed). ``summarize`` folds each finished task in; ``explore`` puts a
bounded digest into the brief, so tomorrow's attempt starts from what
yesterday learned. Pure functions over plain JSON, so they are easy to test.
"""

from __future__ import annotations

import json
from typing import Any

from loop.contracts import TaskResult, TaskState

MAX_PATTERNS = 50
EXAMPLE_CHARS = 300
DIGEST_CHARS = 2_000


def fold(memory_json: str, repo: str, result: TaskResult, at: str) -> str:
    """``memory_json`` with one finished task learned; idempotent per task run."""
    memory: dict[str, Any] = json.loads(memory_json or "{}")
    mem = memory.setdefault("repos", {}).setdefault(
        repo, {"facts": {}, "commands": {}, "failures": {}, "tasks": []}
    )
    key = f"{result.task_id}@{result.spec_hash[:12]}:{len(result.attempts)}:{result.state}"
    if key in mem["tasks"]:
        return json.dumps(memory, indent=2)
    mem["tasks"] = [*mem["tasks"][-199:], key]

    seen_here: list[str] = []
    for attempt in result.attempts:
        verdict = attempt.verdict
        if verdict is None:
            continue
        for g in verdict.gates:
            if g.kind != "run":
                continue
            command = g.requirement.split("`")[1] if "`" in g.requirement else g.name
            stats = mem["commands"].setdefault(command, {"passed": 0, "failed": 0})
            stats["passed" if g.passed else "failed"] += 1
        if not verdict.passed and attempt.fingerprint:
            pattern = mem["failures"].setdefault(
                attempt.fingerprint,
                {
                    "gates": [g.name for g in verdict.failed],
                    "count": 0,
                    "example": "",
                    "fixed_by": "",
                    "first": at,
                },
            )
            pattern["count"] += 1
            pattern["last"] = at
            failed = verdict.failed
            detail = next((g.evidence.detail for g in failed if g.evidence.detail), "")
            tail = next((g.evidence.output_tail for g in failed if g.evidence.output_tail), "")
            last_line = tail.strip().splitlines()[-1] if tail.strip() else ""
            pattern["example"] = (detail or last_line)[:EXAMPLE_CHARS]
            seen_here.append(attempt.fingerprint)

    if result.state == TaskState.DONE_WITH_EVIDENCE and result.attempts:
        last = result.attempts[-1]
        files = ", ".join(last.make.changed_files[:8]) if last.make else ""
        fix = f"task {result.task_id} passed after changing {files or 'nothing'}"
        for fp in seen_here:
            mem["failures"][fp]["fixed_by"] = fix
        for g in result.evidence:
            if g.kind == "run" and g.passed:
                mem["facts"][f"gate {g.name}: {g.requirement}"] = at
    if len(mem["failures"]) > MAX_PATTERNS:
        ranked = sorted(mem["failures"].items(), key=lambda kv: kv[1].get("last", ""))
        mem["failures"] = dict(ranked[-MAX_PATTERNS:])
    return json.dumps(memory, indent=2)


def digest(memory_json: str, repo: str, limit: int = DIGEST_CHARS) -> str:
    """The part of memory worth an agent's attention, in at most ``limit`` characters."""
    try:
        mem = json.loads(memory_json or "{}").get("repos", {}).get(repo)
    except json.JSONDecodeError:
        return ""
    if not mem:
        return ""
    lines = []
    working = [c for c, s in mem.get("commands", {}).items() if s.get("passed")]
    if working:
        lines.append("Commands that passed before: " + "; ".join(f"`{c}`" for c in working[:5]))
    for fact in list(mem.get("facts", {}))[:5]:
        lines.append(f"Known: {fact}")
    patterns = sorted(mem.get("failures", {}).values(), key=lambda p: -p.get("count", 0))
    for p in patterns[:8]:
        text = f"Failure seen {p['count']}x in {', '.join(p['gates'])}: {p['example']}"
        if p.get("fixed_by"):
            text += f" — fixed when {p['fixed_by']}"
        lines.append(text)
    out = "\n".join(f"- {line}" for line in lines)
    return out[:limit]
