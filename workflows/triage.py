"""TriageWorkflow: the event loop. Discover work, decide what is worth doing, start tasks.

Read it top to bottom:

    discover (one activity per source) -> look up earlier tasks -> policy -> start tasks

The policy (``loop.rules.triage.plan``) is workflow code, so each decision is in
history with its reason. A dry run stops before starting anything and returns
the same table.

Each chosen item becomes a child ``TaskWorkflow`` with workflow id
``task-<source>-<item>`` and ``ParentClosePolicy.ABANDON``: tasks keep running
after triage ends (or is cancelled), and the Temporal UI links each task to the
triage run that started it. A child rather than an activity calling
``client.start_workflow``, because duplicates are then impossible by
construction: the start is a command recorded once in this workflow's history
(replay or a worker crash never sends it again, where an activity is
at-least-once and a retried start cannot tell its own success from another
triage's), and the server refuses a second open workflow with the same id,
which surfaces here as ``WorkflowAlreadyStartedError`` and is reported as a skip.
An item that never had a task is started with ``REJECT_DUPLICATE``, so even a
task another triage started and finished meanwhile is not run twice; an item
whose earlier task ended past its cool-down is started with ``ALLOW_DUPLICATE``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import (
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    WorkflowAlreadyStartedError,
)

with workflow.unsafe.imports_passed_through():
    from loop.contracts import (
        DISCOVER,
        LOOKUP_TASKS,
        SOURCE_MISCONFIGURED,
        TASK_WORKFLOW,
        TRIAGE_WORKFLOW,
        CiSource,
        DiscoverInput,
        DiscoverResult,
        LookupInput,
        Source,
        TaskResult,
        TaskSpec,
        TriageDecision,
        TriageInput,
        TriageItem,
        TriageResult,
        starting_attributes,
        workflow_id_for,
    )
    from loop.rules import triage
    from workflows.steps import STEP_RETRY

HEARTBEAT = timedelta(seconds=10)
SHORT = timedelta(seconds=300)


@workflow.defn(name=TRIAGE_WORKFLOW)
class TriageWorkflow:
    @workflow.run
    async def run(self, inp: TriageInput) -> TriageResult:
        result = TriageResult(dry_run=inp.dry_run, sources_file=inp.sources_file)
        sources = inp.sources.sources
        found = await asyncio.gather(*(self._discover(s) for s in sources))
        items: list[TriageItem] = []
        for source, outcome in zip(sources, found, strict=True):
            if isinstance(outcome, ActivityError):
                result.errors.append(f"{source.name}: {_text(outcome)}")
                if _kind(outcome) == SOURCE_MISCONFIGURED:
                    result.misconfigured.append(source.name)
                continue
            items += outcome.items
            if outcome.note:
                result.notes.append(f"{source.name}: {outcome.note}")

        lookup = await workflow.execute_activity(
            LOOKUP_TASKS.name,
            LookupInput(
                task_ids=[i.task_id for i in items if i.spec is not None],
                task_queue=workflow.info().task_queue,
                former={i.task_id: i.former_id for i in items if i.spec and i.former_id},
            ),
            result_type=LOOKUP_TASKS.output,
            start_to_close_timeout=SHORT,
            heartbeat_timeout=HEARTBEAT,
            retry_policy=STEP_RETRY,
            summary="look up earlier tasks",
        )
        result.open_tasks = lookup.open_tasks

        for planned in triage.plan(items, inp.sources, lookup, workflow.now()):
            decision = planned.decision
            if decision.action == "start" and not inp.dry_run:
                assert planned.spec is not None
                decision = await start_planned(decision, planned.spec, planned.rerun)
            result.decisions.append(decision)
            if not workflow.unsafe.is_replaying():
                workflow.logger.info(
                    "%s %s: %s", decision.action, decision.task_id, decision.reason
                )
        return result

    async def _discover(self, source: Source) -> DiscoverResult | ActivityError:
        """One source's items, or why it could not be read (the others go on)."""
        ci_s = source.timeout + 120 if isinstance(source, CiSource) else None
        try:
            found: DiscoverResult = await workflow.execute_activity(
                DISCOVER.name,
                DiscoverInput(source=source),
                result_type=DISCOVER.output,
                start_to_close_timeout=SHORT if ci_s is None else timedelta(seconds=ci_s),
                heartbeat_timeout=HEARTBEAT,
                retry_policy=STEP_RETRY,
                summary=f"discover: {source.name} ({source.kind})",
            )
            return found
        except ActivityError as e:
            return e


async def start_planned(decision: TriageDecision, spec: TaskSpec, rerun: bool) -> TriageDecision:
    """Start the item's task as a child that outlives its parent: ``started``, or a skip
    when the server already has a task with its id (another triage, another delivery)."""
    try:
        await workflow.start_child_workflow(
            TASK_WORKFLOW,
            spec,
            id=workflow_id_for(spec.id),
            result_type=TaskResult,
            parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            id_reuse_policy=(
                WorkflowIDReusePolicy.ALLOW_DUPLICATE
                if rerun
                else WorkflowIDReusePolicy.REJECT_DUPLICATE
            ),
            memo={"goal": spec.goal, "triage": f"{decision.source}/{decision.item}"},
            search_attributes=starting_attributes(spec.repo),
            static_summary=f"{spec.id}: {_first_line(spec.goal)}",
        )
    except WorkflowAlreadyStartedError:
        return decision.model_copy(
            update={"action": "skip", "reason": "a task for it was started meanwhile"}
        )
    return decision.model_copy(update={"action": "started"})


def _cause(e: BaseException) -> BaseException:
    while e.__cause__ is not None:
        e = e.__cause__
    return e


def _text(e: ActivityError) -> str:
    cause = _cause(e)
    text = cause.message if isinstance(cause, FailureError) else str(cause)
    return text.splitlines()[0] if text else type(cause).__name__


def _kind(e: ActivityError) -> str:
    cause = _cause(e)
    return cause.type or "" if isinstance(cause, ApplicationError) else ""


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:120]
