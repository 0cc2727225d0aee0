"""The event loop: the sources file, TriageWorkflow's input and result.

The models of the sources file live here because the workflow's input carries them (a
schedule stores the parsed file in its action, so every run is in history).
"""

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, field_validator

from loop.contracts.base import _Record, _TaskFileModel, workflow_id_for
from loop.contracts.task import Autonomy, TaskSpec

SOURCE_NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,23}$"
SCHEDULE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"

TEMPLATE_KEYS = frozenset(TaskSpec.model_fields) - {"id", "goal"}
"""Task-file fields a source's ``template`` may set (id and goal come from each item)."""
ISSUE_META_KEYS = frozenset({"id", "title", "labels", "state"})
ISSUE_OVERRIDE_KEYS = frozenset({"goal", "budget", "autonomy"})
"""What an issue file's front matter may set beyond its own metadata: goal-level fields
only, and budget and autonomy never above what the source allows. An issue's text is
data: it never names an agent, a sandbox, gates or instructions."""


def _template_keys(template: dict[str, object]) -> dict[str, object]:
    unknown = sorted(set(template) - TEMPLATE_KEYS)
    if unknown:
        raise ValueError(
            f"unknown task-file key {unknown[0]!r} (a template holds task-file fields "
            "other than id and goal)"
        )
    return template


class LabelFilter(_TaskFileModel):
    include: list[str] = Field(default_factory=list)
    """An item needs at least one of these labels (empty: no such requirement)."""
    exclude: list[str] = Field(default_factory=list)
    """An item with any of these labels is skipped."""


class _SourceBase(_TaskFileModel):
    name: str = Field(pattern=SOURCE_NAME_PATTERN)
    """Names the source in task ids: ``task-<name>-<item>``."""
    autonomy: Autonomy = Autonomy.REPORT
    """The autonomy its items get, and the most any item of it may have."""
    labels: LabelFilter = Field(default_factory=LabelFilter)
    """Which labels an item needs, and which rule it out."""
    template: dict[str, object] = Field(default_factory=dict)
    """Task-file fields of its items, over the file's ``template``; repo and agent at least.
    Once loaded: complete, with an absolute repo and a concrete base."""
    max_items: int = Field(default=20, ge=1, le=200)
    """Items one triage looks at from this source; more are counted, not listed."""

    @field_validator("template")
    @classmethod
    def _template(cls, template: dict[str, object]) -> dict[str, object]:
        return _template_keys(template)


class IssueFilesSource(_SourceBase):
    """A folder of markdown issue files with a front-matter block."""

    kind: Literal["issue_files"]
    path: str = Field(min_length=1)
    """The folder (relative to the sources file); each ``*.md`` in it is one issue."""


class GitHubIssuesSource(_SourceBase):
    """A JSON export of issues in GitHub's REST shape (number, title, body, labels, state)."""

    kind: Literal["github_issues"]
    path: str = Field(min_length=1)
    """The JSON file (relative to the sources file)."""


class GitHubSource(_SourceBase):
    """A repository's open issues, read live through GitHub's REST API on every triage.

    The token is the worker's: ``token_env`` names the variable that holds it (never the
    token itself), and ``GITHUB_API_URL`` (default ``https://api.github.com``) the API.
    Pull requests are not work; an issue's title and body become the goal, never
    configuration. Each page's ETag is kept in ``LOOP_HOME/triage/`` so a poll of a
    repository that did not change is answered ``304 Not Modified``, which costs no rate
    limit; a rate-limited answer makes the discover activity retry at the reset time.
    """

    kind: Literal["github"]
    repo: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
    """The repository, ``owner/name``."""
    token_env: str = Field(default="GITHUB_TOKEN", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """The worker's environment variable that holds the token (read access to issues)."""
    approve_on_review: bool = False
    """Whether an approving review on a task's pull request, by someone who may write,
    is the approval of a task awaiting one. Off by default: a person merging the pull
    request on GitHub is the approval, and a review is only feedback."""
    ci_checks: list[str] = Field(default_factory=list, max_length=50)
    """The check runs on the template's base branch that must pass (``check_run`` names,
    as a ``github_checks`` gate's ``required``): a ``check_suite``, ``check_run`` or
    ``workflow_run`` delivery completed on base, after which one of them has failed on
    that commit, opens one CI-regression task for the commit. Empty: none is opened."""


class CiSource(_SourceBase):
    """A command that must pass on the base branch; when it fails, a regression-repair task."""

    kind: Literal["ci"]
    run: str = Field(min_length=1)
    """Shell command, run in a temporary worktree of the template's base."""
    timeout: int = Field(default=600, ge=1, le=86_400)
    """Seconds the command may take; one that times out counts as failing."""

    @field_validator("run")
    @classmethod
    def _run_has_text(cls, run: str) -> str:
        if not run.strip():
            raise ValueError("'run' must be a non-empty shell command")
        return run


class TodoSource(_SourceBase):
    """TODO/FIXME markers in the base branch; each is a task when its text matches."""

    kind: Literal["todo"]
    pattern: str = Field(min_length=1)
    """Python regular expression searched in the marker's text (from the marker to the end
    of its line), e.g. ``TODO\\(loop\\)``."""
    markers: list[str] = Field(default_factory=lambda: ["TODO", "FIXME"], min_length=1)
    """The words that start a marker."""
    paths: list[str] = Field(default_factory=list)
    """Globs (``**`` allowed) of the files to scan; empty: every tracked text file."""

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as e:
            raise ValueError(f"not a regular expression: {e}") from None
        return pattern

    @field_validator("markers")
    @classmethod
    def _words(cls, markers: list[str]) -> list[str]:
        for m in markers:
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", m):
                raise ValueError(f"marker {m!r} must be a word such as TODO or FIXME")
        return markers


class WebhookSource(_SourceBase):
    """Items a tracker or an alert sends to ``loop ui``'s ``POST /hooks/tasks`` (with this
    source's name in the body); triage polls nothing of it."""

    kind: Literal["webhook"]


Source = Annotated[
    IssueFilesSource | GitHubIssuesSource | GitHubSource | CiSource | TodoSource | WebhookSource,
    Field(discriminator="kind"),
]


class TriagePolicy(_TaskFileModel):
    """What is worth doing, beyond each source's label filter."""

    max_running: int = Field(default=3, ge=0)
    """Cap on open tasks on the task queue (waiting ones included), new ones counted."""
    max_new: int = Field(default=10, ge=0)
    """Tasks one triage run starts at most."""
    cooldown: int = Field(default=86_400, ge=0)
    """Seconds after an item's task ended before triage starts another for it."""
    retry_done: bool = False
    """Whether an item whose task ended DONE_WITH_EVIDENCE gets a new task after the
    cool-down (by default done is done)."""


class TriageSources(_TaskFileModel):
    """The SOURCES.yaml file. Unknown keys are errors, as in task files."""

    template: dict[str, object] = Field(default_factory=dict)
    """Task-file fields shared by every source (each source's template goes over it)."""
    policy: TriagePolicy = Field(default_factory=TriagePolicy)
    """What is worth starting, across sources."""
    sources: list[Source] = Field(min_length=1)
    """Where work is found; each has a ``kind`` and a unique ``name``."""

    @field_validator("template")
    @classmethod
    def _template(cls, template: dict[str, object]) -> dict[str, object]:
        return _template_keys(template)

    @field_validator("sources")
    @classmethod
    def _unique_names(cls, sources: list[_SourceBase]) -> list[_SourceBase]:
        seen: set[str] = set()
        for s in sources:
            if s.name in seen:
                raise ValueError(f"source name {s.name!r} appears twice")
            seen.add(s.name)
        return sources


class TriageInput(_Record):
    sources: TriageSources
    """Loaded: every source's template complete, paths absolute."""
    dry_run: bool = False
    """Decide and report, start nothing."""
    sources_file: str = ""
    """Where the sources came from (for people; never read by the workflow)."""


class TriageItem(_Record):
    """One piece of possible work a source found."""

    source: str
    key: str
    """The item within its source: an issue id or number, ``regression``, a marker's hash."""
    task_id: str
    title: str = ""
    labels: list[str] = Field(default_factory=list)
    spec: TaskSpec | None = None
    """The task it would be (template + the item's own fields); None when skipped."""
    skip_reason: str = ""
    """Set when discovery already knows it is not work: closed, no match, invalid."""
    note: str = ""
    """What discovery changed of what the item asked (a budget capped at the source's)."""
    former_id: str = ""
    """The id its task had before task ids named the repository (``gh-42``): a task still
    open under it is this item's."""


class DiscoverInput(_Record):
    source: Source


class DiscoverResult(_Record):
    source: str
    items: list[TriageItem] = Field(default_factory=list)
    dropped: int = 0
    """Items past ``max_items``, counted and not listed."""
    note: str = ""
    """What the source saw, in a line (``make test passes on main``)."""


class ExistingTask(_Record):
    """What Temporal knows of an item's workflow ``task-<id>`` (its latest run)."""

    task_id: str
    status: str
    """The execution status: RUNNING, COMPLETED, FAILED, TERMINATED, CANCELED, TIMED_OUT."""
    state: str = ""
    """The task's LoopState (its terminal state once it has ended)."""
    closed_at: datetime | None = None


class LookupInput(_Record):
    task_ids: list[str]
    task_queue: str
    former: dict[str, str] = Field(default_factory=dict)
    """A task id to the id its item's task had before (``TriageItem.former_id``): where
    there is no task under the id, an open one under the former id is reported as it."""


class LookupResult(_Record):
    tasks: dict[str, ExistingTask] = Field(default_factory=dict)
    """By task id; ids with no workflow are absent."""
    open_tasks: int = 0
    """TaskWorkflows open on the task queue (running or waiting on a person)."""


TriageAction = Literal["start", "started", "skip"]


class TriageDecision(_Record):
    """One line of the triage table."""

    task_id: str
    source: str
    item: str
    title: str = ""
    action: TriageAction
    """``start``: would start (dry run); ``started``; ``skip``."""
    reason: str = ""
    autonomy: Autonomy | None = None

    @property
    def workflow_id(self) -> str:
        return workflow_id_for(self.task_id)


class TriageResult(_Record):
    dry_run: bool = False
    sources_file: str = ""
    decisions: list[TriageDecision] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    """One line per source: what it saw, how many items it dropped past max_items."""
    errors: list[str] = Field(default_factory=list)
    """Sources that could not be read (``name: why``); the others were still triaged."""
    open_tasks: int = 0
    misconfigured: list[str] = Field(default_factory=list)
    """The names of the sources among ``errors`` that a person must fix first (the sources
    file or the worker's environment: a token not set or refused, a repository not found)."""

    def count(self, action: TriageAction) -> int:
        return sum(1 for d in self.decisions if d.action == action)
