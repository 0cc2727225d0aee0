"""MineWorkflow: a repository's history into an eval suite (``loop eval mine``).

List the commits that change tests and code, prove each one (its tests on its parent
and on itself, twice each, in the sandbox) until ``max_cases`` are found, newest first,
then write the suite. Each proof is an activity of its own on the host that holds the
clone: visible in the Temporal UI, retried on its own, and a killed worker costs one
proof, not the whole mining. ``mine_progress`` says what has been done so far.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from loop.contracts import (
        LIST_FIXES,
        MINE_WORKFLOW,
        QUERY_MINE_PROGRESS,
        VALIDATE_FIX,
        WRITE_MINED,
        MinedCase,
        MineInput,
        MineResult,
        ValidateFixInput,
        ValidateFixResult,
        WriteMinedInput,
    )
    from workflows.steps import HEARTBEAT, STEP_RETRY, StepFailed, act

ENVIRONMENT_S = 1_800
"""What building the repository's environment for a commit may add to one proof."""


@workflow.defn(name=MINE_WORKFLOW)
class MineWorkflow:
    def __init__(self) -> None:
        self.lines: list[str] = []

    @workflow.query(name=QUERY_MINE_PROGRESS)
    def progress(self) -> list[str]:
        return list(self.lines)

    @workflow.run
    async def run(self, inp: MineInput) -> MineResult:
        try:
            return await self._mine(inp)
        except StepFailed as e:
            # The mining fails with the step's reason (a person reads it in `loop eval
            # mine`'s last line and in the Temporal UI), instead of retrying forever.
            raise ApplicationError(str(e), non_retryable=True) from None

    async def _mine(self, inp: MineInput) -> MineResult:
        listed = await act(LIST_FIXES, inp, summary=f"list fixes of {inp.repo}", seconds=600)
        self.lines.append(
            f"{len(listed.candidates)} commit(s) change tests and code "
            f"({listed.skipped} other commit(s) left out)"
        )
        cases: list[MinedCase] = []
        dropped: list[str] = []
        proof_s = 4 * inp.timeout + 120 + (2 * ENVIRONMENT_S if inp.environment else 0)
        for candidate in listed.candidates:
            if len(cases) >= inp.max_cases:
                break
            subject = candidate.message.splitlines()[0][:72] if candidate.message else ""
            proved: ValidateFixResult = await workflow.execute_activity(
                VALIDATE_FIX.name,
                ValidateFixInput(mine=inp, clone=listed.clone, candidate=candidate),
                result_type=VALIDATE_FIX.output,
                task_queue=listed.host_queue or None,
                start_to_close_timeout=timedelta(seconds=proof_s),
                heartbeat_timeout=HEARTBEAT,
                retry_policy=STEP_RETRY,
                summary=f"prove {candidate.commit[:12]}: {subject}",
            )
            if proved.case is not None:
                cases.append(proved.case)
                self.lines.append(
                    f"case {proved.case.id}: {subject} ({len(proved.case.fail_to_pass)} "
                    f"FAIL_TO_PASS, {len(proved.case.pass_to_pass)} PASS_TO_PASS)"
                )
            else:
                dropped.append(f"{candidate.commit[:12]} {subject}: {proved.dropped}")
                self.lines.append(f"not a case: {dropped[-1]}")
        written: MineResult = await workflow.execute_activity(
            WRITE_MINED.name,
            WriteMinedInput(
                mine=inp, clone=listed.clone, head=listed.head, cases=cases, dropped=dropped
            ),
            result_type=WRITE_MINED.output,
            task_queue=listed.host_queue or None,
            start_to_close_timeout=timedelta(seconds=600),
            heartbeat_timeout=HEARTBEAT,
            retry_policy=STEP_RETRY,
            summary=f"write {inp.out}",
        )
        self.lines.append(f"wrote {written.suite_path}: {len(cases)} case(s)")
        return written
