"""What per-test verdicts cost: a reporting gate against the same command judged by exit code.

A ``run`` gate with ``report: auto`` gets Loopwork's reporter (a ``sitecustomize``
claim at start-up, a pytest plugin, one signed record per test over a socket) and
the worker assembles the report; ``report: exit`` runs the same command in the same
sandbox without any of it. Both run ABBA-interleaved on the demo's suite (3 unittest
tests, and the same through pytest) and on a generated suite of ``--tests`` pytest
tests, so load changes hit both alike. Target: the reporting gate within 10 % of the
plain one in wall time. The last table is the base run that explore adds to a task
(one more run of each gate, before the first attempt) next to one verify.

    .venv/bin/python bench/verdicts.py [--rounds 10] [--tests 2000] [--mode basic] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

from common import (
    COMPLETE_FIX,
    git,
    make_demo_repo,
    median,
    print_machine,
    print_table,
    temp_home,
)

from activities import gates
from activities.verify import checkouts
from loop.contracts import Gate, MakeResult, RunGate, SandboxPolicy, TaskSpec, Workspace
from loop.settings import Settings


def generated_suite(folder: Path, n: int) -> Path:
    """A repository with ``n`` small pytest tests in files of 50."""
    repo = folder / "generated"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    for f in range(0, n, 50):
        body = ["from calc import add", ""]
        for i in range(f, min(n, f + 50)):
            body += [f"def test_{i}():", f"    assert add({i}, 1) == {i + 1}", ""]
        (repo / "tests" / f"test_gen_{f // 50:03}.py").write_text("\n".join(body))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def fixed_demo(folder: Path) -> tuple[Path, str]:
    """The demo repository with its bug at base and the fix committed on top."""
    repo = make_demo_repo(folder)
    base = git(repo, "rev-parse", "HEAD")
    (repo / "slugify.py").write_text(COMPLETE_FIX)
    git(repo, "commit", "-q", "-am", "fix")
    return repo, base


def workspace(repo: Path, run_dir: Path, base: str | None = None) -> Workspace:
    commit = base or git(repo, "rev-parse", "HEAD")
    return Workspace(
        task_id="bench-verdicts",
        repo=str(repo),
        path=str(repo),
        branch="loop/bench",
        base_ref="main",
        base_commit=commit,
        run_dir=str(run_dir),
    )


async def one_run(gate: Gate, repo: Path, home: Path, policy: SandboxPolicy) -> tuple[float, int]:
    """Seconds for one run of ``gate`` on ``repo`` (the command and its report), tests seen."""
    folder = home / "runs" / f"r{time.monotonic_ns()}"
    folder.mkdir(parents=True)
    began = time.perf_counter()
    ran = await gates.run_command(gate, workspace(repo, folder), repo, folder, home, policy)
    took = time.perf_counter() - began
    if ran.proc.exit_code != 0:
        raise SystemExit(f"{gate.name} failed on {repo.name}: {ran.proc.output_tail[-500:]}")
    return took, len(ran.report.tests) if ran.report is not None else 0


async def compare(
    label: str, command: str, repo: Path, home: Path, policy: SandboxPolicy, rounds: int
) -> list[object]:
    reporting = RunGate(name="reporting", run=command, timeout=600)
    plain = RunGate(name="plain", run=command, timeout=600, report="exit")
    await one_run(reporting, repo, home, policy)  # warm: the reporter's folder, caches
    times: dict[str, list[float]] = {"reporting": [], "plain": []}
    tests = 0
    for i in range(rounds):
        order = (reporting, plain) if i % 2 == 0 else (plain, reporting)
        for gate in order:
            took, seen = await one_run(gate, repo, home, policy)
            times[gate.name].append(took)
            tests = max(tests, seen)
    r, p = median(times["reporting"]), median(times["plain"])
    spread = statistics.pstdev(times["reporting"]) if rounds > 1 else 0.0
    return [label, tests, p * 1000, r * 1000, (r - p) * 1000, f"{(r / p - 1) * 100:+.1f} %",
            spread * 1000]  # fmt: skip


async def base_run(
    repo: Path, base: str, home: Path, policy: SandboxPolicy, rounds: int
) -> list[object]:
    """Explore's run at base (a checkout of base, the gate, its report kept) next to
    verify's run at the commit (the gate on a checkout, judged against that report)."""
    gate = RunGate(name="tests", run=f"{sys.executable} -m unittest discover -s tests -t .")
    ws = workspace(repo, home / "runs" / "t", base)
    Path(ws.run_dir).mkdir(parents=True, exist_ok=True)
    task = TaskSpec(
        id="t", goal="g", repo=str(repo), agent={"command": ["true"]}, verify=[gate],
        sandbox=policy,
    )  # fmt: skip
    fix = git(repo, "rev-parse", "HEAD")
    made = MakeResult(attempt=1, commit=fix, start_commit=base)
    explore, verify = [], []
    settings = Settings(home=home)
    for _ in range(rounds):
        for kept in Path(ws.run_dir, "base").glob("*.json"):
            kept.unlink()
        bench = gates.Bench(tree=repo, log_dir=Path(ws.run_dir), home=home)
        judging = gates.Judging(
            task, ws, made, bench, checkouts(settings, task, ws, bench.log_dir, 1)
        )
        began = time.perf_counter()
        await judging.at_base(gate)
        explore.append(time.perf_counter() - began)
        judging = gates.Judging(
            task, ws, made, bench, checkouts(settings, task, ws, bench.log_dir, 1)
        )
        began = time.perf_counter()
        await gates.evaluate(judging)
        verify.append(time.perf_counter() - began)
    return ["demo suite (unittest)", median(explore) * 1000, median(verify) * 1000]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument("--mode", default="basic", choices=["basic", "strict", "off"])
    parser.add_argument("--quick", action="store_true", help="3 rounds, 200 tests")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.tests = 3, 200
    print_machine("verdicts: what a reporting gate costs over the exit code alone")
    policy = SandboxPolicy(mode=args.mode, allow_unsafe_off=True)
    print(f"sandbox {args.mode}; {args.rounds} rounds, ABBA; median of each\n", flush=True)
    with temp_home() as home:
        demo, base = fixed_demo(home.parent / "demo")
        big = generated_suite(home.parent, args.tests)
        py = sys.executable
        rows = [
            await compare("demo, unittest", f"{py} -m unittest discover -s tests -t .", demo,
                          home, policy, args.rounds),
            await compare("demo, pytest", f"{py} -m pytest -q tests", demo, home, policy,
                          args.rounds),
            await compare("generated, pytest", f"{py} -m pytest -q tests", big, home, policy,
                          args.rounds),
        ]  # fmt: skip
        print_table(
            ["suite", "tests", "exit code ms", "reporting ms", "+ms", "overhead", "sd ms"],
            rows,
            title="One gate run: reporting (report: auto) against the exit code (report: exit)",
        )
        print_table(
            ["suite", "explore's base run ms", "one verify ms"],
            [await base_run(demo, base, home, policy, args.rounds)],
            title="The base run explore adds, next to one verify",
        )


if __name__ == "__main__":
    asyncio.run(main())
