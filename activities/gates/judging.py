"""One verdict's shared work: each gate command's runs, the base they are judged against,
and the scan of what the attempt added.

Several gates read the same facts: a ``run`` gate compares its run at the commit with
its run at base, ``no_removed_tests`` compares the same two reports, and
``regression_test`` runs the command once more on base's code with the attempt's tests.
``Judging`` runs each of those once per verdict and keeps the base run in the task's
run folder (``runs/<id>/base/``), keyed by base commit and gate, so explore's run at
base is what every attempt's verdict compares with; a verdict on a host that has no
such file (the task moved) runs base again.

Base's run is the same for every task of a repository on that commit with that gate and
sandbox, so the worker also keeps it in ``LOOP_HOME/base/`` (out of every sandbox's
reach) and a later task there copies it instead of running the gate again, for
``BASE_REUSE_S``: a run at base measures this host as well as the code (its toolchain,
its packages), so an old one is measured again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path

from activities.gates.command import Ran, run_command
from activities.host import diffscan, hidden, worktree
from activities.host.git import git
from loop.contracts import (
    BuiltEnvironment,
    HiddenTests,
    MakeResult,
    RunGate,
    TaskSpec,
    Workspace,
)
from loop.hardened.files import open_untrusted
from loop.rules import baseline
from loop.rules.tamper import Finding, is_test_path

BASE_REUSE_S = 6 * 3600
"""How long another task's run at base stands for this one's."""

Trees = Callable[[str, str], AbstractAsyncContextManager[Path]]
"""A clean checkout of a commit in a folder of the worker's, by label: (commit, label)."""
Elsewhere = Callable[[RunGate, str, str], Awaitable[Ran]]
"""Run a gate's command on a clean checkout of another commit: (gate, commit, label)."""


CODE_KEPT = 64
"""Commits whose code files a worker remembers (``code_at``)."""
_code: dict[str, frozenset[str]] = {}


async def code_at(commit: str, repo: str) -> frozenset[str]:
    """The Python files at ``commit`` that are not tests. A commit's tree never changes, so
    the answer is kept by commit: explore and every verdict of a repository's tasks on
    one base ask for the same one (one ``git ls-tree`` a base, not two a task)."""
    known = _code.get(commit)
    if known is None:
        listed = await git(["ls-tree", "-r", "-z", "--name-only", commit], repo)
        known = frozenset(
            f for f in listed.split("\0") if f.endswith(".py") and not is_test_path(f)
        )
        if len(_code) >= CODE_KEPT:
            del _code[next(iter(_code))]  # the oldest
        _code[commit] = known
    return known


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
    _base_code: set[str] | None = None
    environment: BuiltEnvironment | None = None
    """The attempt's own environment (its commit changes the key files): the commit's runs
    use it; base's keep the workspace's."""
    trees: Trees | None = None
    """Clean checkouts of other commits held as long as needed (hidden tests are laid
    over them)."""

    @property
    def commit(self) -> str:
        return self.make.commit or "HEAD"

    def reporting(self) -> list[RunGate]:
        """The task's run gates whose verdicts may come from per-test results: what the
        gates about tests (``no_removed_tests``, ``regression_test``) compare."""
        return [g for g in self.task.verify if isinstance(g, RunGate) and g.reports]

    @property
    def at_the_commit(self) -> Workspace:
        """The workspace the commit's runs see: with the attempt's own environment where
        its commit changed what that is built from."""
        if self.environment is None:
            return self.ws
        return self.ws.model_copy(update={"environment": self.environment})

    async def at_commit(self, gate: RunGate) -> Ran:
        if gate.name not in self._runs:
            self._runs[gate.name] = await run_command(
                gate,
                self.at_the_commit,
                self.bench.tree,
                self.bench.log_dir,
                self.bench.home,
                self.task.sandbox,
            )
        return self._runs[gate.name]

    def _key(self, gate: RunGate) -> str:
        laid = self.ws.environment
        return hashlib.sha256(
            f"{self.ws.base_commit}\0{gate.model_dump_json()}\0"
            f"{self.task.sandbox.model_dump_json()}"
            f"{f'{chr(0)}{laid.key}' if laid is not None else ''}".encode()
        ).hexdigest()[:16]

    def base_file(self, gate: RunGate) -> Path:
        return Path(self.ws.run_dir) / "base" / f"{gate.name}-{self._key(gate)}.json"

    def _shared(self, gate: RunGate) -> Path:
        """Where this worker keeps base's run of ``gate`` for every task of the repository."""
        repo = hashlib.sha256(os.path.realpath(self.ws.repo).encode()).hexdigest()[:16]
        return self.bench.home / "base" / repo / f"{gate.name}-{self._key(gate)}"

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
            shared = self._shared(gate)
            ran = _copied(shared, kept) if _fresh(shared) else None
            if ran is None:
                ran = await self.elsewhere(gate, self.ws.base_commit, "base")
                if ran.report is not None and ran.report.complete:
                    # Twice: a test whose outcome differs between the two is flaky, and is
                    # neither required nor counted (loop.rules.baseline).
                    again = await self.elsewhere(gate, self.ws.base_commit, "base-again")
                    ran = ran.model_copy(update={"again": again.report})
                _share(ran, shared)
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_text(ran.model_dump_json())
        self._base[gate.name] = ran
        return ran

    async def base_code(self) -> set[str]:
        """The repository's Python files at base that are not tests: an error raised there
        is base's code's, not the environment's or the test's."""
        if self._base_code is None:
            self._base_code = set(await code_at(self.ws.base_commit, self.ws.path))
        return self._base_code

    async def aside(self, gate: RunGate) -> dict[str, str]:
        """Tests of ``gate`` whose outcome does not count: flaky or pre-existing at base."""
        base = await self.at_base(gate)
        code = await self.base_code()
        return baseline.set_aside(gate, base.report, base.again, self.task.goal, code)

    async def rerun(self, gate: RunGate, ids: list[str]) -> Ran:
        """The gate's command again at the commit, limited to ``ids`` (tests that failed)."""
        return await run_command(
            gate, self.at_the_commit, self.bench.tree, self.bench.log_dir, self.bench.home,
            self.task.sandbox, only=ids,
        )  # fmt: skip

    async def witness(
        self, gate: RunGate, plan: dict[str, object], tree: Path | None = None
    ) -> Ran:
        """The second observation of ``plan``'s tests at the commit, outside the runner
        (``tree``: a checkout with hidden tests laid over it, instead of the bench's)."""
        where = tree or self.bench.tree
        return await run_command(
            gate, self.at_the_commit, where, where.parent if tree else self.bench.log_dir,
            self.bench.home, self.task.sandbox, witness=plan,
        )  # fmt: skip

    async def hidden_files(self, spec: HiddenTests) -> tuple[dict[str, bytes], str]:
        """The hidden test files (path -> bytes), read by the worker from ``spec.ref``: a
        folder, or a commit of the repository; or why there are none."""
        if spec.ref.startswith("/"):
            return await asyncio.to_thread(hidden.from_folder, Path(spec.ref), spec.files)
        return await hidden.from_commit(self.ws.repo, spec.ref, spec.files)

    @contextlib.asynccontextmanager
    async def laid(
        self, commit: str, label: str, files: dict[str, bytes]
    ) -> AsyncIterator[tuple[Path, Path]]:
        """A clean checkout of ``commit`` with ``files`` laid over it, and its folder: the
        worker's own, for as long as the caller holds it."""
        if self.trees is None:
            raise RuntimeError("this verdict has no checkouts of other commits")
        async with self.trees(commit, label) as tree:
            await asyncio.to_thread(hidden.lay, tree, files)
            yield tree, tree.parent

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


def _fresh(shared: Path) -> bool:
    try:
        return time.time() - (shared / "ran.json").stat().st_mtime < BASE_REUSE_S
    except OSError:
        return False


def _share(ran: Ran, shared: Path) -> None:
    """Keep a run at base, its log with it, for later tasks: whole or not at all (written
    aside, then renamed in), and never at the cost of the verdict that made it."""
    aside = shared.with_name(f".{shared.name}.{uuid.uuid4().hex[:8]}")
    try:
        aside.mkdir(parents=True, mode=0o700)
        _copy(Path(ran.proc.log_path), aside / "gate.log")
        (aside / "ran.json").write_text(ran.model_dump_json())
        shutil.rmtree(shared, ignore_errors=True)
        aside.rename(shared)
    except OSError:  # no log to keep, or another task kept the same run first
        shutil.rmtree(aside, ignore_errors=True)


def _copy(source: Path, target: Path) -> None:
    """A worker's log copied as it is: a link or a FIFO in its place is not followed."""
    with os.fdopen(open_untrusted(source), "rb") as src, target.open("wb") as out:
        shutil.copyfileobj(src, out)


def _copied(shared: Path, kept: Path) -> Ran | None:
    """Another task's run at base as this task's own (its log copied beside ``kept``), or
    None where the copy is unreadable."""
    try:
        with os.fdopen(open_untrusted(shared / "ran.json"), "rb") as f:
            ran = Ran.model_validate_json(f.read())
        kept.parent.mkdir(parents=True, exist_ok=True)
        log = kept.with_suffix(".log")
        _copy(shared / "gate.log", log)
    except (OSError, ValueError):
        return None
    return ran.model_copy(
        update={"path": str(kept), "proc": ran.proc.model_copy(update={"log_path": str(log)})}
    )
