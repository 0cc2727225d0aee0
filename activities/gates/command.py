"""A ``run`` gate's command, run once in the sandbox, with its runner's report collected.

The command runs as the task's uid on a checkout it cannot change (kind ``gate``:
no network by default, the tree read-only, a fresh HOME and TMPDIR), with the
reporting of ``activities.host.reporting`` around it. The result, ``Ran``, is
what every verdict on that gate is made of; it is also written to a file of the
worker's (``<log_dir>/gate-<name>.ran.json``), so a later verdict on the same
commit reads it instead of running the command again (the base run).
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel

from activities.host import reporting, sandbox
from activities.host.proc import ProcResult
from loop.contracts import RunGate, SandboxLevel, SandboxPolicy, SuiteReport, Workspace
from loop.redact import redact

NO_PYTEST_CACHE = "-p no:cacheprovider"


class Ran(BaseModel):
    """One run of a gate's command: what the process did, what its runner reported."""

    proc: ProcResult
    report: SuiteReport | None = None
    """Per-test results (None: the runner reported nothing)."""
    path: str = ""
    """Where this is kept, in the worker's folder."""


def gate_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a ``run`` gate: the worker's, minus the ways tests litter the tree."""
    env = dict(os.environ if base is None else base)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    existing = env.get("PYTEST_ADDOPTS", "").strip()
    env["PYTEST_ADDOPTS"] = f"{NO_PYTEST_CACHE} {existing}".strip()
    return env


def gate_extra_env(policy: SandboxPolicy) -> dict[str, str]:
    """What a sandboxed ``run`` gate (or ``run`` tool call) gets on top of the sandbox's
    minimal environment: no bytecode, no pytest cache; the worker's own PYTEST_ADDOPTS
    only where the worker's environment passes (mode off, or named in ``sandbox.env``)."""
    passes = policy.mode == SandboxLevel.OFF or "PYTEST_ADDOPTS" in policy.env
    worker = os.environ.get("PYTEST_ADDOPTS") if passes else None
    return gate_env({"PYTEST_ADDOPTS": worker} if worker else {})


def gate_run(
    gate: RunGate,
    ws: Workspace,
    tree: Path,
    state_dir: Path,
    home: Path,
    policy: SandboxPolicy,
    reports: reporting.Reporting | None = None,
) -> sandbox.SandboxRun:
    """How a ``run`` gate runs: its line under bash, as the task's uid, on ``tree``."""
    env = gate_extra_env(policy)
    if reports is not None and reports.channel is not None:
        env.update(reports.env)
        env["PYTEST_ADDOPTS"] = f"{env['PYTEST_ADDOPTS']} {reporting.pytest_options()}"
    return sandbox.SandboxRun(
        argv=["bash", "-c", gate.run],
        kind="gate",
        policy=policy,
        task_id=ws.task_id,
        home=home,
        tree=tree,
        state_dir=state_dir,
        name=f"gate-{gate.name}",
        limit_s=gate.timeout,
        env=env,
        readable=list(reports.readable) if reports is not None else [],
        writable=list(reports.writable) if reports is not None else [],
        pass_fds=reports.pass_fds if reports is not None else (),
        hidden=sandbox.hidden_for(ws),
        environment=sandbox.Laid.of(ws.environment),
    )


async def run_command(
    gate: RunGate, ws: Workspace, tree: Path, state_dir: Path, home: Path, policy: SandboxPolicy
) -> Ran:
    """Run ``gate``'s command on ``tree`` and collect what its runner reported."""
    reports = reporting.prepare(gate, policy, home, state_dir)
    try:
        reports.start()
        proc = await sandbox.run_sandboxed(
            gate_run(gate, ws, tree, state_dir, home, policy, reports)
        )
        report = await reports.collect()
    finally:
        reports.close()
    if report is not None:
        for case in [*report.tests.values(), *report.collect_errors]:
            case.message, case.output = redact(case.message), redact(case.output)
    ran = Ran(proc=proc, report=report, path=str(state_dir / f"gate-{gate.name}.ran.json"))
    Path(ran.path).write_text(ran.model_dump_json())
    return ran
