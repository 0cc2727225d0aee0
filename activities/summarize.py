"""summarize: the trace a machine reads and the progress file a person reads.

``runs/<id>.json`` is the task's full record; ``memory.json`` learns what the
task taught about its repository (see ``loop.rules.memory``); ``notes.md`` keeps one section per
task (rewritten in place, so a retried or re-run summarize never duplicates it)
with what was done, what failed, the test results, the limits and the last
stable commit — what the next run, or the next person, needs first.

The task is over, so its uid goes back to the host's pool (every process of it
killed first) and the agent's HOME, which only that uid could use, is removed.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from datetime import UTC, datetime

from temporalio import activity

from activities.host import environments, sandbox
from activities.host.files import update_atomic, write_atomic
from loop.contracts import SUMMARIZE, SummarizeInput, SummarizeResult, TaskResult, TaskState
from loop.redact import redact, redact_obj
from loop.rules import memory
from loop.settings import Settings


class SummarizeActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=SUMMARIZE.name)
    async def summarize(self, inp: SummarizeInput) -> SummarizeResult:
        result = inp.result
        trace_path = self.settings.runs / f"{result.task_id}.json"
        result = result.model_copy(
            update={"trace_path": str(trace_path), "notes_path": str(self.settings.notes)}
        )
        record = redact_obj(result.model_dump(mode="json"))
        write_atomic(trace_path, json.dumps(record, indent=2))
        notes, text = self.settings.notes, redact(section(inp, result))
        at = datetime.now(UTC).isoformat(timespec="seconds")
        await asyncio.to_thread(
            update_atomic,
            notes,
            lambda old: merge_section(old, result.task_id, text),
            "# Loopwork progress notes\n",
        )
        await asyncio.to_thread(
            update_atomic, self.settings.memory, lambda old: memory.fold(old, inp.repo, result, at)
        )
        await asyncio.to_thread(release_task, self.settings, result.task_id)
        return SummarizeResult(trace_path=str(trace_path), notes_path=str(notes))


def release_task(settings: Settings, task_id: str) -> None:
    """Give the task's uid back and remove the HOME only it used (links not followed); it
    holds no environment any more (``loop env prune`` may remove one nobody holds)."""
    sandbox.release(settings.home, task_id)
    shutil.rmtree(settings.runs / task_id / "home", ignore_errors=True)
    environments.release(settings.home, task_id)


def _marker(task_id: str) -> str:
    return f"<!-- loop:{task_id} -->"


def merge_section(notes: str, task_id: str, text: str) -> str:
    """Replace the task's section when present, else append it."""
    start, end = _marker(task_id), _marker(f"{task_id}:end")
    block = f"{start}\n{text.rstrip()}\n{end}\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end) + r"\n?", re.S)
    if pattern.search(notes):
        return pattern.sub(lambda _: block, notes)
    return notes.rstrip("\n") + "\n\n" + block


def section(inp: SummarizeInput, r: TaskResult) -> str:
    lines = [
        f"## {r.task_id}: {r.state}",
        "",
        f"- goal: {inp.goal.strip().splitlines()[0]}",
        f"- repo: {inp.repo}",
        f"- ended: {r.reason}",
        f"- attempts: {len(r.attempts)}; final action: {r.final_action}",
    ]
    done = r.state == TaskState.DONE_WITH_EVIDENCE
    if done:
        lines.append(f"- completed: verified change on `{r.branch}` at `{r.commit[:12]}`")
    failed = [a for a in r.attempts if a.verdict is not None and not a.verdict.passed]
    if failed:
        lines += ["", "Failed approaches:"]
        for a in failed:
            assert a.verdict is not None
            why = "; ".join(
                f"{g.name}: {g.evidence.detail or f'exit {g.evidence.exit_code}'}"
                for g in a.verdict.failed
            )
            lines.append(f"- attempt {a.attempt}: {why}")
    if r.evidence:
        lines += ["", "Test results (last verdict):"]
        lines += [f"- {g.name}: {'pass' if g.passed else 'FAIL'}" for g in r.evidence]
    if not done:
        lines += ["", f"Limitations: {r.reason}"]
    stable = r.commit if done else ""
    lines += ["", f"Last stable commit: {stable[:12] or 'none from this task'}"]
    lines.append(f"Trace: {r.trace_path}")
    return "\n".join(lines)
