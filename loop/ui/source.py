"""What the review page reads, and the one thing it writes (an answer).

Reads go through Temporal with the CLI's client (same configuration, same payload
codec): the visibility list and its search attributes, the ``status`` and ``trace``
queries of an open task, the result and the first history event (the task file) of a
closed one. Files come from ``LOOP_HOME``: ``runs/<id>/workspace.json`` (the base
commit), the worker's logs under ``runs/<id>/attempt-N/``, ``eval-results.json``. The
diff is read from the repository's objects with the hardened git runner
(``loop.hardened.git``: no external diff, no textconv, no fsmonitor, no hooks), from
git's structured output (``loop.ui.diff``): the repository is untrusted.

What a closed task says never changes, so it is kept in memory by run id.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError

from loop.client import ui_url
from loop.contracts import (
    CALLS_FILE,
    LEDGER_WORKFLOW,
    QUERY_LEDGER,
    QUERY_STATUS,
    QUERY_TRACE,
    SA_ATTEMPTS,
    SA_COST,
    SA_REPO,
    TASK_WORKFLOW,
    AnswerReply,
    BudgetFigures,
    LedgerState,
    TaskResult,
    TaskSpec,
    TaskStatus,
    is_valid_spec_id,
    is_valid_task_id,
    workflow_id_for,
)
from loop.errors import LoopError, Sealed, UnknownTask
from loop.hardened import git as hardened_git
from loop.hardened.files import read_untrusted
from loop.rules import progress
from loop.settings import Settings
from loop.tasks import answer, find, progress_of, task_state, with_live_candidates
from loop.ui import diff as diffs
from loop.ui.diff import DiffFile
from loop.ui.views import evals, spending, task_list, timeline

LIST_LIMIT = 200
QUERY_TIMEOUT_S = 5.0
LIST_QUERY_TIMEOUT_S = 2.0
"""A task in the list that does not answer within this is shown without its status."""
QUERY_PARALLEL = 16
REPOS_TTL_S = 30.0
DIFF_LIMIT = 1 << 20
DIFF_FILES = 300
LOG_LIMIT = 1 << 20
CALLS_LIMIT = 1 << 20
CACHE_SIZE = 512
_LOG_NAME = re.compile(
    r"^(attempt-\d{1,4}/(gate-[A-Za-z0-9._-]{1,63}|agent|call-\d{4})\.log|brief\.md)$"
)


@dataclass
class Diff:
    files: list[DiffFile] = field(default_factory=list)
    base: str = ""
    commit: str = ""
    unavailable: str = ""
    """Why there is no diff to show (no attempt yet, the repository is not on this host)."""
    cut: bool = False


@dataclass
class TaskPage:
    task_id: str
    workflow_id: str
    run_id: str
    open: bool
    closed_as: str
    """The workflow's status when it closed other than by returning (terminated, failed)."""
    spec: TaskSpec | None
    result: TaskResult
    status: TaskStatus | None
    used: BudgetFigures
    limits: BudgetFigures
    limits_note: str
    temporal_ui: str
    started: datetime | None
    logs: set[str] = field(default_factory=set)
    calls: dict[int, list[timeline.CallRow]] = field(default_factory=dict)
    """Each attempt's model calls, as the gateway measured them (``calls.jsonl``)."""


class _Lru(OrderedDict[str, Any]):
    def get_or(self, key: str) -> Any:
        if key in self:
            self.move_to_end(key)
            return self[key]
        return None

    def put(self, key: str, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > CACHE_SIZE:
            self.popitem(last=False)


class Source:
    def __init__(self, client: Client, home: Path, task_queue: str) -> None:
        self.client = client
        self.home = home
        self.runs = home / "runs"
        self.task_queue = task_queue
        self._specs = _Lru()
        self._closed = _Lru()
        self._diffs = _Lru()
        self._repos: tuple[float, list[str] | None] = (0.0, None)

    # ------------------------------------------------------------------ the list

    async def listings(self, state: str = "", repo: str = "") -> list[task_list.Listing]:
        """Tasks from the visibility list (newest first, at most ``LIST_LIMIT``), each open
        one with its ``status`` query."""
        query = f'WorkflowType="{TASK_WORKFLOW}"'
        if repo:
            query += f' AND LoopRepo="{_quoted(repo)}"'
        if state in task_list.STATES:
            query += f' AND LoopState="{state}"'  # refined below: the status query decides
        found: list[tuple[task_list.Listing, Any]] = []
        async for wf in self.client.list_workflows(query, limit=LIST_LIMIT):
            sa = wf.typed_search_attributes
            is_open = wf.status == WorkflowExecutionStatus.RUNNING
            goal = sealed = reason = ""
            try:
                memo = await wf.memo()
                goal, reason = str(memo.get("goal", "")), str(memo.get("reason", ""))
            except Sealed as e:  # this page has no key, or another one
                sealed = str(e)
            except Exception:  # a memo that is not the task's: its goal is unknown
                pass
            listing = task_list.Listing(
                task_id=wf.id.removeprefix("task-"),
                state=task_state(wf),
                open=is_open,
                attempts=sa.get(SA_ATTEMPTS) or 0,
                cost_usd=sa.get(SA_COST) or 0.0,
                repo=sa.get(SA_REPO) or "",
                started=wf.start_time,
                goal=goal,
                sealed=sealed,
                reason=reason,
            )
            found.append((listing, wf))
        gate = asyncio.Semaphore(QUERY_PARALLEL)

        async def fill(listing: task_list.Listing, wf: Any) -> None:
            if listing.sealed:
                return  # its status and task file are sealed too: only the list's fields
            async with gate:
                handle = self.client.get_workflow_handle(wf.id, run_id=wf.run_id)
                try:
                    if listing.open:
                        listing.status = await self._status(handle, LIST_QUERY_TIMEOUT_S)
                    else:
                        spec = await self._spec(handle, wf.run_id)
                        listing.max_attempts = spec.budget.max_attempts if spec else None
                except Sealed as e:  # a plain memo, but the worker now seals its answers
                    listing.sealed = str(e)

        await asyncio.gather(*(fill(x, wf) for x, wf in found))
        listings = [x for x, _ in found]
        if state:
            listings = [
                x for x in listings if (str(x.status.state) if x.status else x.state) == state
            ]
        return listings

    async def repos(self) -> list[str]:
        """Repositories with tasks, for the filter (listed again every ``REPOS_TTL_S``)."""
        at, known = self._repos
        if known is not None and time.monotonic() - at < REPOS_TTL_S:
            return known
        seen: dict[str, None] = {}
        async for wf in self.client.list_workflows(
            f'WorkflowType="{TASK_WORKFLOW}"', limit=LIST_LIMIT
        ):
            repo = wf.typed_search_attributes.get(SA_REPO)
            if repo:
                seen[repo] = None
        self._repos = (time.monotonic(), sorted(seen))
        return self._repos[1]

    # ------------------------------------------------------------------ one task

    async def task(self, task_id: str) -> TaskPage:
        if not is_valid_task_id(task_id):
            raise UnknownTask(f"{task_id!r} is not a task id")
        wid = workflow_id_for(task_id)
        _, desc = await find(self.client, task_id)
        run_id = desc.run_id
        handle = self.client.get_workflow_handle(wid, run_id=run_id, result_type=TaskResult)
        is_open = desc.status == WorkflowExecutionStatus.RUNNING
        spec = await self._spec(handle, run_id)
        status: TaskStatus | None = None
        budget_from: TaskStatus | None = None
        closed_as = limits_note = ""
        if is_open:
            status = await self._status(handle)
            if status is not None:
                # Its figures as of now, the running attempt's own among them.
                found = await progress_of(self.client, desc)
                status = progress.live(status, found, datetime.now(UTC))
                if status.candidates:
                    status = await with_live_candidates(self.client, status)
            budget_from = status
            result = await self._trace(handle)
            if result is None:  # no worker answers: the search attributes at least
                result = TaskResult(task_id=task_id, state=status.state if status else "RUNNING")
        else:
            cached = self._closed.get_or(run_id)
            if cached is None:
                cached = await self._closed_result(handle, desc, task_id)
                self._closed.put(run_id, cached)
            result, budget_from, closed_as = cached
        if budget_from is not None:
            used, limits = budget_from.budget.used, spending.limits_of(budget_from)
        else:
            used, limits = spending.used_of(result), _spec_limits(spec)
            limits_note = "limits as the task file set them (extensions are in the events)"
        return TaskPage(
            task_id=task_id,
            workflow_id=wid,
            run_id=run_id,
            open=is_open,
            closed_as=closed_as,
            spec=spec,
            result=result,
            status=status,
            used=used,
            limits=limits,
            limits_note=limits_note,
            temporal_ui=ui_url(self.client, wid),
            started=desc.start_time,
            logs=self.logs_of(task_id),
            calls=self.calls_of(task_id),
        )

    async def _closed_result(
        self, handle: WorkflowHandle, desc: Any, task_id: str
    ) -> tuple[TaskResult, TaskStatus | None, str]:
        """The result of a closed task, and its last status (for the budget's limits)."""
        if desc.status == WorkflowExecutionStatus.COMPLETED:
            result = await handle.result()
        else:
            # Terminated or failed: what the trace file says, if summarize wrote one.
            result = self._trace_file(task_id) or TaskResult(task_id=task_id, state="CANCELLED")
            return result, None, desc.status.name if desc.status else "CLOSED"
        status = None
        with contextlib.suppress(RPCError, TimeoutError, LoopError):
            # A closed workflow still answers queries (a worker replays it): exact limits.
            status = await asyncio.wait_for(
                handle.query(QUERY_STATUS, result_type=TaskStatus), QUERY_TIMEOUT_S
            )
        return result, status, ""

    async def _status(
        self, handle: WorkflowHandle, within_s: float = QUERY_TIMEOUT_S
    ) -> TaskStatus | None:
        with contextlib.suppress(RPCError, TimeoutError):
            return await asyncio.wait_for(
                handle.query(QUERY_STATUS, result_type=TaskStatus), within_s
            )
        return None

    async def _trace(self, handle: WorkflowHandle) -> TaskResult | None:
        with contextlib.suppress(RPCError, TimeoutError):
            return await asyncio.wait_for(
                handle.query(QUERY_TRACE, result_type=TaskResult), QUERY_TIMEOUT_S
            )
        return None

    async def _spec(self, handle: WorkflowHandle, run_id: str | None) -> TaskSpec | None:
        """The task file the workflow started with (its first history event's input)."""
        key = run_id or handle.id
        cached = self._specs.get_or(key)
        if cached is not None:
            return cached or None
        spec: TaskSpec | None = None
        with contextlib.suppress(RPCError, ValueError, LoopError, StopAsyncIteration):
            events = handle.fetch_history_events(page_size=1)
            first = await anext(aiter(events))
            attrs = first.workflow_execution_started_event_attributes
            if attrs.input.payloads:
                (spec,) = await self.client.data_converter.decode(
                    list(attrs.input.payloads), [TaskSpec]
                )
        self._specs.put(key, spec or False)
        return spec

    def _trace_file(self, task_id: str) -> TaskResult | None:
        data, _ = read_untrusted(self.runs / f"{task_id}.json", 16 << 20)
        if not data:
            return None
        try:
            return TaskResult.model_validate_json(data)
        except ValueError:
            return None

    # ------------------------------------------------------------------ files

    def logs_of(self, task_id: str) -> set[str]:
        """The worker's logs of a task that can be opened (``attempt-N/gate-X.log``, ...)."""
        folder = self.runs / task_id
        found: set[str] = set()
        with contextlib.suppress(OSError):
            if (folder / "brief.md").is_file():
                found.add("brief.md")
            for attempt in folder.glob("attempt-*"):
                for log in attempt.glob("*.log"):
                    name = f"{attempt.name}/{log.name}"
                    if _LOG_NAME.fullmatch(name):
                        found.add(name)
        return found

    def calls_of(self, task_id: str) -> dict[int, list[timeline.CallRow]]:
        """Each attempt's model calls through the gateway, from the worker's ``calls.jsonl``
        (the first ``CALLS_LIMIT`` bytes of a long one)."""
        found: dict[int, list[timeline.CallRow]] = {}
        with contextlib.suppress(OSError):
            for attempt in (self.runs / task_id).glob("attempt-*"):
                n = attempt.name.removeprefix("attempt-")
                if not n.isdigit() or attempt.is_symlink():
                    continue
                data, _ = read_untrusted(attempt / CALLS_FILE, CALLS_LIMIT)  # no link followed
                if data:
                    found[int(n)] = timeline.call_rows(data.decode("utf-8", "replace"))
        return found

    def read_log(self, task_id: str, name: str) -> tuple[str, str]:
        """A worker log's text (the last ``LOG_LIMIT`` bytes) and a note; never follows a link
        and opens only the worker's own files, by name."""
        if not is_valid_spec_id(task_id) or not _LOG_NAME.fullmatch(name):
            raise UnknownTask(f"no log {name!r} for task {task_id!r}")
        folder = self.runs / task_id
        for part in Path(name).parent.parts:
            if (folder / part).is_symlink():
                raise UnknownTask(f"no log {name!r} for task {task_id!r}")
            folder = folder / part
        data, note = read_untrusted(folder / Path(name).name, LOG_LIMIT, tail=True)
        if note == "missing":
            raise UnknownTask(f"no log {name!r} for task {task_id!r}")
        return data.decode("utf-8", "replace"), note

    def eval_runs(self) -> list[Any]:
        data, _ = read_untrusted(self.home / "eval-results.json", 32 << 20)
        return evals.eval_runs(data.decode("utf-8", "replace"))

    # ------------------------------------------------------------------ the diff

    async def diff(self, page: TaskPage) -> Diff:
        """The latest attempt's commit against the task's base, per file, highlighted; while
        the task waits for approval, the commit an approval approves (the same tree)."""
        waiting = page.status.commit if page.open and page.status else ""
        spec_repo = page.spec.repo if page.spec else ""
        found = where_diff(self.runs, page.task_id, page.result, spec_repo, waiting)
        if isinstance(found, Diff):
            return found
        cached = self._diffs.get_or("\0".join(found))
        if cached is not None:
            return cached
        diff = await git_diff(*found)
        if not diff.unavailable:
            self._diffs.put("\0".join(found), diff)
        return diff

    async def candidate_diffs(self, page: TaskPage, commits: dict[str, str]) -> dict[str, Diff]:
        """Each candidate's diff against base by its record's worktree: of the commit it
        waits with (``commits``), else of its verified one."""
        found: dict[str, Diff] = {}
        for c in page.result.candidates:
            ws, commit = c.workspace, commits.get(c.name) or (c.commit if c.passed else "")
            if ws is None or not commit:
                continue
            repo = ws.path if ws.isolated and Path(ws.path).is_dir() else ws.repo
            key = f"{repo}\0{ws.base_commit}\0{commit}"
            diff = self._diffs.get_or(key) or await git_diff(repo, ws.base_commit, commit)
            if not diff.unavailable:
                self._diffs.put(key, diff)
            found[c.name] = diff
        return found

    # ------------------------------------------------------------------ ledgers

    async def ledgers(self) -> list[LedgerState]:
        query = (
            f'WorkflowType="{LEDGER_WORKFLOW}" AND ExecutionStatus="Running" '
            f'AND TaskQueue="{_quoted(self.task_queue)}"'
        )
        states = []
        async for wf in self.client.list_workflows(query):
            handle = self.client.get_workflow_handle(wf.id)
            with contextlib.suppress(RPCError, TimeoutError):
                states.append(
                    await asyncio.wait_for(
                        handle.query(QUERY_LEDGER, result_type=LedgerState), QUERY_TIMEOUT_S
                    )
                )
        return sorted(states, key=lambda s: s.repo)

    # ------------------------------------------------------------------ answers

    async def answer(self, task_id: str, what: str, payload: Any) -> AnswerReply:
        """Send an answer as the CLI does (``loop.tasks.answer``, an update): what it did,
        or ``BadInput`` with the task's reason, and nothing in its history."""
        key = Settings.from_env().answer_key  # read per answer: `loop dev` may make it later
        return await answer(self.client, task_id, what, payload, payload.by, key)


def _spec_limits(spec: TaskSpec | None) -> BudgetFigures:
    if spec is None:
        return BudgetFigures()
    b = spec.budget
    return BudgetFigures(
        attempts=b.max_attempts,
        seconds=b.max_seconds,
        tokens=b.max_tokens,
        cost_usd=b.max_cost_usd,
        tool_calls=b.max_tool_calls,
    )


def _quoted(value: str) -> str:
    """A value inside a visibility query's double quotes."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _read_json(path: Path) -> dict[str, Any]:
    data, _ = read_untrusted(path, 1 << 20)
    try:
        found = json.loads(data or b"{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def where_diff(
    runs: Path, task_id: str, result: TaskResult, spec_repo: str, waiting: str = ""
) -> tuple[str, str, str] | Diff:
    """Where a task's diff is read: (repository, base, commit), or a ``Diff`` saying why
    there is none. The commit is the one waiting for approval, else the last attempt's;
    the repository is the task's clone while it is there, else the repository itself,
    which keeps an ended task's last attempt under ``refs/loopwork/<id>``."""
    made = next((a.make for a in reversed(result.attempts) if a.make), None)
    if not waiting and (made is None or not made.commit):
        return Diff(unavailable="no attempt has made a commit yet")
    commit = waiting or (made.commit if made else "")
    # A task with candidates works in the chosen one's worktree.
    folder = f"{task_id}+{result.chosen}" if result.chosen else task_id
    marker = _read_json(runs / folder / "workspace.json")
    base = str(marker.get("base_commit") or "")
    repo = str(marker.get("repo") or spec_repo)
    if marker.get("isolated") and Path(str(marker.get("path") or "")).is_dir():
        repo = str(marker["path"])  # the task's clone holds its attempts' commits
    if not base:
        first = result.attempts[0].make if result.attempts else None
        base = first.start_commit if first else ""
    if not base or not repo:
        return Diff(
            unavailable=f"the base commit is not known here (no {runs}/{task_id}/"
            "workspace.json on this host)"
        )
    return repo, base, commit


async def git_diff(repo: str, base: str, commit: str) -> Diff:
    """The diff of ``commit`` against ``base`` as git has it: the file list and counts from
    ``--numstat``/``--raw``, then each file's own patch (at most ``DIFF_FILES`` files and
    ``DIFF_LIMIT`` bytes of patches; past that, files are listed with git's counts)."""
    if not re.fullmatch(r"[0-9a-f]{7,64}", base) or not re.fullmatch(r"[0-9a-f]{7,64}", commit):
        return Diff(unavailable=f"not commits: {base!r}, {commit!r}")
    if not Path(repo).is_dir():
        return Diff(unavailable=f"the repository {repo} is not on this host")
    common = ["--no-color", "--no-ext-diff", "--no-textconv", "-M", base, commit]
    try:
        stats = await hardened_git.run(["diff", "-z", "--numstat", *common], repo, within_s=20)
        kinds = await hardened_git.run(["diff", "-z", "--raw", *common], repo, within_s=20)
        if stats.code or kinds.code:
            line = ((stats.err or kinds.err).strip().splitlines() or ["failed"])[0]
            return Diff(unavailable=f"git diff {base[:12]}..{commit[:12]}: {line}")
        status = diffs.raw(kinds.text)
        files: list[DiffFile] = []
        budget = DIFF_LIMIT
        for added, deleted, old, new in diffs.numstat(stats.text):
            kind, old_path = status.get(new, ("modified", old))
            f = DiffFile(path=new, old_path=old_path if old_path != new else "", status=kind)
            if added is None:
                f.status = "binary"
            elif len(files) >= DIFF_FILES or budget <= 0:
                f.shown, f.additions, f.deletions = False, added, deleted or 0
            else:
                paths = [old, new] if old != new else [new]
                patch = await hardened_git.run(
                    ["--literal-pathspecs", "diff", *common, "--", *paths],
                    repo,
                    limit=budget,
                    within_s=20,
                )
                budget -= len(patch.out)
                diffs.parse_patch(patch.out.decode("utf-8", "replace"), f)
                if patch.cut:
                    f.unfaithful = "its patch is longer than the page shows"
                elif (f.additions, f.deletions) != (added, deleted):
                    f.unfaithful = (
                        f"git counts +{added} −{deleted}, the page read +{f.additions} "
                        f"−{f.deletions}"
                    )
                if f.unfaithful:
                    f.additions, f.deletions = added, deleted or 0
            files.append(f)
    except hardened_git.Timeout as e:
        return Diff(unavailable=str(e))
    except OSError as e:
        return Diff(unavailable=f"cannot run git: {e.strerror}")
    cut = any(not f.shown for f in files)
    return Diff(files=diffs.highlight(files), base=base, commit=commit, cut=cut)


def today() -> str:
    return datetime.now(UTC).date().isoformat()
