"""The task file: what a person asks for, validated (unknown keys are errors)."""

import ipaddress
import re
from enum import StrEnum
from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from loop.contracts.base import MAX_GOAL_CHARS, TASK_ID_PATTERN, _TaskFileModel, relative_globs
from loop.contracts.environment import DEFAULT_KEY_FILES, DEFAULT_PATHS
from loop.contracts.gates import DiffScopeGate, Gate, RegressionTestGate, RunGate


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


AGENT_BYPRODUCTS = (".aider*", ".claude", ".codex")
"""What the known agent CLIs leave in the worktree (history, caches, settings): never
committed. The CLIs' modules in ``loop.rules.clis`` say what; a test keeps this equal."""
UsageSource = Literal["auto", "file", "claude-code", "aider", "codex", "none"]
"""Where a command agent's usage is read: a known CLI's name (``loop.rules.clis``), the
usage file, or nowhere."""


ProviderApi = Literal["openai", "anthropic"]
PROVIDER_DEFAULTS: dict[str, tuple[str, str]] = {
    "openai": ("https://api.openai.com/v1", "OPENAI_API_KEY"),
    "anthropic": ("https://api.anthropic.com", "ANTHROPIC_API_KEY"),
}
"""Each api's real endpoint and the worker's variable holding its key, by default."""
PROVIDER_VARIABLES: dict[str, tuple[tuple[str, ...], str]] = {
    "openai": (("OPENAI_BASE_URL", "OPENAI_API_BASE"), "OPENAI_API_KEY"),
    "anthropic": (("ANTHROPIC_BASE_URL",), "ANTHROPIC_API_KEY"),
}
"""What a run with ``agent.provider`` finds in its environment: the endpoint variables
(pointing at the gateway) and the key variable (holding the run's own token)."""


class Provider(_TaskFileModel):
    """The model API the agent calls, through the worker's gateway: the key stays in the
    worker, the sandbox gets a token valid for one run (docs/concepts/gateway.md)."""

    api: ProviderApi
    """``openai`` (chat completions, responses) or ``anthropic`` (messages)."""
    base_url: str | None = Field(default=None, pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$")
    """The real endpoint, reached from the worker; default per api."""
    key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """The worker's variable holding the key (or ``<key_env>_FILE`` naming a file of it);
    default per api. It never enters the sandbox."""

    @property
    def upstream(self) -> str:
        return (self.base_url or PROVIDER_DEFAULTS[self.api][0]).rstrip("/")

    @property
    def key_variable(self) -> str:
        return self.key_env or PROVIDER_DEFAULTS[self.api][1]


class AgentSpec(_TaskFileModel):
    backend: Literal["command", "openai"] = "command"
    """``command`` runs an external agent CLI in the worktree; ``openai`` drives a model."""
    command: list[str] | None = None
    """argv of the agent (command backend), run with cwd = the worktree."""
    model: str | None = None
    """Model name (openai backend); for a command agent, the model its CLI uses, to price
    what it reports in tokens alone."""
    max_steps: int = Field(default=40, ge=1, le=10_000)
    """Model turns per attempt (openai backend)."""
    timeout: int = Field(default=900, ge=1, le=7 * 86_400)
    """Seconds one attempt may take before the agent is stopped."""
    base_url: str | None = None
    """OpenAI-compatible endpoint (openai backend); default OPENAI_BASE_URL, else OpenAI."""
    tools: ToolPolicy = Field(default_factory=ToolPolicy)
    """What the model loop's tools may do (openai backend)."""
    max_tokens_per_call: int = Field(default=4_096, ge=16, le=1_000_000)
    """Upper bound of one model call's output tokens (lowered to what the budget has left)."""
    usage: UsageSource = "auto"
    """Where a command agent's usage is read: ``auto`` knows Claude Code, aider and Codex
    by their command; ``file`` is ``LOOP_USAGE_FILE``; ``none`` reports nothing."""
    provider: Provider | None = None
    """The model API a command agent calls through the worker's gateway, which holds the
    key, meters every call and stops the agent when the budget is spent."""
    transcript: bool = False
    """With ``provider``: keep each model call's request and answer (redacted, 256 KiB of
    each) in the attempt's folder, shown on the review page with the calls."""
    ignore: list[str] = Field(default_factory=lambda: list(AGENT_BYPRODUCTS))
    """Globs of the agent's byproducts in the worktree (a folder covers its contents):
    never committed, never a change; ``[]`` commits everything."""

    @field_validator("ignore")
    @classmethod
    def _relative(cls, globs: list[str]) -> list[str]:
        return relative_globs(globs)

    @model_validator(mode="after")
    def _backend_needs(self) -> Self:
        if self.backend == "command":
            if not self.command or not all(isinstance(a, str) and a for a in self.command):
                raise ValueError("the command backend needs a non-empty 'command' argv list")
        if self.backend == "openai" and not self.model:
            raise ValueError("the openai backend needs 'model' (e.g. gpt-4o-mini)")
        if self.backend == "openai" and self.provider is not None:
            raise ValueError(
                "agent.provider is for command agents; the openai backend calls its model "
                "from the worker (agent.base_url)"
            )
        return self


class Budget(_TaskFileModel):
    """Limits enforced by workflow code, never by the prompt."""

    max_attempts: int = Field(default=3, ge=1, le=1_000)
    """Attempts before the task escalates to a person (NEEDS_HUMAN)."""
    max_seconds: int | None = Field(default=None, ge=1)
    """Wall clock for the task, excluding time spent waiting on a person."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Tokens across attempts (None: no limit); the agent must report usage."""
    max_cost_usd: float | None = Field(default=None, gt=0)
    """Dollars across attempts (None: no limit), priced from reported usage."""
    max_tool_calls: int | None = Field(default=None, ge=1)
    """Tool calls of the model loop across attempts (None: no limit; openai backend)."""
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
    """Open files per process."""
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


class SandboxLevel(StrEnum):
    """How far a task's commands are confined (docs/concepts/trust-boundary.md). What a
    run at each level may do is ``activities.host.sandbox.capabilities``."""

    STRICT = "strict"
    """bubblewrap namespaces over a read-only host, as the task's own uid."""
    BASIC = "basic"
    """The task's own uid, network and private /tmp, without bubblewrap."""
    OFF = "off"
    """No confinement: the worker's user, files and network."""


class SandboxPolicy(_TaskFileModel):
    """How agents, the ``run`` tool and ``run`` gates are confined."""

    mode: SandboxLevel = SandboxLevel.BASIC
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
    """Resource limits of everything the sandbox runs."""
    allow_unsafe_off: bool = False
    """Consent to ``mode: off`` with an autonomy other than ``report``."""
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
    def _host_network_needs_consent(self) -> Self:
        if self.mode != SandboxLevel.OFF and not self.allow_unsafe_host_network:
            for key in ("network", "gate_network"):
                if getattr(self, key) == "host":
                    raise ValueError(
                        f"sandbox.{key}: host shares the worker's network, so the Temporal "
                        "frontend, UI, codec server and metrics on its loopback become "
                        "reachable; use proxy with allow_hosts, or set "
                        "sandbox.allow_unsafe_host_network: true"
                    )
        return self


_PATH_PART = re.compile(r"[A-Za-z0-9_.@+-]+")


def _environment_path(path: str) -> str:
    """A folder the setup makes, relative to the tree, in plain words: no glob, no ``..``,
    not the tree itself, nothing of ``.git``."""
    parts = path.strip("/").split("/")
    if (
        not path
        or path.startswith("/")
        or any(p in ("", ".", "..") or not _PATH_PART.fullmatch(p) for p in parts)
        or parts[0].lower().rstrip(" .") == ".git"
    ):
        raise ValueError(
            f"environment path {path!r} must be a folder inside the tree, like .venv or "
            "web/node_modules (letters, digits, . _ - @ +; no .., no globs, not .git)"
        )
    return "/".join(parts)


class EnvironmentSpec(_TaskFileModel):
    """The repository's own environment (its dependencies): built once per key on each
    host, stored under ``LOOP_HOME/envs/``, and laid read-only into every attempt's and
    every gate's sandbox where the setup made it (docs/guides/environment.md)."""

    setup: list[str] | Literal["auto"]
    """Shell commands run once at base, in the sandbox as the task's uid, each in a shell
    of its own with the tree as its cwd (``["python -m venv .venv", ".venv/bin/pip install
    -e .[test]"]``, ``["npm ci"]``); or ``auto``: what the repository's layout at base
    calls for (its ``.loopwork/setup.sh``, a devcontainer's ``postCreateCommand``, a uv or
    poetry lock, a pyproject, requirements files, a package lock, a go.sum)."""
    key_files: list[str] | None = None
    """Globs of the files whose content decides when it is built again (None: the
    lockfiles and manifests found: ``pyproject.toml``, ``setup.py``, ``setup.cfg``,
    ``requirements*.txt``, ``uv.lock``, ``poetry.lock``, ``package-lock.json``, ``go.sum``
    and the like)."""
    paths: list[str] | None = None
    """What the setup makes that attempts and gates use, relative to the tree (None:
    ``.venv`` and ``node_modules``, or what ``auto`` found); those it made are kept."""
    allow_hosts: list[str] = Field(default_factory=list)
    """What the setup may reach through the egress proxy (the package registries, as in
    ``sandbox.allow_hosts``); the agent and the gates keep ``sandbox``'s network."""
    timeout: int = Field(default=1_800, ge=1, le=86_400)
    """Seconds all of the setup's commands may take together."""

    @field_validator("setup")
    @classmethod
    def _commands(cls, setup: list[str] | str) -> list[str] | str:
        if isinstance(setup, list) and (not setup or not all(c.strip() for c in setup)):
            raise ValueError("environment.setup needs at least one command, or auto")
        return setup

    @field_validator("key_files")
    @classmethod
    def _key_globs(cls, globs: list[str] | None) -> list[str] | None:
        return None if globs is None else relative_globs(globs)

    @field_validator("paths")
    @classmethod
    def _paths(cls, paths: list[str] | None) -> list[str] | None:
        if paths is None:
            return None
        if not paths:
            raise ValueError("environment.paths needs at least one folder (default .venv)")
        clean = [_environment_path(p) for p in paths]
        for p in clean:
            inside = [q for q in clean if q != p and q.startswith(p + "/")]
            if inside or clean.count(p) > 1:
                raise ValueError(f"environment.paths: {p!r} is named twice or holds another")
        return clean

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, entries: list[str]) -> list[str]:
        return [_allow_entry(e) for e in entries]

    def wanted_paths(self, found: list[str] | None = None) -> list[str]:
        """The paths to keep: the task file's, else what ``auto`` found, else the defaults."""
        return list(self.paths or found or DEFAULT_PATHS)

    def key_globs(self) -> list[str]:
        return list(self.key_files if self.key_files is not None else DEFAULT_KEY_FILES)


def auto_environment(value: object) -> object:
    """``environment: auto`` is short for ``environment: {setup: auto}``."""
    return {"setup": "auto"} if value == "auto" else value


class GitHubIssueRef(_TaskFileModel):
    """The GitHub issue a task was started from, where its status comment is kept."""

    repo: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
    """The repository, ``owner/name``."""
    number: int = Field(ge=1)
    """The issue's number."""
    token_env: str = Field(default="GITHUB_TOKEN", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """The worker's variable holding the token (the source's ``token_env``)."""


class Finalize(_TaskFileModel):
    """What a verified task does instead of merging, when its autonomy would merge."""

    pull_request: bool = False
    """Push ``loop/<id>`` and write a pull request (and open it on GitHub with
    GITHUB_TOKEN) instead of merging into base."""
    github: str = Field(default="", pattern=r"^$|^[\w.-]+/[\w.-]+$")
    """``owner/repo`` on GitHub, when the remote's URL does not say it."""
    pull_request_wait: int = Field(default=604_800, ge=0)
    """Seconds a task whose pull request was opened on GitHub waits for it to be merged
    or closed there (reviews meanwhile are feedback for another attempt); then it ends
    ``DONE_WITH_EVIDENCE`` with the pull request open. 0: it ends when it opens it."""


class TaskSpec(_TaskFileModel):
    """A task file, validated. ``repo`` is absolute once the CLI has resolved it, or a
    git URL (each host keeps a mirror of it)."""

    id: str = Field(pattern=TASK_ID_PATTERN)
    """Names the task; its workflow id is ``task-<id>``, its branch ``loop/<id>``."""
    goal: str = Field(min_length=1, max_length=MAX_GOAL_CHARS)
    """What must be true when done, for the agent and for reviewers."""
    repo: str = Field(min_length=1)
    """A git repository (a path, relative to the task file's folder) or a git URL
    (``file://``, ``ssh://``, ``https://``, ``git@host:path``)."""
    base: str | None = None
    """Branch or commit to start from; the CLI fills in the repo's current branch."""
    agent: AgentSpec
    """Who does the work: an external agent CLI, or a model Loopwork drives."""
    verify: list[Gate] = Field(min_length=1)
    """The gates, in order; all must pass, and the agent cannot change them."""
    budget: Budget = Field(default_factory=Budget)
    """Limits the workflow enforces."""
    autonomy: Autonomy = Autonomy.REPORT
    """What a verified result may do: ``report`` (stays in the worktree), ``assisted``
    (a commit on ``loop/<id>``, waiting for approval) or ``unattended`` (merged)."""
    approval_timeout: int = Field(default=86_400, ge=1)
    """Seconds a task waiting on a person waits for a signal."""
    instructions: str = Field(default="", max_length=MAX_GOAL_CHARS)
    """Guidance for the agent shown after the goal (an eval harness's prompt additions)."""
    sandbox: SandboxPolicy = Field(default_factory=SandboxPolicy)
    """How the agent, the ``run`` tool and ``run`` gates are confined."""
    finalize: Finalize = Field(default_factory=Finalize)
    """Hand the verified change over as a pull request instead of merging."""
    github_issue: GitHubIssueRef | None = None
    """Set by a ``github`` source for its issues: one comment there says, edited in place,
    how the task goes."""
    slack_channel: str = Field(default="", pattern=r"^([CG][A-Z0-9]{2,20})?$")
    """The Slack channel's id (``C0123…``) this task's waits post to, over the worker's
    ``LOOP_SLACK_CHANNEL``; a source's ``template`` sets it for its items: a channel per
    source. Empty: the worker's channel for the repository."""
    environment: EnvironmentSpec | None = None
    """The repository's own environment (its dependencies), built once and laid read-only
    into every attempt's and gate's sandbox; ``auto`` finds the setup from the layout."""

    @field_validator("environment", mode="before")
    @classmethod
    def _auto(cls, value: object) -> object:
        return auto_environment(value)

    @model_validator(mode="after")
    def _key_stays_in_worker(self) -> Self:
        provider = self.agent.provider
        if provider is None:
            return self
        names = {provider.key_variable, *PROVIDER_VARIABLES[provider.api][0],
                 PROVIDER_VARIABLES[provider.api][1]}  # fmt: skip
        passed = sorted(names & set(self.sandbox.env))
        if passed:
            raise ValueError(
                f"sandbox.env: {passed[0]} is set by agent.provider inside the sandbox (the "
                "gateway's address or the run's token), and the real key stays in the worker; "
                f"remove {passed[0]} from sandbox.env"
            )
        return self

    @model_validator(mode="after")
    def _off_needs_consent(self) -> Self:
        sandbox = self.sandbox
        if sandbox.mode == SandboxLevel.OFF and self.autonomy != Autonomy.REPORT:
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
        if any(isinstance(g, RegressionTestGate) for g in gates) and not any(
            isinstance(g, RunGate) and g.reports for g in gates
        ):
            raise ValueError(
                "regression_test runs the tests of a run gate with per-test results; add one "
                "(report: auto or junit)"
            )
        return gates

    def protected_paths(self) -> list[str]:
        scopes = [g.diff_scope for g in self.verify if isinstance(g, DiffScopeGate)]
        return [p for scope in scopes for p in scope.protect]
