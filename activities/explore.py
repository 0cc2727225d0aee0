"""explore: a read-only brief before the first attempt.

The agent starts from facts rather than guesses: what files the repository
holds, and what the gates say at base (the reproducer), with their evidence.
The full brief is an artifact in the run folder; history carries a bounded copy.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from urllib.parse import urlsplit

from temporalio import activity

from activities import gates
from activities.gates import run as run_gate
from activities.host import sandbox
from activities.host.gateway import provider_key
from activities.host.gateway.preflight import provider_refusal
from activities.host.gateway.upstream import upstream_refusal
from activities.host.git import git
from activities.host.sandbox.egress_rules import listed
from activities.host.step_files import keep
from activities.make import agent_home, endpoints
from activities.model import preflight
from activities.verify import checkouts
from activities.workspace import WorkspaceActivities
from loop.contracts import (
    EXPLORE,
    PREPARE_AND_EXPLORE,
    PROVIDER_VARIABLES,
    ExploreInput,
    ExploreResult,
    GateResult,
    LlmReviewGate,
    MakeResult,
    Prepared,
    PrepareExploreInput,
    Provider,
    RunGate,
    SandboxLevel,
    TaskSpec,
    Verdict,
    Workspace,
)
from loop.contracts.step_context import sent_once
from loop.errors import permanent
from loop.rules import memory
from loop.rules.clis import BY_NAME, CliEndpoint, usage_source
from loop.rules.commands import programs
from loop.rules.verdicts import headline
from loop.settings import Settings

API_OF_KEY = {key: api for api, (_, key) in PROVIDER_VARIABLES.items()}
"""The model API a known CLI's key variable is for (``ANTHROPIC_API_KEY``: anthropic)."""
BRIEF_CHARS = 6_000
FILE_MAP_ENTRIES = 200


class ExploreActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.workspaces = WorkspaceActivities(settings)

    @activity.defn(name=EXPLORE.name)
    async def explore(self, inp: ExploreInput) -> ExploreResult:
        ws = inp.workspace
        await _endpoints_answer(inp.task, self.settings.endpoint_wait)
        await self._agent_can_start(inp.task, ws)
        files = [f for f in (await git(["ls-files", "-z"], ws.path)).split("\0") if f]
        reproducer = await self._reproduce(inp.task, inp)
        shown = files[:FILE_MAP_ENTRIES]
        lines = ["### Files", "", *[f"- {f}" for f in shown]]
        if len(files) > len(shown):
            lines.append(f"- … and {len(files) - len(shown)} more (git ls-files)")
        lines += environment_brief(inp.task, ws)
        learned = memory.digest(await asyncio.to_thread(_read, self.settings.memory), ws.repo)
        if learned:
            lines += ["", "### What earlier runs on this repository learned", "", learned]
        lines += ["", "### Gates at base (the reproducer)", ""]
        for g in reproducer.gates:
            if g.passed:
                lines.append(f"- {g.name}: pass — {g.requirement}")
            else:
                found = g.evidence.detail or "see the output below"
                lines.append(f"- {g.name}: FAIL — required: {g.requirement}; found: {found}")
            tests = g.evidence.tests
            if tests is not None and tests.failing:
                lines += [
                    f"  - fails at base: `{c.id}`: {headline(c.message)}" for c in tests.failing
                ]
            if not g.passed and g.evidence.output_tail:
                lines += ["", "```", g.evidence.output_tail.strip()[-1500:], "```", ""]
        brief = "\n".join(lines)
        path = Path(ws.run_dir) / "brief.md"
        path.write_text(brief)
        if len(brief) > BRIEF_CHARS:
            brief = brief[:BRIEF_CHARS] + f"\n[… brief cut; full text in {path}]"
        return ExploreResult(
            brief=brief,
            brief_path=str(path),
            files=len(files),
            reproducer=reproducer,
            context=keep(inp, inp.context),
        )

    @activity.defn(name=PREPARE_AND_EXPLORE.name)
    async def prepare_and_explore(self, inp: PrepareExploreInput) -> Prepared:
        """A task's first step on the host that takes it: the worktree, then explore in
        it. A retry gets back the worktree its run made and explores again; the host
        keeps the task file and workspace for later steps, as explore does when it is a
        step of its own."""
        ws = await self.workspaces.prepare_workspace(inp.prepare)
        step = sent_once(ExploreInput(task=inp.task, workspace=ws), ws.run_dir, "")
        return Prepared(workspace=ws, explored=await self.explore(step))

    async def _agent_can_start(self, task: TaskSpec, ws: Workspace) -> None:
        """Before any attempt: the sandbox can run the agent's command as the task's uid
        (raises the permanent reason, so the task ends BLOCKED without burning one)."""
        if task.agent.backend != "command" or not task.agent.command:
            return
        run = sandbox.SandboxRun(
            argv=list(task.agent.command),
            kind="agent",
            policy=task.sandbox,
            task_id=task.id,
            home=self.settings.home,
            tree=Path(ws.path),
            state_dir=Path(ws.run_dir) / "explore",
            name="agent-check",
            limit_s=1,
            agent_home=agent_home(ws),
            allow_hosts=endpoints(task),
            hidden=sandbox.hidden_for(ws),
            environment=sandbox.Laid.of(ws.environment),
        )
        await sandbox.check_runnable(run)
        missing = await sandbox.missing_programs(run)
        if missing:
            raise permanent(f"the agent's command {_not_found(missing)}")

    async def _reproduce(self, task: TaskSpec, inp: ExploreInput) -> Verdict:
        """Run the command gates once at base, each in a clean checkout of it, and keep
        what their runners reported: every attempt's verdict is judged against it."""
        ws = inp.workspace
        runnable = [g for g in task.verify if isinstance(g, RunGate)]
        if not runnable:
            return Verdict(passed=True, artifact=ws.base_commit)
        at_base = MakeResult(attempt=0, commit=ws.base_commit, start_commit=ws.base_commit)
        log_dir = Path(ws.run_dir) / "explore"
        tree = Path(ws.path)  # the worktree is at base until the first attempt
        try_no = activity.info().attempt
        for gate in runnable:
            missing = await sandbox.missing_programs(
                gates.gate_run(gate, ws, tree, log_dir, self.settings.home, task.sandbox)
            )
            if missing:
                raise permanent(f"gate {gate.name}: `{gate.run}` {_not_found(missing)}")
        bench = gates.Bench(tree=tree, log_dir=log_dir, home=self.settings.home)
        judging = gates.Judging(
            task, ws, at_base, bench, checkouts(self.settings, task, ws, log_dir, try_no)
        )
        results = []
        for gate in runnable:
            ran = await judging.at_base(gate)
            aside = await judging.aside(gate) if ran.report is not None else {}
            result = run_gate.at_base(gate, ran, aside)
            if _cannot_start(gate, result, tree):
                raise permanent(
                    f"gate {gate.name} cannot run at base: `{gate.run}` exits "
                    f"{result.evidence.exit_code}: {_last_line(result.evidence.output_tail)}; "
                    "fix the command, or make what it runs visible to the task's uid "
                    "(sandbox.readonly)"
                )
            results.append(result)
        return Verdict(
            passed=all(g.passed for g in results), gates=results, artifact=ws.base_commit
        )


def environment_brief(task: TaskSpec, ws: Workspace) -> list[str]:
    """What the agent must know of the repository's environment: where it is, that it
    cannot change it, and how a dependency gets in (docs/guides/environment.md)."""
    built, env = ws.environment, task.environment
    if built is None or env is None:
        return []
    keys = ", ".join(f"`{g}`" for g in env.key_globs())
    return [
        "",
        "### The environment",
        "",
        f"- {', '.join(f'`{p}`' for p in built.paths)}: the repository's dependencies, "
        f"installed by `{'; '.join(built.setup)}`, read-only (a write there is refused).",
        f"- To add or change a dependency, change a key file ({keys}): the attempt's "
        "commit is judged with an environment built from it.",
    ]


async def _endpoints_answer(task: TaskSpec, wait_s: float) -> None:
    """Every model endpoint the task calls answers and takes the key: from the worker
    (the openai backend, llm_review gates), or from the sandbox (a known agent CLI)."""
    provider = task.agent.provider
    if provider is not None:
        await _provider_answers(provider, task.agent.model, wait_s)
    elif task.agent.backend == "command":
        cli = BY_NAME.get(usage_source(task.agent.command or [], task.agent.usage))
        if cli is not None:
            await _cli_endpoint_answers(task, cli.endpoint, wait_s)
    wanted: dict[str | None, str] = {}
    if task.agent.backend == "openai" and task.agent.model:
        wanted[task.agent.base_url] = task.agent.model
    for gate in task.verify:
        if isinstance(gate, LlmReviewGate):
            model = gate.llm_review.model or task.agent.model
            if model:
                wanted.setdefault(gate.llm_review.base_url or task.agent.base_url, model)
    for base_url, model in wanted.items():
        await preflight(base_url, model, bound_s=wait_s)


async def _provider_answers(provider: Provider, model: str | None, wait_s: float) -> None:
    """``agent.provider``: the worker holds the key, may call the upstream, something
    answers there (the gateway calls it from the worker, not from the sandbox), and it
    takes the key and serves the model."""
    key = provider_key(provider)
    refused = await asyncio.to_thread(upstream_refusal, provider.upstream)
    if refused:
        raise permanent(f"agent.provider.base_url: {refused}; name the model API's endpoint")
    await _answers(provider.upstream, wait_s)
    refused = await provider_refusal(provider, key, model)
    if refused:
        raise permanent(refused)


async def _cli_endpoint_answers(task: TaskSpec, cli: CliEndpoint, wait_s: float) -> None:
    """A known agent CLI: its key reaches it (set here, passed by sandbox.env), its
    endpoint is one the sandbox lets it reach, and something answers there."""
    passed = set(task.sandbox.env)
    if cli.key_variable not in passed or not os.environ.get(cli.key_variable):
        api = API_OF_KEY.get(cli.key_variable, "openai")
        raise permanent(
            f"the agent needs {cli.key_variable} for its model API; name the API in "
            f"agent.provider ({{api: {api}}}): the worker's gateway holds the key, which "
            f"stays out of the sandbox (set {cli.key_variable} where the worker runs)"
        )
    given = os.environ.get(cli.url_variable) if cli.url_variable in passed else None
    url = given or cli.default_url
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    allowed = [*task.sandbox.allow_hosts, *endpoints(task)]
    if task.sandbox.mode != SandboxLevel.OFF and task.sandbox.network == "proxy":
        if not listed(host, port, allowed):
            raise permanent(
                f"the agent's endpoint {url} ({cli.url_variable}) is not in "
                f"sandbox.allow_hosts; add {host if port in (80, 443) else f'{host}:{port}'}"
            )
    await _answers(url, wait_s)


async def _answers(url: str, bound_s: float) -> None:
    """Any HTTP answer will do; nothing at all for ``bound_s`` is the reason to stop."""
    import httpx  # here, not at the top: a new worker starts without it

    deadline = time.monotonic() + bound_s
    delay = 1.0
    async with httpx.AsyncClient(timeout=10.0, trust_env=False) as client:
        while True:
            try:
                await client.head(url)
                return
            except httpx.HTTPError as e:
                if time.monotonic() + delay > deadline:
                    raise permanent(
                        f"the agent's endpoint {url} did not answer for {bound_s:.0f} s: "
                        f"{type(e).__name__}: {e}"
                    ) from None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)


def _not_found(missing: list[str]) -> str:
    names = ", ".join(f"`{m}`" for m in missing)
    return (
        f"runs {names}, which the task's uid cannot find or execute in its sandbox; install "
        "it where that uid can run it (e.g. /usr/local/bin), or add its folder to "
        "sandbox.readonly"
    )


def _cannot_start(gate: RunGate, result: GateResult, tree: Path) -> bool:
    """126/127: the shell could not execute a program. Not the gate's verdict on the code,
    unless the program is one the agent is to write (a relative path not there yet)."""
    if result.evidence.exit_code not in (126, 127):
        return False
    wanted = [w for w in programs(["bash", "-c", gate.run])[1:] if "/" in w and w[0] != "/"]
    return all((tree / w).exists() for w in wanted)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "no output"


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""
