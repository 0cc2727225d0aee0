"""The ``diff_scope`` gate: allowed and protected globs against the files the attempt changed.

It reads the files of the attempt's work-in-progress commit against base
(``MakeResult.changed_files``), never the worktree, so what gates leave behind
cannot change it. A file outside ``allow`` is a recoverable failure; a ``protect``
path changed is a policy violation (the task ends BLOCKED).
"""

from __future__ import annotations

from collections.abc import Iterable

import pathspec

from activities.gates.judging import Judging
from activities.gates.kept import listing
from loop.contracts import DiffScopeGate, Evidence, GateResult

KIND = DiffScopeGate.KIND

FILES_SHOWN = 100
"""Files a verdict names (the detail says how many there are)."""


def _spec(globs: Iterable[str]) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines(list(globs))


def _either(globs: list[str]) -> str:
    """``src/**``, ``src/** and tests/**``, ``a, b and c``: where changes may go."""
    return globs[0] if len(globs) == 1 else f"{', '.join(globs[:-1])} and {globs[-1]}"


def _normalise_path(path: str) -> str:
    while path.startswith("./"):
        path = path[2:]
    return path


async def evaluate(gate: DiffScopeGate, judging: Judging) -> GateResult:
    """Allowed and protected globs (gitignore semantics) against the agent's changed files."""
    return judge(gate, await judging.changed_files())


def judge(gate: DiffScopeGate, changed_files: list[str]) -> GateResult:
    scope = gate.diff_scope
    changed = sorted({_normalise_path(f) for f in changed_files if f})
    requirement = f"changes stay within {', '.join(scope.allow)}"
    if scope.protect:
        requirement += f" and leave {', '.join(scope.protect)} untouched"

    def result(passed: bool, files: list[str], detail: str, violation: bool = False) -> GateResult:
        return GateResult(
            name=gate.name,
            kind="diff_scope",
            passed=passed,
            policy_violation=violation,
            requirement=requirement,
            evidence=Evidence(files=files[:FILES_SHOWN], detail=detail),
        )

    if scope.protect:
        protect = _spec(scope.protect)
        touched = [f for f in changed if protect.match_file(f)]
        if touched:
            return result(False, touched, f"protected path touched: {listing(touched)}", True)
    allow = _spec(scope.allow)
    outside = [f for f in changed if not allow.match_file(f)]
    if outside:
        return result(False, outside, f"{listing(outside)} outside {_either(scope.allow)}")
    detail = f"{len(changed)} changed file(s), all within scope" if changed else "no changes"
    return result(True, changed, detail)
