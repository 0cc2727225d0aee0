"""EvalWorkflow: the improvement loop. Every case of a suite under each harness.

Cases run as child TaskWorkflows with autonomy ``report`` (nothing merged),
at most ``max_parallel`` at once; an escalated case waits only the suite's
short ``approval_timeout`` and counts as not accepted. The comparison is
computed here from the children's results and written to
``LOOP_HOME/eval-results.json`` by one activity.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from loop.contracts import (
        EVAL_WORKFLOW,
        TASK_WORKFLOW,
        WRITE_EVAL,
        CaseOutcome,
        EvalInput,
        EvalReport,
        TaskResult,
        workflow_id_for,
    )
    from loop.rules import evaluation
    from workflows.steps import HEARTBEAT


@workflow.defn(name=EVAL_WORKFLOW)
class EvalWorkflow:
    @workflow.run
    async def run(self, inp: EvalInput) -> EvalReport:
        slots = asyncio.Semaphore(inp.suite.max_parallel)

        async def case_run(harness_index: int, case_index: int) -> CaseOutcome:
            harness = inp.harnesses[harness_index]
            case = inp.suite.cases[case_index]
            spec = evaluation.spec_for(inp.suite, harness, case, inp.run)
            async with slots:
                result: TaskResult = await workflow.execute_child_workflow(
                    TASK_WORKFLOW,
                    spec,
                    id=workflow_id_for(spec.id),
                    result_type=TaskResult,
                    static_summary=f"eval {inp.suite.name}: {case.id} under {harness.name}",
                )
            return evaluation.outcome(harness.name, case.id, result)

        outcomes = list(
            await asyncio.gather(
                *(
                    case_run(h, c)
                    for h in range(len(inp.harnesses))
                    for c in range(len(inp.suite.cases))
                )
            )
        )
        names = [h.name for h in inp.harnesses]
        report = EvalReport(
            suite=inp.suite.name,
            suite_hash=inp.suite_hash,
            run=inp.run,
            harnesses=[evaluation.summarize(n, outcomes) for n in names],
            outcomes=outcomes,
            flipped=evaluation.flips(names[0], names[1], outcomes) if len(names) > 1 else [],
        )
        written = await workflow.execute_activity(
            WRITE_EVAL.name,
            report,
            result_type=WRITE_EVAL.output,
            start_to_close_timeout=timedelta(seconds=30),
            heartbeat_timeout=HEARTBEAT,
            summary="write eval-results.json",
        )
        return report.model_copy(update={"results_path": written.path})
