"""One verdict's shared work: each gate command's runs, the base they are judged against,
and the scan of what the attempt added.

Several gates read the same facts: a ``run`` gate compares its run at the commit with
its run at base, ``no_removed_tests`` compares the same two reports, and
``regression_test`` runs the command once more on base's code with the attempt's tests.
``Judging`` runs each of those once per verdict and keeps the base run in the task's
run folder (``runs/<id>/base/``), keyed by base commit and gate, so explore's run at
base is what every attempt's verdict compares with; a verdict on a host that has no
such file (the task moved) runs base again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from activities.gates.command import Ran, run_command
from activities.host import diffscan, worktree
from loop.contracts import MakeResult, RunGate, TaskSpec, Workspace
from loop.rules.tamper import Finding

Elsewhere = Callable[[RunGate, str, str], Awaitable[Ran]]
"""Run a gate's command on a clean checkout of another commit: (gate, commit, label)."""


@dataclass
class Bench:
    """Where ``run`` gates run: a clean checkout of the commit they judge (``tree``), the
    worker's folder for their logs (``log_dir``), and LOOP_HOME (hidden from them)."""

    tree: Path
    log_dir: Path
    home: Path


@dataclass
class Judging:
    task: TaskSpec
    ws: Workspace
    make: MakeResult
    bench: Bench
    elsewhere: Elsewhere
    _runs: dict[str, Ran] = field(default_factory=dict)
    _base: dict[str, Ran] = field(default_factory=dict)
    _overlay: dict[str, Ran] = field(default_factory=dict)
    _findings: list[Finding] | None = None
    _changed: list[str] | None = None

    @property
    def commit(self) -> str:
        return self.make.commit or "HEAD"

    def reporting(self) -> list[RunGate]:
        """The task's run gates whose verdicts may come from per-test results: what the
        gates about tests (``no_removed_tests``, ``regression_test``) compare."""
        return [g for g in self.task.verify if isinstance(g, RunGate) and g.reports]

    async def at_commit(self, gate: RunGate) -> Ran:
        if gate.name not in self._runs:
            self._runs[gate.name] = await run_command(
                gate,
                self.ws,
                self.bench.tree,
                self.bench.log_dir,
                self.bench.home,
                self.task.sandbox,
            )
        return self._runs[gate.name]

    def base_file(self, gate: RunGate) -> Path:
        key = hashlib.sha256(
            f"{self.ws.base_commit}\0{gate.model_dump_json()}\0"
            f"{self.task.sandbox.model_dump_json()}".encode()
        ).hexdigest()[:16]
        return Path(self.ws.run_dir) / "base" / f"{gate.name}-{key}.json"

    async def at_base(self, gate: RunGate) -> Ran:
        """The gate's run on base's code: from the run folder, else run now and kept."""
        if gate.name in self._base:
            return self._base[gate.name]
        kept = self.base_file(gate)
        ran: Ran | None = None
        if kept.is_file():
            try:
                ran = Ran.model_validate_json(kept.read_text())
            except ValueError:
                ran = None  # a file cut by a crash: run again
        if ran is None:
            ran = await self.elsewhere(gate, self.ws.base_commit, "base")
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_text(ran.model_dump_json())
        self._base[gate.name] = ran
        return ran

    async def overlay(self, gate: RunGate, commit: str) -> Ran:
        """The gate's run on ``commit``: base's code with the attempt's test files."""
        if gate.name not in self._overlay:
            self._overlay[gate.name] = await self.elsewhere(gate, commit, "overlay")
        return self._overlay[gate.name]

    async def changed_files(self) -> list[str]:
        """Every file the attempt's commit changes: from git when the attempt's record
        lists only the first ones (an attempt of thousands of files)."""
        if self._changed is None:
            made = self.make
            if made.changed_count > len(made.changed_files) and made.commit:
                self._changed = await worktree.changed_files(self.ws, made.commit)
            else:
                self._changed = list(made.changed_files)
        return self._changed

    async def findings(self) -> list[Finding]:
        """What the attempt added that could end, steer or fake a test run (once)."""
        if self._findings is None:
            self._findings = await diffscan.scan(
                self.ws.path, self.ws.base_commit, self.commit, self.bench.tree
            )
        return self._findings
