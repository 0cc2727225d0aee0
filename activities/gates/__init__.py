"""Gate evaluation: one module per kind, and ``evaluate`` over a task's ``verify`` list.

Why plain async functions and not an activity: one verify activity runs all gates
of an attempt, and it is the only thing that needs Temporal. Keeping the checks
here as ordinary coroutines means they are tested on real git repositories without
a server, and the verify activity stays a thin wrapper (heartbeats come from
``run_process`` while a command runs).

Rules that hold for every gate:

- All gates run, in the task file's order, even after a failure: the feedback
  for the next attempt must say which requirements already pass.
- A gate result is evidence, never an exception: a failing command, a file
  outside the scope or a test that no longer runs is a failed ``GateResult``.
  Exceptions are left for infrastructure trouble (git cannot read the
  repository), which the activity's retry policy handles.
- Gates check the artifact, not the agent's word: the commit's files, its
  checkout, and per-test outcomes from the runner compared with base by test id
  (``run``, ``no_removed_tests``, ``regression_test``); never an exit code alone
  where the runner can report.

The modules: ``judging`` (what a verdict's gates share: runs at the commit and at
base, the diff scan), ``command`` (a gate's command in the sandbox with its report),
``run``, ``scope`` (``diff_scope``), ``kept`` (``no_removed_tests``), ``regression``
(``regression_test``), ``contains``, each registered in ``EVALUATORS``. ``llm_review``
is a model call of its own (``activities.review``), after the verify step.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from activities.gates import checks, contains, hidden, kept, regression, run, scope
from activities.gates.command import Ran, gate_env, gate_extra_env, gate_run, run_command
from activities.gates.judging import Bench, Elsewhere, Judging, Trees
from loop.contracts import Gate, GateResult

Evaluator = Callable[[Any, Judging], Awaitable[GateResult]]
"""A kind's ``evaluate``: its gate model and the attempt's judging -> the result."""

EVALUATORS: dict[str, Evaluator] = {
    run.KIND: run.evaluate,
    scope.KIND: scope.evaluate,
    kept.KIND: kept.evaluate,
    regression.KIND: regression.evaluate,
    contains.KIND: contains.evaluate,
    checks.KIND: checks.evaluate,
    hidden.KIND: hidden.evaluate,
}
"""Every kind the verify step judges (``GateSpec.CHECKED_IN_VERIFY``)."""


async def evaluate(judging: Judging, gates: list[Gate] | None = None) -> list[GateResult]:
    """Every gate of ``gates`` (default: the task's that verify judges) in order."""
    chosen = gates if gates is not None else judging.task.verify
    return [await EVALUATORS[g.kind](g, judging) for g in chosen if g.CHECKED_IN_VERIFY]


__all__ = [
    "EVALUATORS",
    "Bench",
    "Elsewhere",
    "Judging",
    "Ran",
    "Trees",
    "evaluate",
    "gate_env",
    "gate_extra_env",
    "gate_run",
    "run_command",
]
