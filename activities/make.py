"""make: one attempt of the ``command`` agent backend (DESIGN's agent protocol).

The agent is an external program (Claude Code, Codex CLI, aider, a script) run
in the worktree with the LOOP_* variables. The activity is built to be retried
after a worker crash: the orphaned agent group is killed first, the worktree is
reset to the attempt's start commit, and the attempt ends in a work-in-progress
commit, the artifact that ``verify`` checks.
"""

from __future__ import annotations

import os
from pathlib import Path

from temporalio import activity

from activities.git import git
from activities.proc import kill_stale, run_process
from activities.workspace import (
    changed_files,
    outside_changes,
    outside_snapshot,
    restore,
    wip_commit,
)
from loop import feedback as fb
from loop.contracts import MAKE, MakeInput, MakeResult
from loop.errors import permanent
from loop.logs import log_for
from loop.settings import Settings

CLAIM_CHARS = 16_000


class MakeActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=MAKE.name)
    async def make(self, inp: MakeInput) -> MakeResult:
        ws, n = inp.workspace, inp.attempt
        log = log_for(inp.task.id, n, "make")
        folder = Path(ws.run_dir) / f"attempt-{n}"
        folder.mkdir(parents=True, exist_ok=True)
        if not Path(ws.path).is_dir():
            raise permanent(f"the worktree {ws.path} is gone; start the task again with --rerun")

        if kill_stale(folder / "agent.pid"):
            log.warning("killed the agent left over from a crashed try")
        start_file = folder / "start_commit"
        if start_file.exists():
            start = start_file.read_text().strip()
            await restore(ws, start)
            log.info("retry: worktree reset to the attempt's start", commit=start[:12])
        else:
            start = await git(["rev-parse", "HEAD"], ws.path)
            start_file.write_text(start)

        prompt_file = folder / "prompt.md"
        prompt_file.write_text(fb.render_prompt(inp.prompt, n))
        output_file = folder / "output.md"
        output_file.unlink(missing_ok=True)
        env = {
            **os.environ,
            "LOOP_TASK_ID": inp.task.id,
            "LOOP_ATTEMPT": str(n),
            "LOOP_PROMPT_FILE": str(prompt_file),
            "LOOP_OUTPUT_FILE": str(output_file),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        env.pop("LOOP_FEEDBACK_FILE", None)
        if inp.prompt.feedback is not None:
            feedback_file = folder / "feedback.json"
            feedback_file.write_text(fb.feedback_json(inp.prompt.feedback))
            env["LOOP_FEEDBACK_FILE"] = str(feedback_file)

        before = await outside_snapshot(ws.repo, [str(self.settings.home)])
        argv = list(inp.task.agent.command or [])
        log.info("agent starting", argv=argv)
        ran = await run_process(
            argv,
            cwd=Path(ws.path),
            env=env,
            limit_s=inp.task.agent.timeout,
            log_path=folder / "agent.log",
            pid_file=folder / "agent.pid",
        )
        log.info(
            "agent finished",
            exit_code=ran.exit_code,
            timed_out=ran.timed_out,
            seconds=ran.duration_s,
        )
        if not Path(ws.path, ".git").exists():
            raise permanent(f"the agent deleted its worktree {ws.path}")
        outside = outside_changes(
            before, await outside_snapshot(ws.repo, [str(self.settings.home)])
        )

        if output_file.exists():
            claim = output_file.read_bytes()[:CLAIM_CHARS].decode("utf-8", errors="replace")
            claim_path = str(output_file)
        else:
            claim, claim_path = ran.output_tail, ran.log_path
        commit = await wip_commit(ws, n)
        return MakeResult(
            attempt=n,
            exit_code=ran.exit_code,
            timed_out=ran.timed_out,
            output_tail=ran.output_tail,
            claim=claim,
            claim_path=claim_path,
            start_commit=start,
            commit=commit,
            changed_files=await changed_files(ws, commit),
            outside_writes=outside,
            duration_s=ran.duration_s,
            log_path=ran.log_path,
        )
