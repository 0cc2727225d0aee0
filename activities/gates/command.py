"""A ``run`` gate's command, run once in the sandbox, with its runner's report collected.

The command runs as the task's uid on a checkout it cannot change (kind ``gate``:
no network by default, the tree read-only, a fresh HOME and TMPDIR), with the
reporting of ``activities.host.reporting`` around it. The result, ``Ran``, is
what every verdict on that gate is made of; it is also written to a file of the
worker's (``<log_dir>/gate-<name>.ran.json``), so a later verdict on the same
commit reads it instead of running the command again (the base run).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

from activities.host import reporting, sandbox
from activities.host.proc import ProcResult
from loop.contracts import RunGate, SandboxLevel, SandboxPolicy, SuiteReport, Workspace
from loop.redact import redact
from loop.rules import runner_output

NO_PYTEST_CACHE = "-p no:cacheprovider"
LINE_BYTES = 1 << 16
"""A log's line is read in pieces of at most this (output need not have line ends)."""


class Ran(BaseModel):
    """One run of a gate's command: what the process did, what its runner reported."""

    proc: ProcResult
    report: SuiteReport | None = None
    """Per-test results (None: the runner reported nothing)."""
    path: str = ""
    """Where this is kept, in the worker's folder."""
    again: SuiteReport | None = None
    """At base: the second run's results (a test whose outcome differs is flaky)."""


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
    suffix: str = "",
) -> sandbox.SandboxRun:
    """How a ``run`` gate runs: its line under bash, as the task's uid, on ``tree``
    (``suffix``: which of its runs, for the log's name: a rerun, the witness)."""
    env = gate_extra_env(policy)
    if reports is not None and reports.channel is not None:
        env.update(reports.env)
        env["PYTEST_ADDOPTS"] = f"{env['PYTEST_ADDOPTS']} {reporting.pytest_options()}"
    command = gate.run
    if reports is not None and reports.site is not None:
        command = reporting.keep_first(command, reports.site)
    return sandbox.SandboxRun(
        argv=["bash", "-c", command],
        kind="gate",
        policy=policy,
        task_id=ws.task_id,
        home=home,
        tree=tree,
        state_dir=state_dir,
        name=f"gate-{gate.name}{suffix}",
        limit_s=gate.timeout,
        env=env,
        readable=list(reports.readable) if reports is not None else [],
        writable=list(reports.writable) if reports is not None else [],
        pass_fds=reports.pass_fds if reports is not None else (),
        hidden=sandbox.hidden_for(ws),
        environment=sandbox.Laid.of(ws.environment),
    )


async def run_command(
    gate: RunGate,
    ws: Workspace,
    tree: Path,
    state_dir: Path,
    home: Path,
    policy: SandboxPolicy,
    *,
    only: list[str] | None = None,
    witness: dict[str, object] | None = None,
) -> Ran:
    """Run ``gate``'s command on ``tree`` and collect what its runner reported; ``only``:
    these tests alone (a rerun); ``witness``: the plan of the second observation instead
    of the runner (``reporting.prepare_witness``)."""
    if witness is not None:
        reports = reporting.prepare_witness(gate, policy, home, state_dir, witness)
        suffix = "-witness"
    else:
        reports = reporting.prepare(gate, policy, home, state_dir, only)
        suffix = "-rerun" if only is not None else ""
    try:
        reports.start()
        proc = await sandbox.run_sandboxed(
            gate_run(gate, ws, tree, state_dir, home, policy, reports, suffix)
        )
        report = await reports.collect()
    finally:
        reports.close()
    if report is not None:
        for case in [*report.tests.values(), *report.collect_errors]:
            case.message, case.output = redact(case.message), redact(case.output)
        if witness is None:
            report.contradictions = await asyncio.to_thread(_against_output, report, proc)
    ran = Ran(proc=proc, report=report, path=str(state_dir / f"gate-{gate.name}{suffix}.ran.json"))
    Path(ran.path).write_text(ran.model_dump_json())
    return ran


def _against_output(report: SuiteReport, proc: ProcResult) -> list[str]:
    """The report checked against what its runner printed (the log the worker wrote)."""
    if not proc.log_path:
        return []
    try:
        with open_log(Path(proc.log_path)) as lines:
            return runner_output.contradictions(report, lines)
    except OSError:
        return []


@contextlib.contextmanager
def open_log(path: Path) -> Iterator[Iterator[str]]:
    """A gate's log as lines, decoded leniently (the worker wrote it, from the run's pipe)."""
    with path.open("rb") as f:
        pieces = iter(lambda: f.readline(LINE_BYTES), b"")
        yield (piece.decode("utf-8", "replace") for piece in pieces)
