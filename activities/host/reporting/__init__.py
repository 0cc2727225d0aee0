"""Per-test results of a ``run`` gate, from the runner's own report, collected by the worker.

A gate's verdict must not be an exit code that the code under test controls (three
lines at import, ``os._exit(0)``, end a test run "green"). So a ``run`` gate gets:

- for pytest and ``python -m unittest`` (``report: auto``): Loopwork's reporter
  (``site/loopwork_report.py``), put on the command's ``PYTHONPATH`` from a folder the
  worker writes and shows read-only, claimed at interpreter start-up by
  ``site/sitecustomize.py`` and registered with pytest by ``-p``; it streams each
  test's outcome over an authenticated channel (``channel``) and a final record;
- for any runner that writes JUnit XML (``report: {junit: file}``): a fresh folder,
  ``$LOOP_REPORT_DIR``, lent to the task's uid, read afterwards (``junit``).

``prepare`` sets a run up, ``collect`` returns what came back (None: nothing did).
What the results mean for the verdict is ``loop.rules.verdicts``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import py_compile
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from activities.host.files import write_atomic
from activities.host.reporting import junit
from activities.host.reporting.channel import Channel
from loop.contracts import JunitReport, RunGate, SandboxLevel, SandboxPolicy, SuiteReport

SITE = Path(__file__).with_name("site")
FD_VARIABLE = "LOOP_REPORT_FD"
DIR_VARIABLE = "LOOP_REPORT_DIR"


ENTRY_POINTS = "[pytest11]\nloopwork = loopwork_report\n"
"""pytest finds the plugin by this name (``-p loopwork``) without importing a module of
that name: so it never warns that the module was imported before it could rewrite it
(``sitecustomize`` imported it, on purpose, before the repository's code could run),
and no file of the repository named like it is ever imported in its place."""


def site_dir(home: Path) -> Path:
    """The reporter's folder under LOOP_HOME, written once per version of its files.

    A copy, not the install: the install may sit where the task's uid cannot read
    (a 0700 checkout, a umask of 077); this folder is 0755 with 0644 files, and the
    sandbox shows it read-only wherever LOOP_HOME is."""
    sources = sorted(SITE.glob("*.py"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:12]
    folder = home / "reporter" / digest
    if not (folder / "sitecustomize.py").exists():
        meta = folder / "loopwork_report-0.dist-info"
        meta.mkdir(parents=True, exist_ok=True)
        write_atomic(
            meta / "METADATA", "Metadata-Version: 2.1\nName: loopwork-report\nVersion: 0\n"
        )
        write_atomic(meta / "entry_points.txt", ENTRY_POINTS)
        for source in sources:
            write_atomic(folder / source.name, source.read_text())
            # Compiled once here: the folder is read-only to every gate, and compiling the
            # reporter at each start-up would cost every test process a few milliseconds.
            py_compile.compile(str(folder / source.name), doraise=True)
        for path in folder.rglob("*"):
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        os.chmod(folder, 0o755)
    return folder


@dataclass
class Reporting:
    """One gate run's reporting: what the command gets, and where results come back."""

    channel: Channel | None = None
    junit_dir: Path | None = None
    pattern: str = ""
    env: dict[str, str] = field(default_factory=dict)
    readable: list[Path] = field(default_factory=list)
    writable: list[Path] = field(default_factory=list)

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self.channel.child_fd,) if self.channel is not None else ()

    def start(self) -> None:
        if self.channel is not None:
            self.channel.start()

    async def collect(self) -> SuiteReport | None:
        """What the run reported; the channel's report first, a JUnit file otherwise."""
        found: SuiteReport | None = None
        if self.channel is not None:
            found = await self.channel.finish()
            self.channel = None
            if not found.sessions and not found.problems:
                found = None
        if found is None and self.junit_dir is not None:
            found = await asyncio.to_thread(junit.read, self.junit_dir, self.pattern)
        return found

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None


def prepare(gate: RunGate, policy: SandboxPolicy, home: Path, folder: Path) -> Reporting:
    """The reporting of one run of ``gate`` (``folder``: the worker's, for this run)."""
    if gate.report == "exit":
        return Reporting()
    site = site_dir(home)
    passes = policy.mode == SandboxLevel.OFF or "PYTHONPATH" in policy.env
    theirs = os.environ.get("PYTHONPATH", "") if passes else ""
    reporting = Reporting(channel=Channel(), readable=[site])
    assert reporting.channel is not None
    reporting.env = {
        "PYTHONPATH": os.pathsep.join(p for p in (str(site), theirs) if p),
        FD_VARIABLE: str(reporting.channel.child_fd),
    }
    if isinstance(gate.report, JunitReport):
        junit_dir = folder / f"report-{gate.name}"
        if junit_dir.exists():
            shutil.rmtree(junit_dir)
        junit_dir.mkdir(parents=True, mode=0o700)
        reporting.junit_dir, reporting.pattern = junit_dir, gate.report.junit
        reporting.writable = [junit_dir]
        reporting.env[DIR_VARIABLE] = str(junit_dir)
    return reporting


def pytest_options() -> str:
    """What ``PYTEST_ADDOPTS`` gains: the reporter by its entry point's name (the module
    ``sitecustomize`` already imported)."""
    return "-p loopwork"
