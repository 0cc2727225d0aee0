"""verify: all gates on the attempt's commit, in a clean checkout of it.

Verification judges the work-in-progress commit, never the agent's claim and
never the agent's worktree: ``run`` gates execute in a fresh detached checkout
of the commit (``artifact.checkout``), read-only to them, so a file the agent
kept out of the commit (ignored, untracked) cannot take part, and nothing a
gate does reaches the task's worktree. Files the agent made that git ignores
are listed in the verdict as evidence.

Some attempts are refused before any gate runs (``_refused``): a worktree that
grew past its disk limit, one git could not commit, and one that changes git
attributes (they change what a checkout holds, so gates would judge other bytes
than the commit's).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio import activity

from activities import gates
from activities.host import artifact
from activities.host.files import write_atomic
from activities.host.worktree import changed_files
from loop.contracts import (
    REFUSALS,
    VERIFY,
    BuiltEnvironment,
    Evidence,
    Gate,
    GateResult,
    TaskSpec,
    Verdict,
    VerifyInput,
    Workspace,
)
from loop.redact import redact, redact_file
from loop.settings import Settings


class VerifyActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=VERIFY.name)
    async def verify(self, inp: VerifyInput) -> Verdict:
        ws, made = inp.workspace, inp.make
        changed = made.changed_files
        if made.changed_count > len(changed) and made.commit:
            changed = await changed_files(ws, made.commit)  # the record lists the first ones
        refused = _refused(inp, changed)
        if refused is not None:
            return Verdict(passed=False, artifact=made.commit, gates=[refused])
        own = inp.environment  # the attempt changed the key files: built for its commit
        log_dir = Path(ws.run_dir) / f"attempt-{inp.attempt}"
        elsewhere = checkouts(self.settings, inp.task, ws, log_dir, activity.info().attempt)
        async with artifact.checkout(
            ws.commits, made.commit, log_dir, activity.info().attempt, self.settings.locks
        ) as tree:
            bench = gates.Bench(tree=tree, log_dir=log_dir, home=self.settings.home)
            judging = gates.Judging(
                inp.task, ws, made, bench, elsewhere, _changed=changed, environment=own
            )
            results = await gates.evaluate(judging)
        for log in log_dir.rglob("gate-*.log"):
            await asyncio.to_thread(redact_file, log)
        for g in results:
            g.evidence.output_tail = redact(g.evidence.output_tail)
        verdict = Verdict(
            passed=all(g.passed for g in results),
            gates=results,
            artifact=made.commit,
            ignored_files=made.ignored_files,
            environment=_rebuilt(own),
        )
        kept = log_dir / "verdict.json"
        await asyncio.to_thread(write_atomic, kept, verdict.model_dump_json())
        return verdict.model_copy(update={"kept": str(kept)})


def checkouts(
    settings: Settings, task: TaskSpec, ws: Workspace, folder: Path, try_no: int
) -> gates.Elsewhere:
    """How a verdict runs a gate on another commit (base, or base with the attempt's tests):
    a clean checkout of it in ``folder/<label>``, removed afterwards (``try_no``: the
    activity's try, as ``artifact.checkout`` keys its trees)."""

    async def elsewhere(gate: Gate, commit: str, label: str) -> gates.Ran:
        where = folder / label
        async with artifact.checkout(ws.commits, commit, where, try_no, settings.locks) as tree:
            return await gates.run_command(gate, ws, tree, where, settings.home, task.sandbox)

    return elsewhere


def _refused(inp: VerifyInput, changed: list[str]) -> GateResult | None:
    """What ends the verdict before any gate runs: an attempt that is not a commit the
    gates can judge as it is."""
    made = inp.make
    if made.disk_exceeded:
        limit = inp.task.sandbox.limits.disk_mb
        requirement = f"the worktree grows by at most {limit} MB per attempt"
        return _failed("disk", requirement, made.disk_exceeded)
    if made.not_committed:
        return _failed("commit", "git can store the attempt as it is", made.not_committed)
    own = inp.environment
    if own is not None and own.failed:
        # The attempt changed what the environment is built from, and it no longer builds.
        changes = ", ".join(own.changed) or "its key files"
        return _failed(
            "environment", f"the environment builds from the attempt's {changes}", own.failed
        )
    attributes = [f for f in changed if f.rsplit("/", 1)[-1] == ".gitattributes"]
    if attributes:
        # Attributes change what a checkout holds (encodings, line ends, filters), so the
        # gates would judge files other than the ones committed: never the agent's call.
        return _failed(
            "attributes",
            "git attributes stay as they are at base",
            f"the attempt changes {', '.join(attributes)}",
        )
    return None


def _rebuilt(own: BuiltEnvironment | None) -> str:
    """What the verdict says of an environment built for the attempt's own commit."""
    if own is None:
        return ""
    changes = ", ".join(own.changed) or "its key files"
    return f"built for this attempt, which changes {changes}: {own.said()}"


def _failed(name: str, requirement: str, detail: str) -> GateResult:
    assert name in REFUSALS, name
    return GateResult(
        name=name,
        kind=name,
        passed=False,
        requirement=requirement,
        evidence=Evidence(detail=detail),
    )
