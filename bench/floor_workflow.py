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

``FloorInput.extras`` adds one of Loopwork's own costs at a time, for
``bench/temporal_floor.py --ablation``: ``attributes`` (a patch marker and the search
attributes and memo a trivial task writes: ``TemporalChangeVersion``, the host, the
attempts, the end state with the memo), ``host-queue`` (the steps after the first on a
second queue, as Loopwork's host queue: no eager dispatch for them) and ``ledger`` (the
local activity asks a period ledger that does not exist, by update, as Loopwork's
reservation does for a repository without a period budget).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey

FLOOR_WORKFLOW = "FloorTask"
RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=6,
)
HEARTBEAT = timedelta(seconds=5)
HOST_QUEUE = "{}@floor-host"
"""The second queue of ``host-queue``, named after the workflow's."""
STATE = SearchAttributeKey.for_keyword("LoopState")
ATTEMPTS = SearchAttributeKey.for_int("LoopAttempts")
HOST = SearchAttributeKey.for_keyword("LoopHost")


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
    extras: list[str] = field(default_factory=list)
    """Loopwork's costs added (see the module docstring)."""


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
        attributes = "attributes" in inp.extras
        if attributes:
            workflow.patched("floor-release")  # a marker, and the SDK's version upsert
        tree: Tree = await workflow.execute_activity(
            "floor_prepare", inp, result_type=Tree, summary="worktree", **_options(120)
        )
        queue = workflow.info().task_queue
        here = {"task_queue": HOST_QUEUE.format(queue)} if "host-queue" in inp.extras else {}
        if attributes:
            workflow.upsert_search_attributes([HOST.value_set("floor-host")])
        # Loopwork's one local activity (the period ledger's reservation), in the same
        # workflow task as the agent's step.
        await workflow.execute_local_activity(
            "floor_reserve",
            inp,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RETRY,
        )
        if attributes:
            workflow.upsert_search_attributes([ATTEMPTS.value_set(1)])
        made: Made = await workflow.execute_activity(
            "floor_make", args=[inp, tree], result_type=Made, summary="agent",
            **here, **_options(240),
        )  # fmt: skip
        passed: bool = await workflow.execute_activity(
            "floor_verify", args=[inp, made], result_type=bool, summary="gates",
            **here, **_options(240),
        )  # fmt: skip
        if attributes:
            workflow.upsert_memo({"state": "DONE_WITH_EVIDENCE", "reason": "verified"})
            workflow.upsert_search_attributes([STATE.value_set("DONE_WITH_EVIDENCE")])
        await workflow.execute_activity(
            "floor_finish", args=[inp, made], summary="remove", **here, **_options(120)
        )
        return passed
