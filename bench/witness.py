"""The witness on real suites: every test run again outside pytest, against pytest's word.

A ``run`` gate's verdict rests on tests seen twice: once by the reporter inside pytest,
once by the witness outside it (``activities/host/reporting/witness``). Here the witness
runs *every* test of four released projects (sdists from the package registry, each
with the pytest it was tested with), not only the few a verdict rests on, and each
outcome is compared with the reporter's: how many it can run, how many agree, what it
costs next to the suite under pytest. Outside the sandbox (mode off), the runner alone.

    .venv/bin/python bench/witness.py [--quick] [--cache DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from common import print_machine, print_table

from activities.host import reporting
from loop.contracts import RunGate, SandboxPolicy, SuiteReport
from loop.hardened import tar as hardened_tar

SUITES = {
    "toolz 1.0.0": ("toolz==1.0.0", "{python} -m pytest -q toolz/tests"),
    "more-itertools 10.5.0": ("more-itertools==10.5.0", "{python} -m pytest -q tests"),
    "click 8.1.8": ("click==8.1.8", "PYTHONPATH=src {python} -m pytest -q tests"),
    "jinja2 3.1.4": ("jinja2==3.1.4", "PYTHONPATH=src {python} -m pytest -q tests"),
}
QUICK = ["toolz 1.0.0"]
TOOLS = ["pytest==8.3.4", "markupsafe==2.1.5"]
"""The pytest these releases were tested with, and jinja2's one dependency."""


def prepare(cache: Path, names: list[str]) -> tuple[Path, dict[str, Path]]:
    sdists, venv = cache / "sdists", cache / "witness-venv"
    sdists.mkdir(parents=True, exist_ok=True)
    wanted = [SUITES[n][0] for n in names]
    print(f"fetching {', '.join(wanted)} and a virtualenv with {', '.join(TOOLS)} ...")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
         "-d", str(sdists), *wanted],
        check=True,
    )  # fmt: skip
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *TOOLS],
                       check=True)  # fmt: skip
    trees = {}
    for name in names:
        project, version = SUITES[name][0].split("==")
        archive = next(
            p for p in sdists.glob("*.tar.gz")
            if p.name.lower().replace("_", "-") == f"{project}-{version}.tar.gz"
        )  # fmt: skip
        target = cache / "witness-src" / name.replace(" ", "-")
        if not target.exists():
            with tarfile.open(archive) as tar:
                hardened_tar.unpack(tar, target)
        trees[name] = next(p for p in target.iterdir() if p.is_dir())
    return venv / "bin" / "python", trees


async def run(command: str, tree: Path, setup: reporting.Reporting) -> tuple[SuiteReport, float]:
    env = dict(os.environ, **setup.env)
    env["PYTEST_ADDOPTS"] = "-p no:cacheprovider"
    if reporting.FD_VARIABLE in setup.env:
        env["PYTEST_ADDOPTS"] += f" {reporting.pytest_options()}"
    if setup.site is not None:
        command = reporting.keep_first(command, setup.site)
    setup.start()
    began = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", command, cwd=tree, env=env, pass_fds=setup.pass_fds,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        await proc.wait()
        seconds = time.monotonic() - began
        found = await setup.collect()
    finally:
        setup.close()
    assert found is not None, command
    return found, seconds


async def one(name: str, python: Path, tree: Path, home: Path) -> list[object]:
    command = SUITES[name][1].format(python=python)
    gate = RunGate(name="tests", run=command)
    off = SandboxPolicy(mode="off")
    folder = home / name.replace(" ", "-")
    folder.mkdir(parents=True, exist_ok=True)
    first, pytest_s = await run(command, tree, reporting.prepare(gate, off, home, folder))
    files: dict[str, list[str]] = collections.defaultdict(list)
    for case in first.tests.values():
        files[case.file].append(case.id)
    plan = {"runner": first.runner, "root": first.root, "files": sorted(files.items())}
    seen, witness_s = await run(
        command, tree, reporting.prepare_witness(gate, off, home, folder, plan)
    )
    agree = unrun = differ = 0
    for case_id, case in first.tests.items():
        other = seen.tests.get(case_id)
        if other is None or other.outcome == "missing":
            unrun += 1
        elif other.outcome == case.outcome:
            agree += 1
        else:
            differ += 1
            print(f"  {name}: {case_id}: pytest {case.outcome}, witness {other.outcome}")
    return [name, len(first.tests), agree, unrun, differ, f"{pytest_s:.1f}", f"{witness_s:.1f}"]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="toolz alone")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "loopwork-bench")
    args = parser.parse_args()
    print_machine("The witness on real suites: every test outside pytest, against pytest")
    names = QUICK if args.quick else list(SUITES)
    python, trees = prepare(args.cache, names)
    home = args.cache / "witness-home"
    rows = [await one(name, python, trees[name], home) for name in names]
    print()
    print_table(
        ["suite", "tests", "same outcome", "not run by the witness", "different", "pytest s",
         "witness s"],
        rows,
    )  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
