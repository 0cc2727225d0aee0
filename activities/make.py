"""make: one attempt of an agent, framed the same way for both backends.

An attempt opens (prompt and feedback files, the start commit recorded, the
main checkout snapshotted) and closes (a work-in-progress commit, the files it
changed, writes outside the worktree detected). Everything is keyed by task and
attempt so a retry after a crash is safe: a retried opening kills the agent
group a crashed worker left behind and resets the worktree to the start commit.

The ``command`` backend does all three in one activity (``make``): the external
agent runs in the worktree with the LOOP_* variables. The ``openai`` backend
opens with ``begin_attempt``, runs the model loop as a child workflow, and
closes with ``end_attempt``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from temporalio import activity

from activities import sandbox
from activities.git import git
from activities.workspace import (
    changed_files,
    outside_changes,
    outside_snapshot,
    restore,
    wip_commit,
)
from loop import feedback as fb
from loop.contracts import (
    BEGIN_ATTEMPT,
    END_ATTEMPT,
    MAKE,
    AttemptStart,
    EndAttemptInput,
    MakeInput,
    MakeResult,
    Workspace,
)
from loop.errors import permanent
from loop.logs import log_for
from loop.redact import redact, redact_file
from loop.settings import Settings

CLAIM_CHARS = 16_000


class MakeActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=MAKE.name)
    async def make(self, inp: MakeInput) -> MakeResult:
        ws, n = inp.workspace, inp.attempt
        log = log_for(inp.task.id, n, "make")
        start = await self._open(inp)
        folder = Path(start.attempt_dir)
        output_file = folder / "output.md"
        output_file.unlink(missing_ok=True)
        env = {
            "LOOP_TASK_ID": inp.task.id,
            "LOOP_ATTEMPT": str(n),
            "LOOP_PROMPT_FILE": str(folder / "prompt.md"),
            "LOOP_OUTPUT_FILE": str(output_file),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        if inp.prompt.feedback is not None:
            env["LOOP_FEEDBACK_FILE"] = str(folder / "feedback.json")

        argv = list(inp.task.agent.command or [])
        log.info("agent starting", argv=argv, sandbox=inp.task.sandbox.mode)
        # The attempt folder is the agent's (LOOP_OUTPUT_FILE goes there); the rest of
        # LOOP_HOME is hidden (strict) or out of reach of the task's uid (basic).
        ran = await sandbox.run_sandboxed(
            argv,
            cwd=Path(ws.path),
            policy=inp.task.sandbox,
            kind="agent",
            worktree=Path(ws.path),
            task_id=inp.task.id,
            extra_env=env,
            writable=[folder],
            protected=inp.task.protected_paths(),
            hide=[self.settings.home],
            limit_s=inp.task.agent.timeout,
            log_path=folder / "agent.log",
            pid_file=folder / "agent.pid",
        )
        log.info(
            "agent finished",
            exit_code=ran.exit_code,
            timed_out=ran.timed_out,
            seconds=ran.duration_s,
            sandbox=ran.sandbox,
            refused=ran.refused or None,
        )
        # What the agent printed or claimed leaves this activity without secrets.
        redact_file(Path(ran.log_path))
        if output_file.exists():
            redact_file(output_file)
            claim = output_file.read_bytes()[:CLAIM_CHARS].decode("utf-8", errors="replace")
            claim_path = str(output_file)
        else:
            claim, claim_path = ran.output_tail, ran.log_path
        claim, tail = redact(claim), redact(ran.output_tail)
        closed = await self._close(ws, n, start)
        # A write the sandbox refused outside the worktree is a policy violation as much
        # as one that went through: the agent tried to leave its worktree.
        refused = [f"refused by the sandbox: {r}" for r in ran.refused]
        return closed.model_copy(
            update={
                "outside_writes": closed.outside_writes + refused,
                "sandbox_level": ran.sandbox,
                "exit_code": ran.exit_code,
                "timed_out": ran.timed_out,
                "output_tail": tail,
                "claim": claim,
                "claim_path": claim_path,
                "duration_s": ran.duration_s,
                "log_path": ran.log_path,
            }
        )

    @activity.defn(name=BEGIN_ATTEMPT.name)
    async def begin_attempt(self, inp: MakeInput) -> AttemptStart:
        return await self._open(inp)

    @activity.defn(name=END_ATTEMPT.name)
    async def end_attempt(self, inp: EndAttemptInput) -> MakeResult:
        folder = self._folder(inp.workspace, inp.attempt)
        start = AttemptStart(
            attempt_dir=str(folder), start_commit=(folder / "start_commit").read_text().strip()
        )
        closed = await self._close(inp.workspace, inp.attempt, start)
        agent = inp.agent
        (folder / "answer.md").write_text(agent.answer)
        level = await asyncio.to_thread(sandbox.probe)
        return closed.model_copy(
            update={
                "sandbox_level": f"{inp.task.sandbox.mode} (run tool); host={level}",
                "output_tail": f"{agent.ended}: {agent.reason} ({agent.steps} model steps)",
                "claim": redact(agent.answer[:CLAIM_CHARS]),
                "claim_path": str(folder / "answer.md"),
                "timed_out": agent.ended == "timeout",
                "tokens": agent.usage.tokens,
                "cost_usd": agent.usage.cost_usd,
                "tool_calls": agent.usage.tool_calls,
            }
        )

    def _folder(self, ws: Workspace, attempt: int) -> Path:
        return Path(ws.run_dir) / f"attempt-{attempt}"

    async def _open(self, inp: MakeInput) -> AttemptStart:
        """Files for the agent, the start commit, a snapshot of the main checkout."""
        ws, n = inp.workspace, inp.attempt
        folder = self._folder(ws, n)
        folder.mkdir(parents=True, exist_ok=True)
        if not Path(ws.path).is_dir():
            raise permanent(f"the worktree {ws.path} is gone; start the task again with --rerun")
        log = log_for(inp.task.id, n, "make")
        if await sandbox.kill_leftovers(folder / "agent.pid"):
            log.warning("killed the agent left over from a crashed try")
        start_file = folder / "start_commit"
        if start_file.exists():
            start = start_file.read_text().strip()
            await restore(ws, start)
            log.info("retry: worktree reset to the attempt's start", commit=start[:12])
        else:
            start = await git(["rev-parse", "HEAD"], ws.path)
            start_file.write_text(start)
        (folder / "prompt.md").write_text(fb.render_prompt(inp.prompt, n))
        if inp.prompt.feedback is not None:
            (folder / "feedback.json").write_text(fb.feedback_json(inp.prompt.feedback))
        snapshot = await outside_snapshot(ws.repo, [str(self.settings.home)])
        (folder / "outside.json").write_text(json.dumps(snapshot))
        return AttemptStart(attempt_dir=str(folder), start_commit=start)

    async def _close(self, ws: Workspace, n: int, start: AttemptStart) -> MakeResult:
        """The work-in-progress commit verify checks, and what the attempt changed."""
        if not Path(ws.path, ".git").exists():
            raise permanent(f"the agent deleted its worktree {ws.path}")
        before = json.loads(Path(start.attempt_dir, "outside.json").read_text())
        outside = outside_changes(
            before, await outside_snapshot(ws.repo, [str(self.settings.home)])
        )
        commit = await wip_commit(ws, n)
        return MakeResult(
            attempt=n,
            start_commit=start.start_commit,
            commit=commit,
            changed_files=await changed_files(ws, commit),
            outside_writes=outside,
        )
