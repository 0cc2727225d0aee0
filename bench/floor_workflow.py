"""The Temporal floor's workflow: a trivial Loopwork task's shape, nothing else.

A trivial task's history (``bench/temporal_floor.py --history`` prints it) is five
workflow tasks, four activities and one local activity, no timer: the first step on
the shared queue, then the period ledger's reservation (a local activity) with the
agent's step, the gates' step, and the last step. This workflow issues the same
commands in the same workflow tasks, with each activity's own timeouts and retries
(``workflows/steps.py``'s presets), and nothing of Loopwork's bookkeeping (no patch
marker, search attributes or memo). Its activities are ``bench/floor_worker.py``'s;
it runs in the SDK's default sandbox with the default data converter, as any
Temporal user's workflow would.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

FLOOR_WORKFLOW = "FloorTask"
RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=6,
)
HEARTBEAT = timedelta(seconds=5)


@dataclass
class FloorInput:
    """One trivial task: the repository, the agent's command and the gates' commands."""

    task_id: str
    repo: str
    work: str
    agent: list[str]
    gates: list[str]
    mode: str
    """The sandbox level, as the Loopwork task beside it has it."""


@dataclass
class Tree:
    """Where the task's branch worktree is (the first step's result)."""

    path: str
    branch: str


@dataclass
class Made:
    """The agent's commit and the detached checkout the gates judge."""

    tree: Tree
    commit: str


def _options(seconds: float) -> dict[str, object]:
    return {
        "start_to_close_timeout": timedelta(seconds=seconds),
        "heartbeat_timeout": HEARTBEAT,
        "retry_policy": RETRY,
        "cancellation_type": workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    }


@workflow.defn(name=FLOOR_WORKFLOW)
class FloorTask:
    @workflow.run
    async def run(self, inp: FloorInput) -> bool:
        tree: Tree = await workflow.execute_activity(
            "floor_prepare", inp, result_type=Tree, summary="worktree", **_options(120)
        )
        # Loopwork's one local activity (the period ledger's reservation), in the same
        # workflow task as the agent's step.
        await workflow.execute_local_activity(
            "floor_reserve",
            inp.task_id,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RETRY,
        )
        made: Made = await workflow.execute_activity(
            "floor_make", args=[inp, tree], result_type=Made, summary="agent", **_options(240)
        )
        passed: bool = await workflow.execute_activity(
            "floor_verify", args=[inp, made], result_type=bool, summary="gates", **_options(240)
        )
        await workflow.execute_activity(
            "floor_finish", args=[inp, made], summary="remove", **_options(120)
        )
        return passed
