"""TaskHookWorkflow: one ``POST /hooks/tasks`` body, decided and started as triage would.

``loop ui`` checks the bearer token and the body's keys, starts this workflow and answers
at once. The body becomes the source's item by the rules of an issue file (discovery's
code, an activity), triage's policy decides on it (``loop.rules.triage.plan``: labels,
cool-down, ``max_running``, a task already open for it) and its task is started as
triage starts one, ``task-<source>-<id>``, which the server never lets run twice: the
same body twice is one task.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from loop.contracts import (
        HOOK_ISSUE,
        LOOKUP_TASKS,
        LookupInput,
    )
    from loop.contracts.tasks_hook import (
        TASK_HOOK_WORKFLOW,
        HookIssueInput,
        TaskHook,
        TaskHookResult,
    )
    from loop.rules import triage
    from workflows.steps import STEP_RETRY
    from workflows.triage import start_planned

SHORT = timedelta(seconds=120)


@workflow.defn(name=TASK_HOOK_WORKFLOW)
class TaskHookWorkflow:
    @workflow.run
    async def run(self, hook: TaskHook) -> TaskHookResult:
        source = next(s for s in hook.sources.sources if s.name == hook.source)
        found = await workflow.execute_activity(
            HOOK_ISSUE.name,
            HookIssueInput(source=source, fields=hook.fields, body=hook.body),
            result_type=HOOK_ISSUE.output,
            start_to_close_timeout=SHORT,
            retry_policy=STEP_RETRY,
            summary=f"item of {hook.source}",
        )
        task_id = found.item.task_id
        lookup = await workflow.execute_activity(
            LOOKUP_TASKS.name,
            LookupInput(task_ids=[task_id], task_queue=workflow.info().task_queue),
            result_type=LOOKUP_TASKS.output,
            start_to_close_timeout=SHORT,
            retry_policy=STEP_RETRY,
            summary=f"look up {task_id}",
        )
        (planned,) = triage.plan([found.item], hook.sources, lookup, workflow.now())
        decision = planned.decision
        if decision.action == "start" and planned.spec is not None:
            decision = await start_planned(decision, planned.spec, planned.rerun)
        if decision.action == "started":
            return TaskHookResult(did=f"started {decision.task_id}: {decision.reason}")
        return TaskHookResult(did=f"not started {decision.task_id}: {decision.reason}")
