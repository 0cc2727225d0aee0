"""verify: all gates on the latest artifact, then the worktree restored to it.

Verification runs on the attempt's work-in-progress commit, never on the
agent's claim. Anything the gates themselves change is recorded and undone, so
the next attempt and the final commit hold the agent's work only.
"""

from __future__ import annotations

from pathlib import Path

from temporalio import activity

from activities import gates
from activities.workspace import dirty_files, restore
from loop.contracts import VERIFY, Verdict, VerifyInput
from loop.redact import redact, redact_file
from loop.settings import Settings


class VerifyActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=VERIFY.name)
    async def verify(self, inp: VerifyInput) -> Verdict:
        ws, made = inp.workspace, inp.make
        # A retry after a crash must judge the artifact, not a half-run gate's leftovers.
        await restore(ws, made.commit)
        log_dir = Path(ws.run_dir) / f"attempt-{inp.attempt}"
        # llm_review gates are model calls of their own (the ``review`` activity).
        checks = [g for g in inp.task.verify if g.kind != "llm_review"]
        results = await gates.evaluate(
            inp.task.model_copy(update={"verify": checks}), ws, made, log_dir
        )
        changed_by_gates = await dirty_files(ws.path)
        if changed_by_gates:
            await restore(ws, made.commit)
        for log in log_dir.glob("*.log"):
            redact_file(log)
        for g in results:
            g.evidence.output_tail = redact(g.evidence.output_tail)
        return Verdict(
            passed=all(g.passed for g in results),
            gates=results,
            artifact=made.commit,
            gates_changed_worktree=changed_by_gates,
        )
