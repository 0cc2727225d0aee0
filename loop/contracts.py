"""The public contracts of Loopwork: task file, wire names, payloads, results.

Everything that crosses a process boundary (CLI -> server -> worker, workflow ->
activity, person -> workflow) is one of the pydantic models below, sent through
``temporalio.contrib.pydantic.pydantic_data_converter``. Workflows import only
this module (and the pure helpers next to it), so nothing here performs I/O.

Two strictness levels, on purpose: task files refuse unknown keys (a typo in a
budget must not silently mean "no budget"), signal payloads ignore them (so a
hand-typed ``temporal workflow signal --input`` with an extra field still works).

New fields go last and carry defaults, so recorded histories still decode.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from temporalio.common import SearchAttributeKey

TASK_ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
GATE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
MAX_GOAL_CHARS = 20_000
OUTPUT_TAIL_CHARS = 4_000


def workflow_id_for(task_id: str) -> str:
    """The one place that maps a task id to its workflow id (DESIGN: ``task-<id>``)."""
    return f"task-{task_id}"


def branch_for(task_id: str) -> str:
    return f"loop/{task_id}"


class _TaskFileModel(BaseModel):
    """Base of the task-file models: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


class _Payload(BaseModel):
    """Base of signal payloads: unknown keys are ignored."""

    model_config = ConfigDict(extra="ignore")


class _Record(BaseModel):
    """Base of results and records produced by Loopwork itself."""

    model_config = ConfigDict(extra="ignore")


# --------------------------------------------------------------------------- task file


class Autonomy(StrEnum):
    """What the loop may do with a verified result."""

    REPORT = "report"
    ASSISTED = "assisted"
    UNATTENDED = "unattended"


class ToolPolicy(_TaskFileModel):
    """What the model loop's tools may do (openai backend)."""

    run_allow: list[str] | None = None
    """First words of commands the ``run`` tool may start (None: any not denied)."""
    run_deny: list[str] = Field(default_factory=list)
    """First words of commands the ``run`` tool refuses."""
    run_timeout: int = Field(default=120, ge=1, le=3_600)
    """Seconds one ``run`` tool call may take."""
    output_limit: int = Field(default=16_384, ge=256, le=1_000_000)
    """Characters of a tool's output shown to the model; the rest is cut, with a note."""


class AgentSpec(_TaskFileModel):
    backend: Literal["command", "openai"] = "command"
    """``command`` runs an external agent CLI in the worktree; ``openai`` drives a model."""
    command: list[str] | None = None
    """argv of the agent (command backend), run with cwd = the worktree."""
    model: str | None = None
    """Model name (openai backend)."""
    max_steps: int = Field(default=40, ge=1, le=10_000)
    """Model turns per attempt (openai backend)."""
    timeout: int = Field(default=900, ge=1, le=7 * 86_400)
    """Seconds one attempt may take before the agent is stopped."""
    base_url: str | None = None
    """OpenAI-compatible endpoint (openai backend); default OPENAI_BASE_URL, else OpenAI."""
    tools: ToolPolicy = Field(default_factory=ToolPolicy)
    max_tokens_per_call: int = Field(default=4_096, ge=16, le=1_000_000)
    """Upper bound of one model call's output tokens (lowered to what the budget has left)."""

    @model_validator(mode="after")
    def _backend_needs(self) -> AgentSpec:
        if self.backend == "command":
            if not self.command or not all(isinstance(a, str) and a for a in self.command):
                raise ValueError("the command backend needs a non-empty 'command' argv list")
        if self.backend == "openai" and not self.model:
            raise ValueError("the openai backend needs 'model' (e.g. gpt-4o-mini)")
        return self


class DiffScope(_TaskFileModel):
    allow: list[str] = Field(default_factory=lambda: ["**"])
    """Globs (gitignore style) the agent may change; others are a recoverable failure."""
    protect: list[str] = Field(default_factory=list)
    """Globs the agent must not change; touching one is a policy violation (BLOCKED)."""

    @field_validator("allow", "protect")
    @classmethod
    def _no_empty_globs(cls, globs: list[str]) -> list[str]:
        for g in globs:
            if not g.strip():
                raise ValueError("globs must not be empty strings")
            if g.startswith("/") or ".." in g.split("/"):
                raise ValueError(f"glob {g!r} must be relative to the repository root")
        return globs


class LlmReview(_TaskFileModel):
    """A checker in a fresh context: goal, rubric, diff and the other gates' evidence."""

    rubric: str = Field(min_length=1)
    model: str | None = None
    """Default: the agent's model."""
    base_url: str | None = None
    """Default: the agent's endpoint, else OPENAI_BASE_URL."""


GateKind = Literal["run", "diff_scope", "no_removed_tests", "contains", "llm_review"]


class Gate(_TaskFileModel):
    """One check in the task's ``verify`` list; exactly one kind per gate."""

    name: str = Field(pattern=GATE_NAME_PATTERN)
    run: str | None = None
    """Shell command in the worktree; passes on exit 0."""
    timeout: int = Field(default=300, ge=1, le=86_400)
    """Seconds a ``run`` gate may take."""
    diff_scope: DiffScope | None = None
    no_removed_tests: bool | None = None
    """Fails if a test function or file present at base is gone or newly skipped."""
    contains: list[str] | None = None
    """Strings the agent's final answer must contain."""
    llm_review: LlmReview | None = None

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> Gate:
        kinds = [
            k
            for k in ("run", "diff_scope", "no_removed_tests", "contains", "llm_review")
            if getattr(self, k) not in (None, False)
        ]
        if len(kinds) != 1:
            found = ", ".join(kinds) or "none"
            raise ValueError(
                "a gate needs exactly one of run, diff_scope, no_removed_tests, contains, "
                f"llm_review (found: {found})"
            )
        if self.run is not None and not self.run.strip():
            raise ValueError("'run' must be a non-empty shell command")
        if self.contains is not None and not [s for s in self.contains if s]:
            raise ValueError("'contains' needs at least one non-empty string")
        return self

    @property
    def kind(self) -> GateKind:
        for k in ("run", "diff_scope", "no_removed_tests", "contains"):
            if getattr(self, k) not in (None, False):
                return k  # type: ignore[return-value]
        return "llm_review"


class Budget(_TaskFileModel):
    """Limits enforced by workflow code, never by the prompt."""

    max_attempts: int = Field(default=3, ge=1, le=1_000)
    max_seconds: int | None = Field(default=None, ge=1)
    """Wall clock for the task, excluding time spent waiting on a person."""
    max_tokens: int | None = Field(default=None, ge=1)
    max_cost_usd: float | None = Field(default=None, gt=0)
    max_tool_calls: int | None = Field(default=None, ge=1)
    max_stalled_attempts: int = Field(default=2, ge=1, le=1_000)
    """Consecutive attempts with the same failure fingerprint before escalating."""


class SandboxLimits(_TaskFileModel):
    """Resource limits of everything the sandbox runs (agent, ``run`` tool, ``run`` gates)."""

    processes: int = Field(default=1_024, ge=8, le=1_000_000)
    """Processes and threads of the task's uid at once (a fork bomb stops here)."""
    memory_mb: int = Field(default=4_096, ge=16, le=1_048_576)
    """Memory of the whole run (a memory cgroup), else the address space of each process."""
    cpu_seconds: int = Field(default=3_600, ge=1, le=7 * 86_400)
    """CPU seconds per process."""
    file_size_mb: int = Field(default=1_024, ge=1, le=1_048_576)
    """Largest file a process may write."""
    open_files: int = Field(default=4_096, ge=16, le=1_048_576)
    tmp_mb: int = Field(default=1_024, ge=1, le=1_048_576)
    """Size of the private /tmp."""
    disk_mb: int = Field(default=1_024, ge=1, le=1_048_576)
    """How much the worktree may grow in one attempt; checked before anything reaches git."""


Network = Literal["proxy", "none", "host"]
HOST_PATTERN = re.compile(
    r"^(?:\*\.)?[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*(?::[0-9]{1,5})?$"
)
"""A host name, ``*.domain``, each with an optional ``:port``."""
RESERVED_ENV_PREFIXES = ("LOOP_", "TEMPORAL_")
"""The worker's own configuration and Temporal credentials: never passed into a sandbox."""


def _allow_entry(entry: str) -> str:
    """``host``, ``host:port``, ``*.domain[:port]``, ``ip:port`` or ``[v6]:port``."""
    text = entry.strip().lower()
    if text.startswith("["):
        host, bracket, port = text[1:].partition("]:")
        if not bracket:
            raise ValueError(f"allow_hosts entry {entry!r}: write an IPv6 address as [addr]:port")
    elif text.count(":") > 1:
        raise ValueError(f"allow_hosts entry {entry!r}: write an IPv6 address as [addr]:port")
    else:
        host, _, port = text.partition(":")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"allow_hosts entry {entry!r}: {port!r} is not a port")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not HOST_PATTERN.match(f"{host}:{port}" if port else host):
            raise ValueError(
                f"allow_hosts entry {entry!r} is not a host, host:port, *.domain or ip:port"
            ) from None
        return text
    if not port:
        raise ValueError(f"allow_hosts entry {entry!r}: an address needs its port (ip:port)")
    return text


class SandboxPolicy(_TaskFileModel):
    """How agents, the ``run`` tool and ``run`` gates are confined (README, "Sandbox")."""

    mode: Literal["strict", "basic", "off"] = "basic"
    """``strict``: bubblewrap, read-only host; ``basic``: the task's own uid, network and
    private /tmp, without bubblewrap; ``off``: the worker's user, environment and network
    (only with ``autonomy: report`` or ``allow_unsafe_off``)."""
    network: Network = "proxy"
    """The agent and the ``run`` tool: ``proxy`` (HTTP(S) to ``allow_hosts`` only),
    ``none``, or ``host`` (needs ``allow_unsafe_host_network``)."""
    gate_network: Network = "none"
    """``run`` gates: ``none`` by default."""
    allow_hosts: list[str] = Field(default_factory=list)
    """What the egress proxy lets through: ``host`` (ports 80 and 443), ``host:port``,
    ``*.domain[:port]``, and ``ip:port`` (the only way to a private or loopback address)."""
    env: list[str] = Field(default_factory=list)
    """Names of worker variables passed through, beyond PATH, LANG, TERM, TZ and the LOOP_*."""
    readonly: list[str] = Field(default_factory=list)
    """Host paths made visible read-only (toolchains under a home folder)."""
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    allow_unsafe_off: bool = False
    allow_unsafe_host_network: bool = False
    """``network: host`` shares the worker's network: its loopback services (the Temporal
    frontend, UI, codec server, metrics) become reachable from the sandbox."""

    @field_validator("env")
    @classmethod
    def _env_names(cls, names: list[str]) -> list[str]:
        for n in names:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n):
                raise ValueError(f"{n!r} is not an environment variable name")
            if n.upper().startswith(RESERVED_ENV_PREFIXES):
                raise ValueError(
                    f"{n!r} is the worker's own configuration or Temporal credentials; "
                    "LOOP_* and TEMPORAL_* never enter a sandbox"
                )
        return names

    @field_validator("readonly")
    @classmethod
    def _absolute(cls, paths: list[str]) -> list[str]:
        for p in paths:
            if not p.startswith(("/", "~")):
                raise ValueError(f"readonly path {p!r} must be absolute (or start with ~)")
        return paths

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, entries: list[str]) -> list[str]:
        return [_allow_entry(e) for e in entries]

    @model_validator(mode="after")
    def _host_network_needs_consent(self) -> SandboxPolicy:
        if self.mode != "off" and not self.allow_unsafe_host_network:
            for key in ("network", "gate_network"):
                if getattr(self, key) == "host":
                    raise ValueError(
                        f"sandbox.{key}: host shares the worker's network, so the Temporal "
                        "frontend, UI, codec server and metrics on its loopback become "
                        "reachable; use proxy with allow_hosts, or set "
                        "sandbox.allow_unsafe_host_network: true"
                    )
        return self


class TaskSpec(_TaskFileModel):
    """A task file, validated. ``repo`` is absolute once the CLI has resolved it."""

    id: str = Field(pattern=TASK_ID_PATTERN)
    goal: str = Field(min_length=1, max_length=MAX_GOAL_CHARS)
    repo: str = Field(min_length=1)
    base: str | None = None
    """Branch or commit to start from; the CLI fills in the repo's current branch."""
    agent: AgentSpec
    verify: list[Gate] = Field(min_length=1)
    budget: Budget = Field(default_factory=Budget)
    autonomy: Autonomy = Autonomy.REPORT
    approval_timeout: int = Field(default=86_400, ge=1)
    """Seconds a task waiting on a person waits for a signal."""
    instructions: str = Field(default="", max_length=MAX_GOAL_CHARS)
    """Guidance for the agent shown after the goal (an eval harness's prompt additions)."""
    sandbox: SandboxPolicy = Field(default_factory=SandboxPolicy)
    """How the agent, the ``run`` tool and ``run`` gates are confined."""

    @model_validator(mode="after")
    def _off_needs_consent(self) -> TaskSpec:
        sandbox = self.sandbox
        if sandbox.mode == "off" and self.autonomy != Autonomy.REPORT:
            if not sandbox.allow_unsafe_off:
                raise ValueError(
                    "sandbox.mode: off runs the agent as the worker's user; it is allowed "
                    "with autonomy: report, or with sandbox.allow_unsafe_off: true"
                )
        return self

    @field_validator("goal")
    @classmethod
    def _goal_has_text(cls, goal: str) -> str:
        if not goal.strip():
            raise ValueError("goal must say what must be true when done")
        return goal

    @field_validator("verify")
    @classmethod
    def _unique_gate_names(cls, gates: list[Gate]) -> list[Gate]:
        seen: set[str] = set()
        for g in gates:
            if g.name in seen:
                raise ValueError(f"gate name {g.name!r} appears twice")
            seen.add(g.name)
        return gates

    def protected_paths(self) -> list[str]:
        return [p for g in self.verify if g.diff_scope for p in g.diff_scope.protect]


# --------------------------------------------------------------------------- states


class TaskState(StrEnum):
    RUNNING = "RUNNING"
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    NEEDS_HUMAN = "NEEDS_HUMAN"
    DONE_WITH_EVIDENCE = "DONE_WITH_EVIDENCE"
    BLOCKED = "BLOCKED"
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    REJECTED = "REJECTED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self not in (TaskState.RUNNING, TaskState.AWAITING_APPROVAL)

    @property
    def waiting(self) -> bool:
        return self in (TaskState.AWAITING_APPROVAL, TaskState.NEEDS_HUMAN)


class Phase(StrEnum):
    EXPLORE = "explore"
    MAKE = "make"
    VERIFY = "verify"
    FINALIZE = "finalize"
    SUMMARIZE = "summarize"


class FinalAction(StrEnum):
    NONE = "none"
    LEFT_IN_WORKTREE = "left_in_worktree"
    BRANCH_READY = "branch_ready"
    MERGED = "merged"


# --------------------------------------------------------------------------- evidence


class Evidence(_Record):
    """What a gate (or the agent run) saw."""

    exit_code: int | None = None
    output_tail: str = ""
    files: list[str] = Field(default_factory=list)
    detail: str = ""
    duration_s: float = 0.0


class GateResult(_Record):
    name: str
    kind: str
    passed: bool
    policy_violation: bool = False
    """True when failing this gate is a policy violation (BLOCKED), not a recoverable failure."""
    evidence: Evidence = Field(default_factory=Evidence)
    requirement: str = ""
    """What the gate demands, in words the agent can act on."""
    uncertain: bool = False
    """The checker could not decide (an LLM review that did not validate): escalate."""


class Verdict(_Record):
    passed: bool
    gates: list[GateResult] = Field(default_factory=list)
    artifact: str = ""
    """The commit the gates ran on (the latest state of the worktree)."""
    gates_changed_worktree: list[str] = Field(default_factory=list)
    """Files the gates themselves changed; reset before the next attempt. (Gates now run on
    a checkout of their own, so this stays empty; kept so old histories decode.)"""
    ignored_files: list[str] = Field(default_factory=list)
    """Files the agent made that git ignores: never part of the artifact the gates judged."""

    @property
    def failed(self) -> list[GateResult]:
        return [g for g in self.gates if not g.passed]

    @property
    def policy_violations(self) -> list[GateResult]:
        return [g for g in self.gates if not g.passed and g.policy_violation]

    def summary(self) -> str:
        if not self.gates:
            return "no gates ran"
        return ", ".join(f"{g.name} {'pass' if g.passed else 'FAIL'}" for g in self.gates)


class FailedRequirement(_Record):
    gate: str
    requirement: str
    evidence: Evidence
    required_correction: str


class Feedback(_Record):
    """A failed verdict turned into structured input for the next attempt."""

    after_attempt: int
    previous_output: str = ""
    failed: list[FailedRequirement] = Field(default_factory=list)
    passing: list[str] = Field(default_factory=list)
    human_feedback: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------- activities I/O


class PrepareInput(_Record):
    task_id: str
    repo: str
    base: str | None = None
    run_id: str
    """The workflow run that owns the worktree; a new run resets a clean leftover."""


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


class ExploreInput(_Record):
    task: TaskSpec
    workspace: Workspace


class ExploreResult(_Record):
    brief: str
    """Bounded read-only brief: file map and the reproducer's evidence."""
    brief_path: str
    files: int
    reproducer: Verdict


class PromptParts(_Record):
    goal: str
    brief: str = ""
    gates: list[str] = Field(default_factory=list)
    feedback: Feedback | None = None
    human_feedback: list[str] = Field(default_factory=list)
    backend: Literal["command", "openai"] = "command"
    """Which protocol the prompt explains: LOOP_OUTPUT_FILE, or the finish tool."""
    instructions: str = ""


class MakeInput(_Record):
    task: TaskSpec
    workspace: Workspace
    attempt: int
    prompt: PromptParts


class MakeResult(_Record):
    attempt: int
    exit_code: int | None = None
    timed_out: bool = False
    output_tail: str = ""
    claim: str = ""
    """The final answer (LOOP_OUTPUT_FILE, else the stdout tail): recorded, never trusted."""
    claim_path: str = ""
    start_commit: str = ""
    commit: str = ""
    """Work-in-progress commit at the end of the attempt: the artifact that verify checks."""
    changed_files: list[str] = Field(default_factory=list)
    """Files the attempt's commit changes against base."""
    outside_writes: list[str] = Field(default_factory=list)
    """Paths the agent changed outside its worktree (a policy violation)."""
    duration_s: float = 0.0
    log_path: str = ""
    tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    sandbox_level: str = ""
    """How the attempt's commands were confined, e.g. ``strict uid=123456 net=proxy``
    (``activities.sandbox``); the host's level is in ``host=``."""
    ignored_files: list[str] = Field(default_factory=list)
    """Files the agent made that git ignores: not committed, so not judged."""
    disk_exceeded: str = ""
    """Set when the worktree grew past ``sandbox.limits.disk_mb``: nothing was committed."""
    network_refused: list[str] = Field(default_factory=list)
    """Destinations the egress proxy refused the agent."""
    not_started: str = ""
    """Why the agent's command never ran (missing, not executable)."""


class VerifyInput(_Record):
    task: TaskSpec
    workspace: Workspace
    attempt: int
    make: MakeResult


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


# --------------------------------------------------------------------------- the model loop


class AgentLimits(_Record):
    """What this attempt may still spend (None: no limit)."""

    tokens: int | None = None
    cost_usd: float | None = None
    tool_calls: int | None = None


class AgentInput(_Record):
    """AgentWorkflow's input; ``step`` and ``usage`` carry over a continue-as-new."""

    task: TaskSpec
    workspace: Workspace
    attempt: int
    limits: AgentLimits = Field(default_factory=AgentLimits)
    step: int = 0
    usage: Usage = Field(default_factory=lambda: Usage())


class AgentResult(_Record):
    ended: Literal["finish", "no_tool_calls", "max_steps", "budget", "policy_violation", "timeout"]
    reason: str = ""
    answer: str = ""
    steps: int = 0
    usage: Usage = Field(default_factory=lambda: Usage())
    policy_violation: str = ""
    attempt_dir: str = ""


class ToolCallRef(_Record):
    """One tool call of a model step; its arguments stay in the step's artifact file."""

    index: int
    id: str
    name: str


class ModelStepInput(_Record):
    task_id: str
    attempt: int
    step: int
    attempt_dir: str
    """Holds prompt.md and the step artifacts the conversation is rebuilt from."""
    model: str
    base_url: str | None = None
    max_tokens: int
    """This call's output cap: the agent's per-call limit, lowered to the budget left."""


class ModelStepResult(_Record):
    step: int
    tool_calls: list[ToolCallRef] = Field(default_factory=list)
    content: str = ""
    """The assistant's text, cut to a preview (the whole is in the artifact)."""
    finish_reason: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    artifact: str = ""
    artifact_sha256: str = ""


class ToolStepInput(_Record):
    task_id: str
    attempt: int
    step: int
    call: ToolCallRef
    attempt_dir: str
    workspace: Workspace
    policy: ToolPolicy
    protected: list[str] = Field(default_factory=list)
    sandbox: SandboxPolicy = Field(default_factory=SandboxPolicy)
    """The task's sandbox, for the ``run`` tool."""
    base_url: str | None = None
    """The agent's model endpoint: the egress proxy lets the ``run`` tool reach it."""


class ToolStepResult(_Record):
    name: str
    ok: bool
    error: str = ""
    policy_violation: str = ""
    """Set when the call tried to leave the worktree, touch .git or a protected path."""
    finished: bool = False
    answer: str = ""
    output_chars: int = 0
    artifact: str = ""


class AttemptStart(_Record):
    attempt_dir: str
    start_commit: str


class EndAttemptInput(_Record):
    task: TaskSpec
    workspace: Workspace
    attempt: int
    agent: AgentResult


class ReviewInput(_Record):
    task: TaskSpec
    workspace: Workspace
    attempt: int
    gate: Gate
    artifact: str
    """The commit under review."""
    evidence: list[GateResult] = Field(default_factory=list)
    """The other gates' results, which the reviewer may cite."""
    claim: str = ""


# --------------------------------------------------------------------------- period budget


class PeriodLimits(_Payload):
    """A repository's budget per UTC day, across all its tasks (None: no limit)."""

    cost_per_day: float | None = Field(default=None, ge=0)
    tokens_per_day: int | None = Field(default=None, ge=0)


class DaySpend(_Record):
    cost_usd: float = 0.0
    tokens: int = 0
    reserved_cost_usd: float = 0.0
    reserved_tokens: int = 0


class Reservation(_Record):
    day: str
    cost_usd: float | None = None
    tokens: int | None = None


class LedgerState(_Record):
    """Everything the ledger knows; carried whole across continue-as-new."""

    repo: str
    limits: PeriodLimits = Field(default_factory=PeriodLimits)
    days: dict[str, DaySpend] = Field(default_factory=dict)
    open: dict[str, Reservation] = Field(default_factory=dict)
    """Reservations not yet settled, by key (task id, run and attempt)."""
    settled: list[str] = Field(default_factory=list)
    """Recently settled keys, so a retried report is not counted twice."""


class ReserveRequest(_Payload):
    key: str
    day: str
    cost_usd: float | None = None
    """What the attempt may spend at most; None: whatever the day has left."""
    tokens: int | None = None


class ReserveReply(_Record):
    granted: bool
    reason: str = ""
    cost_usd: float | None = None
    """What the attempt may spend (None: unlimited)."""
    tokens: int | None = None


class UsageReport(_Payload):
    key: str
    cost_usd: float = 0.0
    tokens: int = 0


class ReserveBudgetInput(_Record):
    repo: str
    request: ReserveRequest


class ReportUsageInput(_Record):
    repo: str
    report: UsageReport


class ReportUsageResult(_Record):
    counted: bool


# --------------------------------------------------------------------------- trace and result


class Usage(_Record):
    tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0


class AttemptRecord(_Record):
    attempt: int
    make: MakeResult | None = None
    verdict: Verdict | None = None
    fingerprint: str = ""
    feedback: Feedback | None = None
    """The feedback this attempt was given (None on attempt 1)."""
    usage: Usage = Field(default_factory=Usage)


class TraceEvent(_Record):
    at: str
    kind: str
    detail: str = ""


class Escalation(_Record):
    at: str
    reason: str
    waiting_for: str
    resolved_by: str = ""


class TaskResult(_Record):
    """The workflow's result, the ``trace`` query, and ``LOOP_HOME/runs/<id>.json``."""

    task_id: str
    state: TaskState
    reason: str = ""
    attempts: list[AttemptRecord] = Field(default_factory=list)
    evidence: list[GateResult] = Field(default_factory=list)
    branch: str = ""
    commit: str = ""
    worktree: str = ""
    tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    execution_seconds: float = 0.0
    human_escalation: list[Escalation] = Field(default_factory=list)
    final_action: FinalAction = FinalAction.NONE
    spec_hash: str = ""
    events: list[TraceEvent] = Field(default_factory=list)
    explore_brief: str = ""
    trace_path: str = ""
    notes_path: str = ""


class SummarizeInput(_Record):
    result: TaskResult
    goal: str
    repo: str


class SummarizeResult(_Record):
    trace_path: str
    notes_path: str


# --------------------------------------------------------------------------- signals / queries


class ApproveSignal(_Payload):
    note: str = ""


class RejectSignal(_Payload):
    reason: str = ""


class FeedbackSignal(_Payload):
    text: str = Field(min_length=1)


class ExtendBudgetSignal(_Payload):
    attempts: int = Field(default=0, ge=0)
    seconds: int = Field(default=0, ge=0)
    tokens: int = Field(default=0, ge=0)
    cost_usd: float = Field(default=0.0, ge=0)


class BudgetFigures(_Record):
    attempts: int | None = None
    seconds: float | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    tool_calls: int | None = None


class BudgetStatus(_Record):
    used: BudgetFigures
    left: BudgetFigures


class TaskStatus(_Record):
    """The ``status`` query."""

    task_id: str
    state: TaskState
    phase: Phase | None = None
    attempt: int = 0
    waiting_for: str = ""
    reason: str = ""
    budget: BudgetStatus
    last_verdict: str = ""


# --------------------------------------------------------------------------- wire names

TASK_WORKFLOW = "TaskWorkflow"
AGENT_WORKFLOW = "AgentWorkflow"
LEDGER_WORKFLOW = "PeriodBudgetWorkflow"
UPDATE_RESERVE = "reserve"
UPDATE_REPORT = "report"
UPDATE_SET_LIMITS = "set_limits"
QUERY_LEDGER = "ledger"

SIGNAL_APPROVE = "approve"
SIGNAL_REJECT = "reject"
SIGNAL_FEEDBACK = "feedback"
SIGNAL_EXTEND_BUDGET = "extend_budget"
QUERY_STATUS = "status"
QUERY_TRACE = "trace"

WAITING_APPROVAL = "approve/reject"
WAITING_DECISION = "feedback/extend_budget/reject"

In = TypeVar("In", bound=BaseModel)
Out = TypeVar("Out", bound=BaseModel)


@dataclass(frozen=True)
class ActivityDef(Generic[In, Out]):
    """A typed activity stub: the pinned wire name with its one input and one result."""

    name: str
    input: type[In]
    output: type[Out]


PREPARE_WORKSPACE = ActivityDef("prepare_workspace", PrepareInput, Workspace)
EXPLORE = ActivityDef("explore", ExploreInput, ExploreResult)
MAKE = ActivityDef("make", MakeInput, MakeResult)
BEGIN_ATTEMPT = ActivityDef("begin_attempt", MakeInput, AttemptStart)
END_ATTEMPT = ActivityDef("end_attempt", EndAttemptInput, MakeResult)
MODEL_STEP = ActivityDef("model_step", ModelStepInput, ModelStepResult)
TOOL_STEP = ActivityDef("tool_step", ToolStepInput, ToolStepResult)
VERIFY = ActivityDef("verify", VerifyInput, Verdict)
REVIEW = ActivityDef("review", ReviewInput, GateResult)
COMMIT = ActivityDef("commit_branch", CommitInput, CommitResult)
MERGE = ActivityDef("merge", MergeInput, MergeResult)
REMOVE_WORKSPACE = ActivityDef("remove_workspace", RemoveInput, RemoveResult)
ESCALATE = ActivityDef("escalate", EscalateInput, EscalateResult)
RESERVE_BUDGET = ActivityDef("reserve_budget", ReserveBudgetInput, ReserveReply)
REPORT_USAGE = ActivityDef("report_usage", ReportUsageInput, ReportUsageResult)
SUMMARIZE = ActivityDef("summarize", SummarizeInput, SummarizeResult)

ALL_ACTIVITIES: tuple[ActivityDef, ...] = (
    PREPARE_WORKSPACE,
    EXPLORE,
    MAKE,
    BEGIN_ATTEMPT,
    END_ATTEMPT,
    MODEL_STEP,
    TOOL_STEP,
    VERIFY,
    REVIEW,
    COMMIT,
    MERGE,
    REMOVE_WORKSPACE,
    ESCALATE,
    RESERVE_BUDGET,
    REPORT_USAGE,
    SUMMARIZE,
)

# Search attributes (DESIGN: registered by the embedded server and by the worker).
SA_STATE = SearchAttributeKey.for_keyword("LoopState")
SA_ATTEMPTS = SearchAttributeKey.for_int("LoopAttempts")
SA_COST = SearchAttributeKey.for_float("LoopCostUSD")
SA_REPO = SearchAttributeKey.for_keyword("LoopRepo")
SEARCH_ATTRIBUTES = (SA_STATE, SA_ATTEMPTS, SA_COST, SA_REPO)


def ledger_id_for(repo: str) -> str:
    """One period-budget ledger per repository, found again from the repository's path."""
    return "budget-" + hashlib.sha1(repo.encode()).hexdigest()[:16]


def is_valid_task_id(task_id: str) -> bool:
    return re.fullmatch(TASK_ID_PATTERN, task_id) is not None


# --------------------------------------------------------------------------- harness evaluation

EVAL_WORKFLOW = "EvalWorkflow"
HARNESS_FORBIDDEN = ("verify", "gates", "rubric", "llm_review", "cases", "goal", "repo")


class Harness(_TaskFileModel):
    """What an eval compares: model, prompt additions, agent and budgets; never the checks."""

    name: str = Field(pattern=TASK_ID_PATTERN)
    agent: AgentSpec
    budget: Budget = Field(default_factory=Budget)
    instructions: str = ""
    """Prompt additions, shown to the agent after the goal."""

    @model_validator(mode="before")
    @classmethod
    def _no_checks(cls, data: object) -> object:
        if isinstance(data, dict):
            touched = sorted(k for k in data if k in HARNESS_FORBIDDEN)
            if touched:
                raise ValueError(
                    f"a harness may not change the gates, rubric or cases (found: "
                    f"{', '.join(touched)})"
                )
        return data


class EvalCase(_TaskFileModel):
    """A repository at a commit, a goal and fixed gates."""

    id: str = Field(pattern=TASK_ID_PATTERN)
    goal: str = Field(min_length=1, max_length=MAX_GOAL_CHARS)
    repo: str | None = None
    """A git repository (relative to the suite file); with ``commit``."""
    commit: str | None = None
    source: str | None = None
    """A plain folder snapshotted into a repository with a deterministic commit."""
    verify: list[Gate] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_origin(self) -> EvalCase:
        if (self.repo is None) == (self.source is None):
            raise ValueError("a case needs exactly one of repo (with commit) or source")
        if self.repo is not None and not self.commit:
            raise ValueError("a case with repo needs the commit it starts from")
        return self


class Suite(_TaskFileModel):
    name: str = Field(pattern=TASK_ID_PATTERN)
    cases: list[EvalCase] = Field(min_length=1)
    max_parallel: int = Field(default=4, ge=1, le=64)
    approval_timeout: int = Field(default=1, ge=1)
    """How long an escalated case waits before it counts as not accepted."""


class EvalInput(_Record):
    suite: Suite
    """Resolved: every case has an absolute repo and a commit."""
    harnesses: list[Harness] = Field(min_length=1)
    suite_hash: str
    run: str
    """Distinguishes this eval's task ids from earlier runs'."""


class CaseOutcome(_Record):
    harness: str
    case: str
    task_id: str
    state: TaskState
    accepted: bool
    attempts: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    escalations: int = 0
    seconds: float = 0.0


class HarnessSummary(_Record):
    harness: str
    cases: int
    accepted: int
    pass_rate: float
    mean_attempts: float
    tokens: int
    cost_usd: float
    cost_per_accepted: float | None
    """Total cost divided by accepted tasks; None when none was accepted."""
    escalations: int
    seconds: float


class Flip(_Record):
    case: str
    before: TaskState
    after: TaskState


class EvalReport(_Record):
    suite: str
    suite_hash: str
    run: str
    harnesses: list[HarnessSummary]
    outcomes: list[CaseOutcome]
    flipped: list[Flip] = Field(default_factory=list)
    """Cases accepted under one harness and not the other (first vs second)."""
    results_path: str = ""


class WriteEvalResult(_Record):
    path: str


WRITE_EVAL = ActivityDef("write_eval_results", EvalReport, WriteEvalResult)
EVAL_ACTIVITIES: tuple[ActivityDef, ...] = (WRITE_EVAL,)


# =========================================================================== triage
# The event loop's contracts (issue 5): the SOURCES.yaml file, TriageWorkflow's input
# and result, and its activities. Appended as one section; the models of the sources
# file live here, not in ``loop.triage``, because the workflow's input carries them
# (a schedule stores the parsed file in its action, so every run is in history).
from datetime import datetime  # noqa: E402  (appended section: its own imports)
from typing import Annotated  # noqa: E402

TRIAGE_WORKFLOW = "TriageWorkflow"
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


class CiSource(_SourceBase):
    """A command that must pass on the base branch; when it fails, a regression-repair task."""

    kind: Literal["ci"]
    run: str = Field(min_length=1)
    """Shell command, run in a temporary worktree of the template's base."""
    timeout: int = Field(default=600, ge=1, le=86_400)

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


Source = Annotated[
    IssueFilesSource | GitHubIssuesSource | CiSource | TodoSource, Field(discriminator="kind")
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
    sources: list[Source] = Field(min_length=1)

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

    def count(self, action: TriageAction) -> int:
        return sum(1 for d in self.decisions if d.action == action)


DISCOVER = ActivityDef("discover", DiscoverInput, DiscoverResult)
LOOKUP_TASKS = ActivityDef("lookup_tasks", LookupInput, LookupResult)
TRIAGE_ACTIVITIES: tuple[ActivityDef, ...] = (DISCOVER, LOOKUP_TASKS)
