"""make: one attempt of an agent, framed the same way for both backends.

An attempt opens (prompt and feedback files, the start commit recorded, the
main checkout snapshotted) and closes (a work-in-progress commit, the files it
changed, writes outside the worktree detected). Everything is keyed by task and
attempt so a retry after a crash is safe: a retried opening kills the agent
group a crashed worker left behind and resets the worktree to the start commit.
A retry the server starts while the old try still runs (it missed the old try's
heartbeats during an outage) waits for it (``owning``), and returns its result
when it closed the attempt (``made_before``).

The attempt folder (``runs/<id>/attempt-N``) is the worker's: prompt, feedback,
logs, pid and state files, which no task uid can write. The agent's own places
are apart from it: ``attempt-N/agent/`` (``LOOP_OUTPUT_FILE``) and the task's HOME
(``runs/<id>/home``), both its uid's; what the worker reads from them it reads
as hostile input (``loop.hardened.files.read_untrusted``).

The ``command`` backend does all three in one activity (``make``): the external
agent runs in the worktree with the LOOP_* variables. The ``openai`` backend
opens with ``begin_attempt``, runs the model loop as a child workflow, and
closes with ``end_attempt``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypedDict, Unpack

import opentelemetry.context
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.host import artifact, clone, sandbox
from activities.host.files import write_atomic
from activities.host.gateway import Grant, provider_key
from activities.host.gateway.upstream import upstream_refusal
from activities.host.git import GitError, git, path_lock
from activities.host.pool import Pool
from activities.host.pool import read as read_pool
from activities.host.proc import ProcResult, reporting, tail_of
from activities.host.progress import AttemptProgress
from activities.host.remote import publish
from activities.host.step_files import keep
from activities.host.worktree import (
    diff_stat,
    outside_changes,
    outside_snapshot,
    restore,
    wip_commit,
)
from loop.contracts import (
    AGENT_TAIL_CHARS,
    BEGIN_ATTEMPT,
    CALLS_FILE,
    CHANGED_SHOWN,
    END_ATTEMPT,
    MAKE,
    AgentLimits,
    AttemptStart,
    EndAttemptInput,
    MakeInput,
    MakeResult,
    TaskSpec,
    Workspace,
)
from loop.contracts.step_context import MADE_FILE, input_gone
from loop.errors import permanent
from loop.hardened.files import read_untrusted
from loop.logs import log_for
from loop.pricing import cost, load_prices
from loop.redact import redact, redact_file
from loop.rules import feedback as fb
from loop.rules import usage
from loop.rules.clis import BY_NAME, usage_source
from loop.settings import Settings

CLAIM_CHARS = 16_000
CLAIM_BYTES = 4 * CLAIM_CHARS
SIZE_FILE = "start_size"


def agent_dir(attempt_dir: str | Path) -> Path:
    """The agent's own folder in an attempt: where ``LOOP_OUTPUT_FILE`` lives."""
    return Path(attempt_dir) / "agent"


def agent_home(ws: Workspace) -> Path:
    """HOME of the task's agent and ``run`` tool, kept from one attempt to the next."""
    return Path(ws.run_dir) / "home"


def endpoints(task: TaskSpec) -> list[str]:
    """What the egress proxy lets through beyond ``allow_hosts``: the agent's endpoint."""
    return sandbox.endpoint_entries(task.agent.base_url, openai=task.agent.backend == "openai")


TRY_FILE = "try"
"""The try of the attempt's make that owns the worktree (the latest to start)."""


def superseded(folder: Path) -> bool:
    """Whether a later try of this make started after this one (``_open`` records it)."""
    try:
        return int((folder / TRY_FILE).read_text()) != activity.info().attempt
    except (OSError, ValueError):
        return False


OWNER_LOCK = "owner.lock"
"""Held by the try of the attempt that runs (``owning``)."""


def keep_made(folder: Path, made: MakeResult) -> MakeResult:
    """Record the attempt's result, keyed by the step (workflow run and activity id): a
    try whose completion the server no longer takes (it gave the try up during an
    outage) still leaves the result to the retry, which returns it (``made_before``);
    and the attempt's later steps on this host are sent its path (``MakeResult.kept``)
    instead of what it holds. The result, naming where it is kept."""
    info = activity.info()
    made = made.model_copy(update={"kept": str(folder / MADE_FILE)})
    record = {"run_id": info.workflow_run_id, "activity_id": info.activity_id,
              "made": made.model_dump(mode="json")}  # fmt: skip
    write_atomic(folder / MADE_FILE, json.dumps(record))
    return made


def _shorter(ran: ProcResult) -> str:
    """The end of what the agent printed, for its result: the log holds all of it."""
    tail = ran.output_tail
    if len(tail) <= AGENT_TAIL_CHARS:
        return tail
    kept = tail[-AGENT_TAIL_CHARS:]
    try:
        size = Path(ran.log_path).stat().st_size
    except OSError:
        size = len(tail.encode())
    return f"[… {max(size - len(kept.encode()), 0)} earlier bytes in the log]\n{kept}"


def made_before(folder: Path) -> MakeResult | None:
    """What an earlier try of this very step made, if one closed the attempt; None for a
    first try, a try after one that did not get that far, or another step's record."""
    try:
        record = json.loads((folder / MADE_FILE).read_text())
    except (OSError, ValueError):
        return None
    info = activity.info()
    if (
        record.get("run_id") != info.workflow_run_id
        or record.get("activity_id") != info.activity_id
    ):
        return None
    return MakeResult.model_validate(record["made"])


def owning(folder: Path) -> contextlib.AbstractAsyncContextManager[None]:
    """The attempt's worktree to one try at a time, across this host's worker processes.

    The server retries a make whose heartbeat it missed (a restart of the server longer
    than the heartbeat timeout) while the old try still runs in this worker. The retry
    waits for the old try instead of racing it: the old try ends by itself (its result
    kept, ``keep_made``) or learns from its next heartbeat that the server gave it up
    and is cancelled, its agent killed. Either way the worktree is reset or committed by
    one try at a time, and an agent that finished is not paid for again. A dead worker's
    lock goes with its process, so a retry after a crash waits for nothing. The lock
    file is the attempt's, removed with its run folder."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path_lock(folder / OWNER_LOCK)


USAGE_LOG_CHARS = 2 * 1024 * 1024
"""How much of the agent's log is read for its usage (the reports come last)."""
USAGE_FILE_BYTES = 64 * 1024


class _Run(TypedDict, total=False):
    """What the run of an attempt adds to what closing it found in the worktree: the
    fields of ``MakeResult`` by name and type, so a checker sees a misspelled one."""

    outside_writes: list[str]
    removed: list[str]
    sandbox_level: str
    exit_code: int | None
    timed_out: bool
    output_tail: str
    claim: str
    claim_path: str
    duration_s: float
    log_path: str
    network_refused: list[str]
    not_started: str
    tries: int
    tokens: int
    cost_usd: float
    tool_calls: int
    usage_reported: bool
    agent_error: str
    agent_error_fatal: bool
    protected_writes: list[str]
    model_calls: int
    metered: bool
    budget_spent: str
    gateway_refused: list[str]
    context: str


def finished(closed: MakeResult, **run: Unpack[_Run]) -> MakeResult:
    """The attempt's result: the worktree's part from closing it, the run's from ``run``."""
    return closed.model_copy(update=run)


class MakeActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.prices = load_prices(settings.home)

    @activity.defn(name=MAKE.name)
    async def make(self, inp: MakeInput) -> MakeResult:
        folder = self._folder(inp.workspace, inp.attempt)
        async with owning(folder):
            earlier = made_before(folder)
            if earlier is not None:
                # An earlier try closed the attempt but its worker lost the server before it
                # could say so: its commit is the attempt's, the agent does not run again.
                log = log_for(inp.task.id, inp.attempt, "make")
                log.info("an earlier try made the attempt", commit=earlier.commit[:12])
                return earlier
            made = await self._try(inp)
            made = await asyncio.to_thread(keep_made, folder, made)
        return made

    async def _try(self, inp: MakeInput) -> MakeResult:
        """One try of the attempt: open it, run the agent, close it."""
        ws, n = inp.workspace, inp.attempt
        log = log_for(inp.task.id, n, "make")
        pool = self._pool(inp)
        stopped = (await asyncio.to_thread(pool.check))[0] if pool is not None else ""
        if stopped:
            # The task's candidates spent its budget, or another was chosen: no agent runs.
            log.info("the task's pool refuses the attempt", why=stopped)
            return MakeResult(
                attempt=n, usage_reported=True, budget_spent=f"{stopped} before the attempt"
            )
        start = await self._open(inp)
        folder = Path(start.attempt_dir)
        output_file = agent_dir(folder) / "output.md"
        usage_file = agent_dir(folder) / "usage.json"
        env = {
            "LOOP_TASK_ID": inp.task.id,
            "LOOP_ATTEMPT": str(n),
            "LOOP_PROMPT_FILE": str(folder / "prompt.md"),
            "LOOP_OUTPUT_FILE": str(output_file),
            "LOOP_USAGE_FILE": str(usage_file),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        readable = [folder / "prompt.md"]
        if inp.prompt.feedback is not None:
            env["LOOP_FEEDBACK_FILE"] = str(folder / "feedback.json")
            readable.append(folder / "feedback.json")

        argv = list(inp.task.agent.command or [])
        grant = await self._grant(inp, folder)
        log.info("agent starting", argv=argv, sandbox=inp.task.sandbox.mode,
                 gateway=grant.upstream if grant else None)  # fmt: skip
        source = usage_source(argv, inp.task.agent.usage)
        # Each heartbeat says how far the agent got (``loop status``, the review page).
        progress = AttemptProgress(
            n, folder / "agent.log", usage_file, source, grant, inp.task.agent.model, self.prices
        )
        with reporting(progress):
            ran = await until_chosen(pool, self._run(inp, folder, env, readable, grant))
        if ran is None:
            # Another candidate of the task was chosen meanwhile: its agent was stopped at
            # once; what it spent is in the pool (and the journal), its work goes with it.
            log.info("another candidate was chosen: the agent stopped")
            assert pool is not None
            made = MakeResult(
                attempt=n, start_commit=start.start_commit, commit=start.start_commit,
                usage_reported=True, budget_spent=f"{pool.check()[0]} during the attempt",
            )  # fmt: skip
            if grant is None:
                return made
            return made.model_copy(
                update={"tokens": grant.tokens, "cost_usd": grant.cost_usd,
                        "model_calls": grant.count, "metered": True}
            )  # fmt: skip
        if superseded(folder):
            # A later try opened the attempt meanwhile (``owning`` holds one off on this
            # host; this is for a lock that could not): it owns the worktree now.
            raise ApplicationError("superseded by a later try of this attempt", non_retryable=True)
        log.info(
            "agent finished",
            exit_code=ran.exit_code,
            timed_out=ran.timed_out,
            seconds=ran.duration_s,
            sandbox=ran.sandbox,
            refused=ran.refused or None,
            network_refused=ran.network_refused or None,
        )
        # What the agent printed or claimed leaves this activity without secrets.
        await asyncio.to_thread(redact_file, Path(ran.log_path))
        cli = BY_NAME.get(source)
        said = await asyncio.to_thread(tail_of, Path(ran.log_path), USAGE_LOG_CHARS)
        # The claim is what the agent said last to a person: its output file where it wrote
        # one, else a known CLI's final message (its transcript stays in agent.log), else
        # the tail of what it printed.
        data, problem = await asyncio.to_thread(read_untrusted, output_file, CLAIM_BYTES)
        if problem != "missing":
            text = data.decode("utf-8", errors="replace")[:CLAIM_CHARS]
            claim = f"{text}\n[{problem}]" if problem and text else (text or f"[{problem}]")
        else:
            claim = cli.read_claim(said).strip()[:CLAIM_CHARS] if cli is not None else ""
        if claim:
            claim, claim_path = redact(claim), str(folder / "claim.md")
            (folder / "claim.md").write_text(claim)
        else:
            claim, claim_path = redact(ran.output_tail), ran.log_path
        tail = redact(_shorter(ran))
        spent = await self._usage(inp.task, source, said, usage_file)
        if pool is not None and grant is None:  # the gateway adds each call as it ends
            cost_usd = spent.cost_usd or 0.0
            await asyncio.to_thread(pool.add, spent.tokens_in + spent.tokens_out, cost_usd)
        metered = await self._metered(grant, spent, folder, log)
        closed = await self._close(inp.task, ws, n, start)
        # A write the sandbox refused outside the worktree is a policy violation as much
        # as one that went through: the agent tried to leave its worktree.
        refused = [f"refused by the sandbox: {r}" for r in ran.refused]
        run = _Run(
            outside_writes=closed.outside_writes + refused,
            removed=ran.removed + closed.removed,
            sandbox_level=ran.sandbox,
            exit_code=ran.exit_code,
            timed_out=ran.timed_out,
            output_tail=tail,
            claim=claim,
            claim_path=claim_path,
            duration_s=ran.duration_s,
            log_path=ran.log_path,
            network_refused=ran.network_refused,
            not_started=ran.not_started,
            tries=activity.info().attempt,
            tokens=spent.tokens_in + spent.tokens_out,
            cost_usd=spent.cost_usd or 0.0,
            usage_reported=spent.found,
            agent_error=redact(spent.error),
            agent_error_fatal=spent.fatal,
            protected_writes=ran.refused_protected,
            context=keep(inp, inp.context),
        )
        run.update(metered)  # the gateway's measurement, where it ran, over the report
        return finished(closed, **run)

    async def _run(
        self, inp: MakeInput, folder: Path, env: dict[str, str], readable: list[Path],
        grant: Grant | None,
    ) -> ProcResult:  # fmt: skip
        """The agent's run in its sandbox: the worktree, the protocol's files, the gateway."""
        ws = inp.workspace
        return await sandbox.run_sandboxed(
            sandbox.SandboxRun(
                argv=list(inp.task.agent.command or []),
                kind="agent",
                policy=inp.task.sandbox,
                task_id=inp.task.id,
                home=self.settings.home,
                tree=Path(ws.path),
                state_dir=folder,
                name="agent",
                limit_s=inp.task.agent.timeout,
                env=env,
                writable=[agent_dir(folder)],
                readable=readable,
                agent_home=agent_home(ws),
                protected=inp.task.protected_paths(),
                allow_hosts=endpoints(inp.task),
                hidden=sandbox.hidden_for(ws),
                gateway=grant,
                environment=sandbox.Laid.of(ws.environment),
            )
        )

    async def _grant(self, inp: MakeInput, folder: Path) -> Grant | None:
        """The attempt's right to call its model through the gateway (``agent.provider``):
        the real key and upstream from the worker and the task file, the limits from the
        attempt's reservation."""
        provider = inp.task.agent.provider
        if provider is None:
            return None
        key = provider_key(provider)
        refused = await asyncio.to_thread(upstream_refusal, provider.upstream)
        if refused:
            raise permanent(f"agent.provider.base_url: {refused}; name the model API's endpoint")
        limits = inp.limits or AgentLimits()
        grant = Grant(
            task_id=inp.task.id,
            attempt=inp.attempt,
            api=provider.api,
            upstream=provider.upstream,
            key=key,
            key_variable=provider.key_variable,
            model=inp.task.agent.model or "",
            max_tokens=limits.tokens,
            max_cost_usd=limits.cost_usd,
            prices=self.prices,
            transcript_dir=folder if inp.task.agent.transcript else None,
            trace_context=opentelemetry.context.get_current(),
            journal=folder / CALLS_FILE,
            pool=self._pool(inp),
        )
        await asyncio.to_thread(grant.resume)  # a retried try: what the killed one spent
        return grant

    def _pool(self, inp: MakeInput) -> Pool | None:
        """The task's pool, where the attempt is a candidate's (``limits.shared``)."""
        shared = inp.limits.shared if inp.limits is not None else None
        return Pool.of(self.settings.home, shared) if shared is not None else None

    async def _metered(
        self, grant: Grant | None, said: usage.Reported, folder: Path, log: Any
    ) -> _Run:
        """The gateway's measurement of the attempt, which replaces what the agent said it
        spent (kept as a cross-check in the log); every call is in its journal already."""
        if grant is None:
            return {}
        reported = said.tokens_in + said.tokens_out
        if said.found and reported != grant.tokens:
            log.info("the agent's own report differs from the gateway's", reported=reported,
                     metered=grant.tokens, calls=grant.count)  # fmt: skip
        spent = ""
        if grant.spent_after is not None:
            why = grant.spent() or grant.stopped
            spent = f"{why} during the attempt after {grant.spent_after} calls"
        metered = _Run(
            tokens=grant.tokens,
            cost_usd=grant.cost_usd,
            usage_reported=True,
            metered=True,
            model_calls=grant.count,
            budget_spent=spent,
            gateway_refused=[
                r for r in grant.refused if not r.endswith("budget spent") and r != grant.stopped
            ],
        )
        refused = grant.provider_refused()
        if refused:
            # No later attempt does better: the task ends BLOCKED in the provider's words.
            metered["agent_error"], metered["agent_error_fatal"] = refused, True
        return metered

    async def _usage(
        self, task: TaskSpec, source: str, text: str, usage_file: Path
    ) -> usage.Reported:
        """What the agent says it spent and what went wrong, from its log (the worker's
        own file, its tail) and LOOP_USAGE_FILE (the agent's, read as hostile)."""
        data, problem = await asyncio.to_thread(read_untrusted, usage_file, USAGE_FILE_BYTES)
        spent = usage.read(source, text, None if problem else data)
        if spent.found and spent.cost_usd is None:
            model = task.agent.model
            spent.cost_usd = (
                cost(model, spent.tokens_in, spent.tokens_out, self.prices) if model else 0.0
            )
        return spent

    @activity.defn(name=BEGIN_ATTEMPT.name)
    async def begin_attempt(self, inp: MakeInput) -> AttemptStart:
        return await self._open(inp)

    @activity.defn(name=END_ATTEMPT.name)
    async def end_attempt(self, inp: EndAttemptInput) -> MakeResult:
        folder = self._folder(inp.workspace, inp.attempt)
        start = AttemptStart(
            attempt_dir=str(folder), start_commit=(folder / "start_commit").read_text().strip()
        )
        closed = await self._close(inp.task, inp.workspace, inp.attempt, start)
        agent = inp.agent
        (folder / "answer.md").write_text(agent.answer)
        level = (await asyncio.to_thread(sandbox.inspect_host)).level
        done = finished(
            closed,
            sandbox_level=f"{inp.task.sandbox.mode} (run tool); host={level}",
            output_tail=f"{agent.ended}: {agent.reason} ({agent.steps} model steps)",
            claim=redact(agent.answer[:CLAIM_CHARS]),
            claim_path=str(folder / "answer.md"),
            timed_out=agent.ended == "timeout",
            budget_spent=f"{agent.stopped} during the attempt" if agent.stopped else "",
            tokens=agent.usage.tokens,
            cost_usd=agent.usage.cost_usd,
            tool_calls=agent.usage.tool_calls,
        )
        return await asyncio.to_thread(keep_made, folder, done)

    def _folder(self, ws: Workspace, attempt: int) -> Path:
        return Path(ws.run_dir) / f"attempt-{attempt}"

    async def _open(self, inp: MakeInput) -> AttemptStart:
        """Files for the agent, the start commit, a snapshot of the main checkout."""
        ws, n = inp.workspace, inp.attempt
        folder = self._folder(ws, n)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not Path(ws.path).is_dir():
            raise permanent(f"the worktree {ws.path} is gone; start the task again with --rerun")
        log = log_for(inp.task.id, n, "make")
        if await sandbox.kill_leftovers(folder, "agent"):
            log.warning("killed the agent left over from a crashed try")
        (folder / TRY_FILE).write_text(str(activity.info().attempt))
        start_file = folder / "start_commit"
        if start_file.exists():
            start = start_file.read_text().strip()
            await restore(ws, start)
            log.info("retry: worktree reset to the attempt's start", commit=start[:12])
        else:
            start = await git(["rev-parse", "HEAD"], ws.path)
            start_file.write_text(start)
        size_file = folder / SIZE_FILE
        if not size_file.exists():
            size_file.write_text(str((await asyncio.to_thread(artifact.scan, ws.path)).size))
        parts = inp.prompt
        if parts.from_task:
            parts = parts.model_copy(update=fb.from_task(inp.task))
        if parts.brief_path and not parts.brief:
            try:
                brief = await asyncio.to_thread(Path(parts.brief_path).read_text)
            except FileNotFoundError:
                raise input_gone(f"explore's brief {parts.brief_path} is gone") from None
            parts = parts.model_copy(update={"brief": brief})
        (folder / "prompt.md").write_text(fb.render_prompt(parts, n))
        if parts.feedback is not None:
            (folder / "feedback.json").write_text(fb.feedback_json(parts.feedback))
        snapshot = {}
        if _writes_as_worker(inp.task):
            snapshot = await outside_snapshot(ws.repo, [str(self.settings.home)])
        (folder / "outside.json").write_text(json.dumps(snapshot))
        return AttemptStart(attempt_dir=str(folder), start_commit=start)

    async def _close(
        self, task: TaskSpec, ws: Workspace, n: int, start: AttemptStart
    ) -> MakeResult:
        """The work-in-progress commit verify checks, and what the attempt changed; or,
        when the worktree grew past its limit, no commit at all."""
        folder = Path(start.attempt_dir)
        if not Path(ws.path, ".git").exists():
            raise permanent(f"the agent deleted its worktree {ws.path}")
        outside: list[str] = []
        if _writes_as_worker(task):
            before = json.loads((folder / "outside.json").read_text())
            after = await outside_snapshot(ws.repo, [str(self.settings.home)])
            outside = outside_changes(before, after)
        found = await asyncio.to_thread(artifact.scan, ws.path, remove_special=True)
        grown_from = int((folder / SIZE_FILE).read_text() or 0)
        limit_mb = task.sandbox.limits.disk_mb
        too_big = artifact.over_limit(grown_from, found, limit_mb)
        too_big = too_big or await asyncio.to_thread(
            artifact.empty_if_over, [agent_dir(folder), agent_home(ws)], limit_mb
        )
        made = MakeResult(
            attempt=n,
            start_commit=start.start_commit,
            commit=start.start_commit,
            outside_writes=outside,
            removed=found.special,
        )
        if too_big:
            await _discard(ws, start.start_commit)
            return made.model_copy(update={"disk_exceeded": too_big})
        try:
            commit = await wip_commit(ws, n)
        except GitError as e:
            # The agent's worktree is something git refuses (an encoding its attributes name,
            # a path git will not store): the attempt's own failure, not Loopwork's.
            await _discard(ws, start.start_commit)
            why = f"git could not commit the attempt: {e.message}"
            return made.model_copy(update={"not_committed": why})
        await publish(ws, self.settings.locks)
        try:
            await clone.keep_attempt(ws, commit, self.settings.locks)
        except GitError as e:  # the diff's keeping is no reason to lose the attempt
            log_for(task.id, n, "make").warning("attempt not kept", error=e.message)
        changed, lines = await diff_stat(ws, commit)
        return made.model_copy(
            update={
                "commit": commit,
                "changed_files": changed[:CHANGED_SHOWN],
                "changed_count": len(changed),
                "changed_lines": lines,
                "ignored_files": await artifact.ignored(ws.path, ws.byproducts),
            }
        )


POOL_EVERY_S = 0.25
"""How often a candidate's running agent looks whether another one was chosen."""


async def until_chosen(pool: Pool | None, run: Awaitable[ProcResult]) -> ProcResult | None:
    """The agent's run; or None when its task chose another candidate meanwhile (the
    pool says so): the run is stopped at once, as a cancelled step's is, rather than at
    the step's next heartbeat (docs/concepts/candidates.md, "Stopping the others")."""
    running = asyncio.ensure_future(run)
    if pool is None:
        return await running
    try:
        while True:
            done, _ = await asyncio.wait({running}, timeout=POOL_EVERY_S)
            if done:
                return running.result()
            if (await asyncio.to_thread(read_pool, pool.path)).chosen not in ("", pool.member):
                break
    except BaseException:
        running.cancel()
        raise
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running
    return None


def _writes_as_worker(task: TaskSpec) -> bool:
    """Whether anything of the attempt writes with the worker's own rights, so the main
    checkout is compared before and after it: an agent of mode ``off``, or a model's file
    tools (the worker's process, confined by path). A command agent in a sandbox runs as
    the task's uid over a read-only host, where the main checkout is not writable (or
    not there): comparing it would cost two ``git status`` of the whole checkout per
    attempt and could only ever find a person's own edits."""
    if task.agent.backend != "command":
        return True
    return not sandbox.Capabilities.of(task.sandbox, "agent").confined


async def _discard(ws: Workspace, start_commit: str) -> None:
    """An attempt that cannot be judged leaves nothing behind, ignored files included."""
    await restore(ws, start_commit)
    await git(["clean", "-q", "-ffdx"], ws.path)
