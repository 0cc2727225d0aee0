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
import functools
import hashlib
import json
import os
import py_compile
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from activities.host.files import write_atomic
from activities.host.reporting import junit
from activities.host.reporting.channel import Channel
from loop.contracts import JunitReport, RunGate, SandboxLevel, SandboxPolicy, SuiteReport

SITE = Path(__file__).with_name("site")
WITNESS = Path(__file__).with_name("witness")
FD_VARIABLE = "LOOP_REPORT_FD"
DIR_VARIABLE = "LOOP_REPORT_DIR"
ONLY_VARIABLE = "LOOP_REPORT_ONLY"
WITNESS_FD = "LOOP_WITNESS_FD"
WITNESS_PLAN = "LOOP_WITNESS_PLAN"


ENTRY_POINTS = "[pytest11]\nloopwork = loopwork_report\n"
"""pytest finds the plugin by this name (``-p loopwork``) without importing a module of
that name: so it never warns that the module was imported before it could rewrite it
(``sitecustomize`` imported it, on purpose, before the repository's code could run),
and no file of the repository named like it is ever imported in its place."""


@functools.cache
def _digest(source: Path) -> str:
    """The version of a folder's files, read once a process: they are the install's, and
    every gate run asks (the reporter's and the witness's folders are named by it)."""
    files = sorted(source.glob("*.py"))
    return hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()[:12]


def site_dir(home: Path, source: Path = SITE) -> Path:
    """The reporter's folder (or the witness's, ``source``) under LOOP_HOME, written once
    per version of its files.

    A copy, not the install: the install may sit where the task's uid cannot read
    (a 0700 checkout, a umask of 077); this folder is 0755 with 0644 files, and the
    sandbox shows it read-only wherever LOOP_HOME is."""
    digest = _digest(source)
    folder = home / "reporter" / digest if source == SITE else home / "witness" / digest
    if not (folder / "sitecustomize.py").exists():
        if source == SITE:
            meta = folder / "loopwork_report-0.dist-info"
            meta.mkdir(parents=True, exist_ok=True)
            write_atomic(
                meta / "METADATA", "Metadata-Version: 2.1\nName: loopwork-report\nVersion: 0\n"
            )
            write_atomic(meta / "entry_points.txt", ENTRY_POINTS)
        folder.mkdir(parents=True, exist_ok=True)
        # In name order, so sitecustomize.py, which says the folder is whole, comes last.
        for one in sorted(source.glob("*.py")):
            write_atomic(folder / one.name, one.read_text())
            # Compiled once here: the folder is read-only to every gate, and compiling the
            # reporter at each start-up would cost every test process a few milliseconds.
            py_compile.compile(str(folder / one.name), doraise=True)
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
    site: Path | None = None
    """The folder that must stay first on the command's ``PYTHONPATH``."""

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


def _python_path(site: Path, policy: SandboxPolicy) -> str:
    """``site`` first, then the worker's own PYTHONPATH where the sandbox passes it."""
    passes = policy.mode == SandboxLevel.OFF or "PYTHONPATH" in policy.env
    theirs = os.environ.get("PYTHONPATH", "") if passes else ""
    return os.pathsep.join(p for p in (str(site), theirs) if p)


def _lent(folder: Path, name: str, text: str) -> Path:
    """A file of the worker's the command may read: ``folder`` made anew, 0755, the file
    0644 (the sandbox shows the folder read-only)."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    os.chmod(folder, 0o755)
    path = folder / name
    write_atomic(path, text)
    os.chmod(path, 0o644)
    return path


def prepare(
    gate: RunGate, policy: SandboxPolicy, home: Path, folder: Path, only: list[str] | None = None
) -> Reporting:
    """The reporting of one run of ``gate`` (``folder``: the worker's, for this run);
    ``only``: the run is limited to these test ids (a rerun of tests that failed)."""
    if gate.report == "exit":
        return Reporting()
    site = site_dir(home)
    reporting = Reporting(channel=Channel(), readable=[site], site=site)
    assert reporting.channel is not None
    reporting.env = {
        "PYTHONPATH": _python_path(site, policy),
        FD_VARIABLE: str(reporting.channel.child_fd),
    }
    if only is not None:
        ids = _lent(folder / f"only-{gate.name}", "ids.txt", "".join(f"{i}\n" for i in only))
        reporting.readable.append(ids.parent)
        reporting.env[ONLY_VARIABLE] = str(ids)
    if isinstance(gate.report, JunitReport):
        junit_dir = folder / f"report-{gate.name}"
        if junit_dir.exists():
            shutil.rmtree(junit_dir)
        junit_dir.mkdir(parents=True, mode=0o700)
        reporting.junit_dir, reporting.pattern = junit_dir, gate.report.junit
        reporting.writable = [junit_dir]
        reporting.env[DIR_VARIABLE] = str(junit_dir)
    return reporting


_ASSIGNED = re.compile(r"(?:(?<=^)|(?<=[\s;&|(`]))PYTHONPATH=")


def keep_first(command: str, site: Path) -> str:
    """``command`` with every ``PYTHONPATH=`` it assigns (``PYTHONPATH=src pytest``,
    ``export PYTHONPATH=src``, ``env PYTHONPATH=...``) made to start with ``site``: a
    command that sets its own path must not lose the reporter (src layouts do)."""
    return _ASSIGNED.sub(lambda _: f"PYTHONPATH={shlex.quote(str(site))}{os.pathsep}", command)


def pytest_options() -> str:
    """What ``PYTEST_ADDOPTS`` gains: the reporter by its entry point's name (the module
    ``sitecustomize`` already imported)."""
    return "-p loopwork"


def prepare_witness(
    gate: RunGate, policy: SandboxPolicy, home: Path, folder: Path, plan: dict[str, object]
) -> Reporting:
    """The second observation of ``gate``'s required tests: its command again, whose first
    test process runs ``plan`` (runner, root, files and their test ids) with the witness
    (``witness/sitecustomize.py``) instead of its runner."""
    site = site_dir(home, WITNESS)
    reporting = Reporting(channel=Channel(), readable=[site], site=site)
    assert reporting.channel is not None
    planned = _lent(folder / f"witness-{gate.name}", "plan.json", json.dumps(plan))
    reporting.readable.append(planned.parent)
    reporting.env = {
        "PYTHONPATH": _python_path(site, policy),
        WITNESS_FD: str(reporting.channel.child_fd),
        WITNESS_PLAN: str(planned),
    }
    return reporting
