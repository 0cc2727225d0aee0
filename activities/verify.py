"""verify: all gates on the attempt's commit, in a clean checkout of it.

Verification judges the work-in-progress commit, never the agent's claim and
never the agent's worktree: ``run`` gates execute in a fresh detached checkout
of the commit (``artifact.checkout``), read-only to them, so a file the agent
kept out of the commit (ignored, untracked) cannot take part, and nothing a
gate does reaches the task's worktree. Files the agent made that git ignores
are listed in the verdict as evidence.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio import activity

from activities import gates
from activities.host import artifact
from loop.contracts import VERIFY, Evidence, GateResult, Verdict, VerifyInput
from loop.redact import redact, redact_file
from loop.settings import Settings


class VerifyActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=VERIFY.name)
    async def verify(self, inp: VerifyInput) -> Verdict:
        ws, made = inp.workspace, inp.make
        if made.disk_exceeded:
            return Verdict(
                passed=False,
                artifact=made.commit,
                gates=[
                    GateResult(
                        name="disk",
                        kind="disk",
                        passed=False,
                        requirement=(
                            f"the worktree grows by at most "
                            f"{inp.task.sandbox.limits.disk_mb} MB per attempt"
                        ),
                        evidence=Evidence(detail=made.disk_exceeded),
                    )
                ],
            )
        log_dir = Path(ws.run_dir) / f"attempt-{inp.attempt}"
        # llm_review gates are model calls of their own (the ``review`` activity).
        checks = [g for g in inp.task.verify if g.kind != "llm_review"]
        async with artifact.checkout(
            ws.repo, made.commit, log_dir / "checkout", self.settings.locks
        ) as tree:
            bench = gates.Bench(tree=tree, log_dir=log_dir, home=self.settings.home)
            results = await gates.evaluate(
                inp.task.model_copy(update={"verify": checks}), ws, made, bench
            )
        for log in log_dir.glob("gate-*.log"):
            await asyncio.to_thread(redact_file, log)
        for g in results:
            g.evidence.output_tail = redact(g.evidence.output_tail)
        return Verdict(
            passed=all(g.passed for g in results),
            gates=results,
            artifact=made.commit,
            ignored_files=made.ignored_files,
        )
