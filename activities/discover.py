"""discover / lookup_tasks: what work there is, and what Temporal knows of earlier tasks.

``discover`` reads one source of the SOURCES.yaml file and returns its items,
each with the task it would be (the source's template plus the item's own
fields), bounded by the source's ``max_items``:

- ``issue_files``: a folder of markdown files with a front-matter block (``id``,
  ``title``, ``labels``, ``state`` and any task-file field but ``repo``), read with
  python-frontmatter; the goal is the front matter's ``goal`` or the title and body.
- ``github_issues``: a JSON export in GitHub's REST shape; closed issues and pull
  requests are not work. Their text becomes a goal, never configuration.
- ``github``: the same issues read live through GitHub's REST API
  (``activities.github_issues``: every page, each asked with its last ETag).
- ``ci``: the command runs in a temporary detached worktree of the base (so the
  main checkout, dirty or not, is neither used nor touched), removed afterwards;
  when it fails, one regression-repair task whose goal names the command and
  carries its output tail, and whose first gate is the command itself (so the
  explore brief shows it failing at base).
- ``todo``: ``git grep`` over the base commit for the markers; a marker whose text
  matches the source's ``pattern`` is a task, keyed by its file and text (not its
  line, which moves).

A source that cannot be read (a missing folder, invalid JSON, a base that does
not resolve) fails the activity for good, so the Temporal UI shows why; the
workflow reports it and triages the other sources. ``lookup_tasks`` describes the
``task-<id>`` workflows of the items (status, LoopState, close time) and counts the
open tasks on the queue, for the policy in ``loop.rules.triage``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from pathlib import Path
from typing import Any, assert_never

from pydantic import ValidationError
from temporalio import activity
from temporalio.service import RPCError, RPCStatusCode

from activities import github_issues
from activities.gates import gate_extra_env
from activities.host import artifact, sandbox
from activities.host.git import GitError, git
from loop.contracts import (
    DISCOVER,
    HOOK_ISSUE,
    ISSUE_META_KEYS,
    ISSUE_OVERRIDE_KEYS,
    LOOKUP_TASKS,
    MAX_GOAL_CHARS,
    SA_STATE,
    TASK_WORKFLOW,
    Budget,
    CiSource,
    DiscoverInput,
    DiscoverResult,
    ExistingTask,
    GitHubIssuesSource,
    GitHubSource,
    HookItemResult,
    IssueFilesSource,
    LookupInput,
    LookupResult,
    SandboxPolicy,
    TaskSpec,
    TodoSource,
    TriageItem,
    WebhookSource,
    workflow_id_for,
)
from loop.contracts.tasks_hook import HookIssueInput
from loop.errors import permanent
from loop.hardened.files import read_untrusted
from loop.loaders import describe
from loop.rules import triage
from loop.settings import Settings

GOAL_TAIL_CHARS = 2_000
"""Output tail of a failing CI command quoted in the goal (the full log stays on disk)."""
TODO_CONTEXT_LINES = 3
ISSUE_FILE_BYTES = 1 << 20
"""An issue file is text a person wrote: a megabyte is plenty, and more is not read."""
GITHUB_FILE_BYTES = 64 << 20
LOOKUPS_AT_ONCE = 8


class DiscoverActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=HOOK_ISSUE.name)
    async def hook_issue_item(self, inp: HookIssueInput) -> HookItemResult:
        """A ``POST /hooks/tasks`` body as its item, by the rules an issue file follows."""
        item = issue_item(inp.source, inp.fields, inp.body, "the hook's body", "")
        return HookItemResult(item=item)

    @activity.defn(name=DISCOVER.name)
    async def discover(self, inp: DiscoverInput) -> DiscoverResult:
        source = inp.source
        match source:
            case IssueFilesSource():
                items, note = await asyncio.to_thread(_issue_files, source)
            case GitHubIssuesSource():
                items, note = await asyncio.to_thread(_github_issues, source)
            case GitHubSource():
                items, note = await self._github(source)
            case CiSource():
                items, note = await self._ci(source)
            case TodoSource():
                items, note = await _todo(source)
            case WebhookSource():
                items, note = [], "its items come by POST /hooks/tasks"
            case _:
                assert_never(source)
        return _bounded(source.name, items, source.max_items, note)

    @activity.defn(name=LOOKUP_TASKS.name)
    async def lookup_tasks(self, inp: LookupInput) -> LookupResult:
        client = activity.client()
        slots = asyncio.Semaphore(LOOKUPS_AT_ONCE)

        async def one(task_id: str) -> ExistingTask | None:
            async with slots:
                try:
                    desc = await client.get_workflow_handle(workflow_id_for(task_id)).describe()
                except RPCError as e:
                    if e.status == RPCStatusCode.NOT_FOUND:
                        return None
                    raise
            return ExistingTask(
                task_id=task_id,
                status=desc.status.name if desc.status else "UNKNOWN",
                state=desc.typed_search_attributes.get(SA_STATE) or "",
                closed_at=desc.close_time,
            )

        async def either(task_id: str) -> ExistingTask | None:
            """The task under its id; where there is none, one still open under the id
            its item had before ids named the repository is that item's."""
            found = await one(task_id)
            former = inp.former.get(task_id, "")
            if found is not None or not former:
                return found
            earlier = await one(former)
            if earlier is None or earlier.status != "RUNNING":
                return None
            return earlier.model_copy(update={"task_id": task_id})

        found = await asyncio.gather(*(either(t) for t in dict.fromkeys(inp.task_ids)))
        counted = await client.count_workflows(
            f'WorkflowType="{TASK_WORKFLOW}" AND ExecutionStatus="Running" '
            f'AND TaskQueue="{inp.task_queue}"'
        )
        return LookupResult(
            tasks={t.task_id: t for t in found if t is not None}, open_tasks=counted.count
        )

    async def _github(self, source: GitHubSource) -> tuple[list[TriageItem], str]:
        listing = await github_issues.open_issues(source, self.settings.home)
        items = [github_item(source, issue) for issue in listing.issues]
        note = (
            f"{len(items)} open issues and pull requests in {source.repo} "
            f"({listing.requests} requests, {listing.not_modified} not modified)"
        )
        if listing.partial:
            note += f"; only the first {github_issues.MAX_PAGES} pages were read"
        return items, note

    # ------------------------------------------------------------------ ci

    async def _ci(self, source: CiSource) -> tuple[list[TriageItem], str]:
        """The base branch's code is untrusted: the command runs like a gate, in the
        sandbox the template names (no network by default), as a uid leased for it."""
        repo, base = _repo_and_base(source.template)
        try:
            commit = await git(["rev-parse", "--verify", f"{base}^{{commit}}"], repo)
        except GitError as e:
            raise permanent(f"ci source {source.name}: cannot check out {base!r}: {e}") from None
        policy = SandboxPolicy.model_validate(source.template.get("sandbox") or {})
        state_dir = self.settings.home / "triage" / f"ci-{source.name}"
        holder = f"triage-ci-{source.name}"
        try:
            async with artifact.checkout(
                repo, commit, state_dir, activity.info().attempt, self.settings.locks
            ) as folder:
                proc = await sandbox.run_sandboxed(
                    sandbox.SandboxRun(
                        argv=["bash", "-c", source.run],
                        kind="gate",
                        policy=policy,
                        task_id=holder,
                        home=self.settings.home,
                        tree=folder,
                        state_dir=state_dir,
                        name="ci",
                        limit_s=source.timeout,
                        env=gate_extra_env(policy),
                    )
                )
        finally:
            await asyncio.to_thread(sandbox.release, self.settings.home, holder)
        log_path = proc.log_path
        command = " ".join(source.run.split())
        if proc.exit_code == 0 and not proc.timed_out:
            return [], f"`{command}` passes on {base} ({proc.duration_s:.1f} s)"
        how = (
            f"does not finish within {source.timeout} s"
            if proc.timed_out
            else f"fails (exit code {proc.exit_code})"
        )
        # Paths into the temporary worktree (gone by now) read as paths in the repository.
        tail = proc.output_tail.replace(f"{folder}/", "").strip()[-GOAL_TAIL_CHARS:]
        goal = (
            f"Regression on {base}: the CI command `{command}` {how}. Make it pass again "
            "by fixing the cause; do not weaken, skip or delete the check.\n\n"
            f"Output tail of `{command}` on {base}:\n\n```\n{tail}\n```\n"
        )
        item = item_of(
            source,
            key="regression",
            title=f"`{command}` {how} on {base}",
            labels=["ci", "regression"],
            fields={"goal": goal, "verify": _with_ci_gate(source)},
        )
        return [item], f"`{command}` {how} on {base}; full log: {log_path}"


# --------------------------------------------------------------------------- issue files


def _issue_files(source: IssueFilesSource) -> tuple[list[TriageItem], str]:
    folder = Path(source.path)
    if not folder.is_dir():
        raise permanent(f"issue_files source {source.name}: {folder} is not a folder")
    files = sorted(folder.glob("*.md"))
    items = [_issue_file(source, f) for f in files]
    return items, f"{len(files)} issue files in {folder}"


def _issue_file(source: IssueFilesSource, file: Path) -> TriageItem:
    def skipped(key: str, why: str) -> TriageItem:
        task_id = triage.task_id_for(source.name, key)
        return TriageItem(source=source.name, key=key, task_id=task_id, skip_reason=why)

    # An issue folder may be the repository's: the file may be a link to the worker's
    # secrets, a FIFO, /dev/zero. Read as hostile input: no link, no block, capped.
    data, problem = read_untrusted(file, ISSUE_FILE_BYTES)
    if problem:
        return skipped(file.stem, f"{file.name}: not read ({problem})")
    import frontmatter  # here, not at the top: a new worker starts without it
    import yaml

    try:
        post = frontmatter.loads(data.decode("utf-8", errors="replace"))
    except (yaml.YAMLError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        return skipped(file.stem, f"{file.name}: front matter is not valid YAML ({first})")
    return issue_item(source, dict(post.metadata), post.content, file.name, file.stem)


def issue_item(
    source: Any, meta: dict[str, Any], content: str, where: str, default_key: str
) -> TriageItem:
    """An issue's fields (an issue file's front matter, a ``POST /hooks/tasks`` body) and
    text as its item: goal-level fields only, a budget no higher than the source's; what
    is refused is the item's skip reason, named after ``where`` the fields came from."""

    def skipped(key: str, why: str) -> TriageItem:
        task_id = triage.task_id_for(source.name, key)
        return TriageItem(source=source.name, key=key, task_id=task_id, skip_reason=why)

    key = str(meta.get("id") or default_key)
    if "repo" in meta:
        return skipped(key, f"{where}: an issue cannot choose its repository")
    refused = sorted(set(meta) - ISSUE_META_KEYS - ISSUE_OVERRIDE_KEYS)
    if refused:
        allowed = ", ".join(sorted(ISSUE_META_KEYS | ISSUE_OVERRIDE_KEYS))
        return skipped(
            key,
            f"{where}: front matter may not set {refused[0]!r}; an issue gives "
            f"goal-level fields only ({allowed})",
        )
    labels = meta.get("labels") or []
    if not isinstance(labels, list):
        labels = [labels]
    body = content.strip()
    title = str(meta.get("title") or _first_heading(body) or default_key)
    if str(meta.get("state", "open")).lower() != "open":
        return skipped(key, f"state {meta['state']}")
    overrides = {k: v for k, v in meta.items() if k in ISSUE_OVERRIDE_KEYS}
    if "goal" not in overrides:
        overrides["goal"] = f"{title}\n\n{body}".strip()
    note = ""
    if "budget" in overrides:
        try:
            overrides["budget"], note = _budget_within(overrides["budget"], source.template)
        except (ValidationError, TypeError) as e:
            why = describe(e) if isinstance(e, ValidationError) else "budget must be a mapping"
            return skipped(key, f"{where}: front matter budget: {why}")
    item = item_of(source, key=key, title=title, labels=[str(x) for x in labels], fields=overrides)
    return item.model_copy(update={"note": note})


def _budget_within(asked: Any, template: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The issue's budget, each limit no higher than the source's (a limit the source does
    not set, the issue may); and a note naming what was capped."""
    wanted = Budget.model_validate(asked)
    allowed = Budget.model_validate(template.get("budget") or {})
    kept: dict[str, Any] = {}
    capped: list[str] = []
    for name in wanted.model_fields_set:
        value, limit = getattr(wanted, name), getattr(allowed, name)
        if value is not None and limit is not None and value > limit:
            capped.append(f"{name} {value} -> {limit}")
            value = limit
        kept[name] = value
    note = f"budget capped at the source's ({', '.join(sorted(capped))})" if capped else ""
    return kept, note


def _first_heading(body: str) -> str:
    for line in body.splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return ""


# --------------------------------------------------------------------------- GitHub issues


def _github_issues(source: GitHubIssuesSource) -> tuple[list[TriageItem], str]:
    file = Path(source.path)
    raw, problem = read_untrusted(file, GITHUB_FILE_BYTES)
    if problem == "missing":
        raise permanent(f"github_issues source {source.name}: {file} not found")
    if problem:
        raise permanent(f"github_issues source {source.name}: {file} not read ({problem})")
    try:
        data = json.loads(raw.decode("utf-8", errors="replace"))
    except json.JSONDecodeError as e:
        raise permanent(
            f"github_issues source {source.name}: {file} is not JSON (line {e.lineno}: {e.msg})"
        ) from None
    if isinstance(data, dict) and isinstance(data.get("items"), list):
        data = data["items"]  # the search API's shape
    if not isinstance(data, list):
        raise permanent(f"github_issues source {source.name}: {file} is not a list of issues")
    items = [github_item(source, issue) for issue in data if isinstance(issue, dict)]
    return items, f"{len(items)} issues in {file.name}"


def github_item(source: GitHubIssuesSource | GitHubSource, issue: dict[str, Any]) -> TriageItem:
    """An issue in GitHub's REST shape (a listing's, an export's or a webhook's) as the
    item it is: the one place an issue becomes a task, for polls and webhooks alike."""
    key = str(issue.get("number", "")) or "unnumbered"
    title = str(issue.get("title") or f"issue {key}")
    labels = [
        str(label.get("name", "")) if isinstance(label, dict) else str(label)
        for label in issue.get("labels") or []
    ]
    task_id, former_id = _ids(source, key)
    if issue.get("pull_request"):
        return TriageItem(
            source=source.name, key=key, task_id=task_id, title=title,
            skip_reason="pull request", former_id=former_id,
        )  # fmt: skip
    state = str(issue.get("state") or "open").lower()
    if state != "open":
        return TriageItem(
            source=source.name,
            key=key,
            task_id=task_id,
            title=title,
            labels=labels,
            skip_reason=state,
            former_id=former_id,
        )
    body = str(issue.get("body") or "").strip()
    where = issue.get("html_url") or f"#{key}"
    goal = f"{title}\n\n{body}\n\n(GitHub issue {where})".strip()
    fields: dict[str, Any] = {"goal": goal}
    if isinstance(source, GitHubSource) and key.isdigit():
        # A live repository: the task keeps its status comment on the issue.
        fields["github_issue"] = {
            "repo": source.repo,
            "number": int(key),
            "token_env": source.token_env,
        }
    return item_of(source, key=key, title=title, labels=labels, fields=fields)


# --------------------------------------------------------------------------- TODO markers


async def _todo(source: TodoSource) -> tuple[list[TriageItem], str]:
    repo, base = _repo_and_base(source.template)
    pathspecs = [f":(glob){p}" for p in source.paths]
    markers = [arg for m in source.markers for arg in ("-e", m)]
    try:
        commit = await git(["rev-parse", "--verify", f"{base}^{{commit}}"], repo)
        out = await git(
            ["grep", "-n", "-I", "-z", "-w", "-F", *markers, commit, "--", *pathspecs], repo
        )
    except GitError as e:
        if e.exit_code != 1 or e.stderr.strip():  # 1 with nothing said: no marker at all
            raise permanent(f"todo source {source.name}: {e}") from None
        out = ""
    pattern = re.compile(source.pattern)
    marker_re = re.compile(r"\b(" + "|".join(map(re.escape, source.markers)) + r")\b")
    items: list[TriageItem] = []
    found = 0
    for record in out.split("\n"):
        parts = record.split("\0")
        if len(parts) < 3:
            continue
        path, line, text = parts[0].removeprefix(f"{commit}:"), parts[1], "\0".join(parts[2:])
        at = marker_re.search(text)
        if at is None:
            continue
        found += 1
        marker_text = text[at.start() :].strip()
        digest = hashlib.sha1(f"{path}\0{marker_text}".encode(), usedforsecurity=False)
        key = f"{_slug(Path(path).stem)}-{digest.hexdigest()[:8]}"
        title = f"{path}:{line}: {marker_text}"[:200]
        labels = [at.group(1).lower()]
        if not pattern.search(marker_text):
            items.append(
                TriageItem(
                    source=source.name,
                    key=key,
                    task_id=triage.task_id_for(source.name, key),
                    title=title,
                    labels=labels,
                    skip_reason=f'does not match pattern "{source.pattern}"',
                )
            )
            continue
        context = await _context(repo, commit, path, int(line))
        goal = (
            f"Resolve this {at.group(1)} marker in {path} (line {line} at {base}): "
            f"{marker_text}\n\nDo what it asks, then remove the marker.\n\n"
            f"Context:\n\n```\n{context}\n```\n"
        )
        items.append(item_of(source, key=key, title=title, labels=labels, fields={"goal": goal}))
    # Matching markers first, so max_items never hides work behind non-matching ones.
    items.sort(key=lambda i: bool(i.skip_reason))
    return items, f"{found} markers ({', '.join(source.markers)}) at {base}"


async def _context(repo: str, commit: str, path: str, line: int) -> str:
    try:
        text = await git(["show", f"{commit}:{path}"], repo)
    except GitError:
        return ""
    lines = text.splitlines()
    lo, hi = max(0, line - 1 - TODO_CONTEXT_LINES), min(len(lines), line + TODO_CONTEXT_LINES)
    return "\n".join(f"{n + 1:>5}  {lines[n]}" for n in range(lo, hi))


# --------------------------------------------------------------------------- helpers


def item_of(
    source: IssueFilesSource
    | GitHubIssuesSource
    | GitHubSource
    | CiSource
    | TodoSource
    | WebhookSource,
    *,
    key: str,
    title: str,
    labels: list[str],
    fields: dict[str, Any],
) -> TriageItem:
    """The item with its task: the source's template, the item's fields over it."""
    task_id, former_id = _ids(source, key)
    data = triage.merge(source.template, fields)
    data["id"] = task_id
    data["repo"] = source.template.get("repo")  # never the item's
    if isinstance(data.get("goal"), str) and len(data["goal"]) > MAX_GOAL_CHARS:
        data["goal"] = data["goal"][: MAX_GOAL_CHARS - 20] + "\n[… cut]"
    base = TriageItem(source=source.name, key=key, task_id=task_id, title=title, labels=labels,
                      former_id=former_id)  # fmt: skip
    try:
        spec = TaskSpec.model_validate(data)
    except ValidationError as e:
        return base.model_copy(update={"skip_reason": f"invalid task: {describe(e)}"})
    return base.model_copy(update={"spec": spec})


def _ids(source: Any, key: str) -> tuple[str, str]:
    """(task id, former id) of a source's item: a ``github`` source's ids name its
    repository, and its items' tasks from before that keep the id they had."""
    if not isinstance(source, GitHubSource):
        return triage.task_id_for(source.name, key), ""
    return triage.task_id_for(source.name, key, source.repo), triage.task_id_for(source.name, key)


def _with_ci_gate(source: CiSource) -> list[dict[str, Any]]:
    """The template's gates with the failing command first, unless a gate already runs it."""
    verify = source.template.get("verify")
    gates = [dict(g) for g in verify if isinstance(g, dict)] if isinstance(verify, list) else []
    if any(g.get("run") == source.run for g in gates):
        return gates
    names = {g.get("name") for g in gates}
    name = next(n for n in ("ci", "ci-regression", f"ci-{source.name}") if n not in names)
    return [{"name": name, "run": source.run, "timeout": source.timeout}, *gates]


def _bounded(name: str, items: list[TriageItem], limit: int, note: str) -> DiscoverResult:
    """At most ``limit`` candidates and ``limit`` skipped items; the rest are counted."""
    work = [i for i in items if not i.skip_reason]
    ruled_out = [i for i in items if i.skip_reason]
    kept = work[:limit] + ruled_out[:limit]
    dropped = len(items) - len(kept)
    if dropped:
        note += f"; {dropped} more items past max_items={limit} not listed"
    return DiscoverResult(source=name, items=kept, dropped=dropped, note=note)


def _repo_and_base(template: dict[str, Any]) -> tuple[str, str]:
    repo, base = template.get("repo"), template.get("base")
    if not isinstance(repo, str) or not isinstance(base, str):
        raise permanent("the source's template has no repo or base: load the sources file first")
    return repo, base


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:24] or "file"
