"""explore: a read-only brief before the first attempt.

The agent starts from facts rather than guesses: what files the repository
holds, and what the gates say at base (the reproducer), with their evidence.
The full brief is an artifact in the run folder; history carries a bounded copy.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio import activity

from activities import gates
from activities.host import artifact, sandbox
from activities.host.git import git
from activities.make import agent_home, endpoints
from activities.model import preflight
from loop.contracts import (
    EXPLORE,
    ExploreInput,
    ExploreResult,
    MakeResult,
    TaskSpec,
    Verdict,
    Workspace,
)
from loop.rules import memory
from loop.settings import Settings

BRIEF_CHARS = 6_000
FILE_MAP_ENTRIES = 200


class ExploreActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=EXPLORE.name)
    async def explore(self, inp: ExploreInput) -> ExploreResult:
        ws = inp.workspace
        await _endpoints_answer(inp.task)
        await self._agent_can_start(inp.task, ws)
        files = [f for f in (await git(["ls-files", "-z"], ws.path)).split("\0") if f]
        reproducer = await self._reproduce(inp.task, inp)
        shown = files[:FILE_MAP_ENTRIES]
        lines = ["### Files", "", *[f"- {f}" for f in shown]]
        if len(files) > len(shown):
            lines.append(f"- … and {len(files) - len(shown)} more (git ls-files)")
        learned = memory.digest(await asyncio.to_thread(_read, self.settings.memory), ws.repo)
        if learned:
            lines += ["", "### What earlier runs on this repository learned", "", learned]
        lines += ["", "### Gates at base (the reproducer)", ""]
        for g in reproducer.gates:
            lines.append(f"- {g.name}: {'pass' if g.passed else 'FAIL'} — {g.requirement}")
            if not g.passed and g.evidence.output_tail:
                lines += ["", "```", g.evidence.output_tail.strip()[-1500:], "```", ""]
        brief = "\n".join(lines)
        path = Path(ws.run_dir) / "brief.md"
        path.write_text(brief)
        if len(brief) > BRIEF_CHARS:
            brief = brief[:BRIEF_CHARS] + f"\n[… brief cut; full text in {path}]"
        return ExploreResult(
            brief=brief, brief_path=str(path), files=len(files), reproducer=reproducer
        )

    async def _agent_can_start(self, task: TaskSpec, ws: Workspace) -> None:
        """Before any attempt: the sandbox can run the agent's command as the task's uid
        (raises the permanent reason, so the task ends BLOCKED without burning one)."""
        if task.agent.backend != "command" or not task.agent.command:
            return
        await sandbox.check_runnable(
            sandbox.SandboxRun(
                argv=list(task.agent.command),
                kind="agent",
                policy=task.sandbox,
                task_id=task.id,
                home=self.settings.home,
                tree=Path(ws.path),
                state_dir=Path(ws.run_dir) / "explore",
                name="agent-check",
                limit_s=1,
                agent_home=agent_home(ws),
                allow_hosts=endpoints(task),
            )
        )

    async def _reproduce(self, task: TaskSpec, inp: ExploreInput) -> Verdict:
        """Run the command gates once at base, in a clean checkout of it; the others need
        an attempt to judge."""
        ws = inp.workspace
        runnable = task.model_copy(update={"verify": [g for g in task.verify if g.kind == "run"]})
        if not runnable.verify:
            return Verdict(passed=True, artifact=ws.base_commit)
        at_base = MakeResult(attempt=0, commit=ws.base_commit, start_commit=ws.base_commit)
        log_dir = Path(ws.run_dir) / "explore"
        async with artifact.checkout(
            ws.repo, ws.base_commit, log_dir / "checkout", self.settings.locks
        ) as tree:
            bench = gates.Bench(tree=tree, log_dir=log_dir, home=self.settings.home)
            results = await gates.evaluate(runnable, ws, at_base, bench)
        return Verdict(
            passed=all(g.passed for g in results), gates=results, artifact=ws.base_commit
        )


async def _endpoints_answer(task: TaskSpec) -> None:
    """Every model endpoint the task calls from the worker answers and takes the key."""
    wanted: dict[str | None, str] = {}
    if task.agent.backend == "openai" and task.agent.model:
        wanted[task.agent.base_url] = task.agent.model
    for gate in task.verify:
        if gate.llm_review is not None:
            model = gate.llm_review.model or task.agent.model
            if model:
                wanted.setdefault(gate.llm_review.base_url or task.agent.base_url, model)
    for base_url, model in wanted.items():
        await preflight(base_url, model)


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""
