"""The inputs and results of the task loop's activities."""

from typing import Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_serializer,
    model_serializer,
    model_validator,
)

from loop.contracts.base import _Record
from loop.contracts.environment import BuiltEnvironment
from loop.contracts.evidence import PREVIOUS_OUTPUT_CHARS, Feedback, Verdict
from loop.contracts.states import TaskState
from loop.contracts.step_context import _StepInput, read_evidence, read_made, read_quote
from loop.contracts.task import TaskSpec


class Workspace(_Record):
    task_id: str
    repo: str
    """Top level of the main repository (absolute)."""
    path: str
    """The task's worktree (absolute)."""
    branch: str
    base_ref: str
    """Branch name of base, or the commit when base is not a branch."""
    base_commit: str
    run_dir: str
    """``LOOP_HOME/runs/<id>/``: prompts, logs, agent output, outside the worktree."""
    base_is_branch: bool = True
    byproducts: list[str] = Field(default_factory=list)
    """Globs never committed nor counted as changes: the agent's history and caches."""
    remote: str = ""
    """The repository's URL when it lives elsewhere (``repo`` is then this host's mirror);
    "" for a local path."""
    host: str = ""
    """The host that holds the worktree ("" in histories from before hosts)."""
    host_queue: str = ""
    """Where every step that touches the worktree runs ("": the workflow's own queue)."""
    host_lost_after: float = 0.0
    """Seconds a step may wait for that host before the task asks whether it is alive."""
    isolated: bool = False
    """The task works in a clone of its own (``path``) whose objects come from ``store``,
    a read-only store of base history: no other task's branch or commit is in what its
    sandbox can read. False in histories from before: a worktree of ``repo``."""
    store: str = ""
    """The base store's objects folder (the clone's alternates)."""
    environment: BuiltEnvironment | None = None
    """The repository's environment on this host, laid read-only into each sandboxed run
    in the worktree and in the gates' checkouts (None: the task has none)."""
    covered: list[str] = Field(default_factory=list)
    """Folders of this host no run of the task may see (the hidden tests it is judged by)."""

    @property
    def commits(self) -> str:
        """The repository that holds the task's commits: its clone, or the shared one."""
        return self.path if self.isolated else self.repo


class PrepareInput(_Record):
    task_id: str
    repo: str
    base: str | None = None
    run_id: str
    """The workflow run that owns the worktree; a new run resets a clean leftover."""
    byproducts: list[str] = Field(default_factory=list)
    """The agent's byproduct globs (``agent.ignore``)."""
    moved_from: Workspace | None = None
    """The workspace on a host that was lost: prepare this one from its pushed branch."""
    covered: list[str] = Field(default_factory=list)
    """Folders no run of the task may see: its ``hidden_tests`` folders."""


ENDPOINT_PREFLIGHT_S = 60
"""How long explore waits for an unreachable model endpoint before the task ends BLOCKED."""


class ExploreInput(_StepInput):
    task: TaskSpec
    workspace: Workspace


class ExploreResult(_Record):
    brief: str
    """Bounded read-only brief: file map and the reproducer's evidence."""
    brief_path: str
    files: int
    reproducer: Verdict
    context: str = ""
    """Where explore kept the task file and workspace on its host (``MakeInput.context``)."""


class PrepareExploreInput(_StepInput):
    """A task's first step: its worktree made on the host that takes it, then explored
    there, in one activity (one workflow task and one dispatch fewer than two)."""

    prepare: PrepareInput
    task: TaskSpec


class Prepared(_Record):
    workspace: Workspace
    explored: ExploreResult


class PromptParts(_Record):
    goal: str = ""
    """Empty in a payload where ``from_task``: a worker before it refuses that payload (the
    field was required) rather than prompt without a goal."""
    brief: str = ""
    gates: list[str] = Field(default_factory=list)
    feedback: Feedback | None = None
    human_feedback: list[str] = Field(default_factory=list)
    backend: Literal["command", "openai"] = "command"
    """Which protocol the prompt explains: LOOP_OUTPUT_FILE, or the finish tool."""
    instructions: str = ""
    brief_path: str = ""
    """Where explore wrote the brief (the worker's own file): read there by the attempt, so
    history holds the brief once (explore's result), not once per attempt."""
    evidence_from: str = ""
    """Where the last verify kept its verdict on this host (``Verdict.kept``): the feedback's
    evidence of the gates in ``evidence_of`` is read there, so history holds it once (that
    verdict), not again in the next attempt's input."""
    evidence_of: list[str] = Field(default_factory=list)
    from_task: bool = False
    """``goal``, ``gates``, ``instructions`` and ``backend`` are left out: they are the task
    file's, which the activity has (``MakeInput.task``, kept on its host), and it fills
    them in, so history holds them once (the workflow's input)."""
    previous_from: str = ""
    """Where the last make kept its result on this host (``MakeResult.kept``): the
    feedback's ``previous_output`` is quoted from it there, so history holds the claim
    once (that result)."""
    previous_digest: str = ""
    """The ``digest`` of ``previous_output``: a kept result that no longer says it is
    refused."""

    @model_serializer(mode="wrap", when_used="json")
    def _kept_once(self, handler: SerializerFunctionWrapHandler) -> Any:
        sent = handler(self)
        feedback = sent.get("feedback")
        if self.evidence_from and feedback:
            for failed in feedback.get("failed", []):
                if failed["gate"] in self.evidence_of:
                    failed.pop("evidence", None)
        if self.previous_from and feedback:
            feedback.pop("previous_output", None)
        return sent

    @model_validator(mode="before")
    @classmethod
    def _read_kept(cls, data: Any) -> Any:
        # Only a payload the workflow sent leaves these out; models built here are whole.
        sent = data.get("feedback") if isinstance(data, dict) else None
        if not isinstance(sent, dict):
            return data
        if data.get("previous_from") and "previous_output" not in sent:
            quoted = read_quote(
                data["previous_from"], data.get("previous_digest", ""), PREVIOUS_OUTPUT_CHARS
            )
            sent = {**sent, "previous_output": quoted}
        failed = sent.get("failed", [])
        if data.get("evidence_from") and not all("evidence" in f for f in failed):
            kept = read_evidence(data["evidence_from"])
            sent = {**sent, "failed": [
                f if "evidence" in f else {**f, "evidence": kept[f["gate"]]} for f in failed
            ]}  # fmt: skip
        return {**data, "feedback": sent}


AGENT_TAIL_CHARS = 500
"""How much of what the agent printed its result holds: the last lines, what a person
glances at and ``loop.rules.explain`` reads the last line of. The log holds all of it, and
the claim (LOOP_OUTPUT_FILE, else the stdout's longer tail) is what the agent said."""


CHANGED_SHOWN = 1_000
"""Changed files a ``MakeResult`` lists; an attempt of 10,000 files lists the first ones."""


class SharedBudget(_Record):
    """A task's budget shared by its candidates (docs/concepts/candidates.md): each of
    their model calls is counted in one pool on the host, and none starts once the pool
    holds the task's limit, or once another candidate is chosen."""

    key: str
    """The pool: the task and its run (``LOOP_HOME/pools/<key>.jsonl`` on the host)."""
    member: str
    """The candidate whose calls these are."""
    tokens: int | None = None
    """The task's token limit, for all its candidates together (None: no limit)."""
    cost_usd: float | None = None


class AgentLimits(_Record):
    """What this attempt may still spend (None: no limit)."""

    tokens: int | None = None
    cost_usd: float | None = None
    tool_calls: int | None = None
    shared: SharedBudget | None = None
    """The task's budget its candidates share, where the attempt is a candidate's."""


CALLS_FILE = "calls.jsonl"
"""In an attempt's folder: its model calls as the gateway measured them (path, model,
status, tokens in and out, cost, milliseconds), one JSON object a line, appended by the
worker as each call ends, for every try of the attempt."""


class MakeInput(_StepInput):
    task: TaskSpec
    workspace: Workspace
    attempt: int
    prompt: PromptParts
    limits: AgentLimits | None = None
    """What the attempt may spend (the task's budget within the period's grant): the
    gateway stops a command agent's calls there (``agent.provider``)."""


class MakeResult(_Record):
    attempt: int
    exit_code: int | None = None
    timed_out: bool = False
    output_tail: str = ""
    """The end of what the agent printed (``AGENT_TAIL_CHARS``); all of it is at
    ``log_path``."""
    claim: str = ""
    """The final answer (LOOP_OUTPUT_FILE, else the stdout tail): recorded, never trusted."""
    claim_path: str = ""
    start_commit: str = ""
    commit: str = ""
    """Work-in-progress commit at the end of the attempt: the artifact that verify checks."""
    changed_files: list[str] = Field(default_factory=list)
    """Files the attempt's commit changes against base: the first ``CHANGED_SHOWN`` (history
    stays small; the gates read the whole list from git, see ``changed_count``)."""
    outside_writes: list[str] = Field(default_factory=list)
    """Paths the agent changed outside its worktree (a policy violation)."""
    duration_s: float = 0.0
    log_path: str = ""
    tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    sandbox_level: str = ""
    """How the attempt's commands were confined, e.g. ``strict uid=123456 net=proxy``
    (``activities.host.sandbox``); the host's level is in ``host=``."""
    ignored_files: list[str] = Field(default_factory=list)
    """Files the agent made that git ignores: not committed, so not judged."""
    disk_exceeded: str = ""
    """Set when the worktree grew past ``sandbox.limits.disk_mb``: nothing was committed."""
    network_refused: list[str] = Field(default_factory=list)
    """Destinations the egress proxy refused the agent."""
    not_started: str = ""
    """Why the agent's command never ran (missing, not executable)."""
    not_committed: str = ""
    """Set when git could not commit the attempt (a path or an attribute it refuses)."""
    removed: list[str] = Field(default_factory=list)
    """What could not be part of the artifact and was removed before the commit: FIFOs,
    sockets and device nodes, repositories nested in the worktree."""
    agent_error: str = ""
    """What the agent's own output says went wrong (its CLI may exit 0 regardless)."""
    agent_error_fatal: bool = False
    """The error is one no later attempt can fix: the key refused, the endpoint gone."""
    usage_reported: bool = False
    """Whether the agent reported what it spent (its CLI's output or LOOP_USAGE_FILE)."""
    tries: int = 1
    """How many times the step ran: more than one after a worker crash or a failed try
    (each retry resets the worktree to the attempt's start)."""
    protected_writes: list[str] = Field(default_factory=list)
    """Protected files the agent tried to write; the sandbox refused (a policy violation)."""
    changed_count: int = 0
    """How many files the commit changes (0 in histories from before: ``changed_files`` is
    all of them then)."""
    model_calls: int = 0
    """Calls the gateway forwarded for the agent (``agent.provider``); their tokens and
    cost are the attempt's, measured from the provider's answers."""
    metered: bool = False
    """The attempt's usage is the gateway's measurement, not the agent's report."""
    budget_spent: str = ""
    """Set when the gateway refused a call because the budget was spent mid-attempt."""
    gateway_refused: list[str] = Field(default_factory=list)
    """What the gateway refused the agent (another run's token, a path, a size)."""
    context: str = ""
    """The host's copy of the task file and workspace that make kept (``MakeInput.context``):
    the attempt's later steps there are sent its path instead (empty from workers before)."""
    changed_lines: int = 0
    """Lines the commit adds and removes against base (a binary file counts one): how a
    ``choose: best`` task ranks candidates that passed."""
    kept: str = ""
    """Where the step kept this result on its host (``MADE_FILE`` in the attempt folder):
    the attempt's later steps there are sent its path instead (empty from workers
    before)."""


class VerifyInput(_StepInput):
    task: TaskSpec
    workspace: Workspace
    attempt: int
    make: MakeResult
    environment: BuiltEnvironment | None = None
    """The attempt's own environment, where its commit changes the key files: its gates
    run with it instead of the workspace's (base's runs keep base's)."""
    make_from: str = ""
    """Where make kept its result on this host (``MakeResult.kept``): ``make`` is sent as
    its commit alone and read there, so history holds it once (make's result); a kept
    result of another attempt or commit is refused. (A worker before it refuses the
    payload, ``make.attempt`` missing, rather than judge an empty record.)"""

    @field_serializer("make", mode="wrap", when_used="json")
    def _make_once(self, value: MakeResult, handler: SerializerFunctionWrapHandler) -> Any:
        if self.make_from:
            return {"commit": value.commit}
        return value.model_dump(mode="json", exclude_defaults=True)

    @model_validator(mode="before")
    @classmethod
    def _read_make(cls, data: Any) -> Any:
        sent = data.get("make") if isinstance(data, dict) else None
        if not isinstance(sent, dict) or not data.get("make_from") or "attempt" in sent:
            return data
        made = read_made(data["make_from"], data.get("attempt"), sent.get("commit"))
        return {**data, "make": made}


class BuildEnvironmentInput(_StepInput):
    """Find or build the task's environment on its host, for base or an attempt's commit."""

    task: TaskSpec
    workspace: Workspace
    commit: str = ""
    """The commit whose key files it is built from ("": base)."""
    attempt: int = 0
    """The attempt whose commit changes the key files (0: base, whose setup must work)."""
    changed: list[str] = Field(default_factory=list)
    """The key files that attempt changed, for the record."""


class CommitInput(_Record):
    task: TaskSpec
    workspace: Workspace
    artifact: str
    """The verified work-in-progress commit."""
    message: str


class CommitResult(_Record):
    branch: str
    commit: str


class MergeInput(_Record):
    workspace: Workspace
    commit: str
    message: str


class PullRequestInput(_Record):
    workspace: Workspace
    commit: str
    title: str
    body: str
    github: str = ""
    """``owner/repo`` on GitHub ("" : read it from the remote's URL)."""


class PullRequestResult(_Record):
    path: str
    """``LOOP_HOME/runs/<id>/pull-request.md``: the title and body, whatever else happened."""
    pushed_to: str = ""
    """Where ``loop/<id>`` was pushed ("" : nowhere, the repository has no remote)."""
    url: str = ""
    """The pull request on GitHub ("" : not opened there)."""
    note: str = ""
    """Why it was not opened on GitHub, when it was not."""


class MergeResult(_Record):
    merged: bool
    commit: str = ""
    how: str = ""
    """``fast-forward``, ``merge-commit`` or ``already-merged``."""
    reason: str = ""
    """Why it could not merge (dirty base tree, conflict, base is a commit)."""


class RemoveInput(_Record):
    workspace: Workspace
    delete_branch: bool = False


class RemoveResult(_Record):
    removed: bool
    reason: str = ""


class EscalateInput(_Record):
    task_id: str
    goal: str
    state: TaskState
    reason: str
    waiting_for: str
    attempt: int
    last_verdict: str = ""


class EscalateResult(_Record):
    notified: list[str] = Field(default_factory=list)


class PingInput(_Record):
    host: str


class PingResult(_Record):
    host: str
    pid: int
