"""``loop eval``: load a suite and harnesses, pin every case to a commit, run, print.

A case's ``source`` folder becomes a git repository under ``LOOP_HOME/eval/`` with
a deterministic commit (fixed author, date and message), so the same folder
always yields the same commit and the suite hash means the same code everywhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from temporalio.client import Client

from loop import taskfile
from loop.contracts import EVAL_WORKFLOW, EvalInput, EvalReport, Harness, Suite
from loop.errors import TaskFileError
from loop.rules.evaluation import suite_hash

PINNED = {
    "GIT_AUTHOR_NAME": "Loopwork eval",
    "GIT_AUTHOR_EMAIL": "eval@localhost",
    "GIT_COMMITTER_NAME": "Loopwork eval",
    "GIT_COMMITTER_EMAIL": "eval@localhost",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
}


def _load(path: Path, model: Any, what: str) -> Any:
    if not path.is_file():
        raise TaskFileError(f"{what} file {path} not found")
    try:
        return model.model_validate(taskfile.parse(path))
    except ValidationError as e:
        raise TaskFileError(f"{path}: {taskfile.describe(e)}") from None


def load_harness(path: Path) -> Harness:
    harness: Harness = _load(path, Harness, "harness")
    command = harness.agent.command
    if command:  # scripts named next to the harness file run from anywhere
        folder = path.resolve().parent
        resolved = [str(folder / a) if (folder / a).is_file() else a for a in command]
        harness = harness.model_copy(
            update={"agent": harness.agent.model_copy(update={"command": resolved})}
        )
    return harness


def load_suite(path: Path, home: Path) -> Suite:
    suite: Suite = _load(path, Suite, "suite")
    folder = path.resolve().parent
    cases = []
    for case in suite.cases:
        if case.source is not None:
            repo, commit = snapshot(folder / case.source, home / "eval" / suite.name / case.id)
        else:
            assert case.repo is not None and case.commit is not None
            repo, commit = str((folder / case.repo).resolve()), case.commit
        spec = taskfile.validate(
            {
                "id": case.id,
                "goal": case.goal,
                "repo": repo,
                "base": commit,
                "agent": {"command": ["true"]},
                "verify": [g.model_dump() for g in case.verify],
            },
            f"{path}: case {case.id}",
        )
        resolved = taskfile.resolve(spec, folder, f"{path}: case {case.id}")
        cases.append(
            case.model_copy(update={"repo": resolved.repo, "commit": commit, "source": None})
        )
    return suite.model_copy(update={"cases": cases})


def snapshot(source: Path, repo: Path) -> tuple[str, str]:
    """A repository holding exactly ``source``, at a commit that depends only on its files."""
    if not source.is_dir():
        raise TaskFileError(f"case source {source} is not a folder")
    env = {**os.environ, **PINNED}
    if not (repo / ".git").exists():
        repo.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True, env=env)
    for item in repo.iterdir():
        if item.name != ".git":
            shutil.rmtree(item) if item.is_dir() else item.unlink()
    shutil.copytree(source, repo, dirs_exist_ok=True)
    git = ["git", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True, env=env)
    tree = subprocess.run(
        [*git, "write-tree"], cwd=repo, check=True, env=env, capture_output=True, text=True
    ).stdout.strip()
    commit = subprocess.run(
        [*git, "commit-tree", tree, "-m", f"eval case {source.name}"],
        cwd=repo,
        check=True,
        env=env,
        capture_output=True,
        text=True,
    ).stdout.strip()
    subprocess.run([*git, "update-ref", f"refs/eval/{commit}", commit], cwd=repo, check=True)
    subprocess.run([*git, "reset", "-q", "--hard", commit], cwd=repo, check=True, env=env)
    return str(repo.resolve()), commit


async def run_eval(
    client: Client, suite: Suite, harnesses: list[Harness], task_queue: str
) -> EvalReport:
    names = [h.name for h in harnesses]
    if len(set(names)) != len(names):
        raise TaskFileError(f"two harnesses are both named {names[0]!r}; rename one")
    run = uuid.uuid4().hex[:6]
    inp = EvalInput(suite=suite, harnesses=harnesses, suite_hash=suite_hash(suite), run=run)
    return await client.execute_workflow(
        EVAL_WORKFLOW,
        inp,
        id=f"eval-{suite.name}-{run}",
        task_queue=task_queue,
        result_type=EvalReport,
        static_summary=f"eval {suite.name}: {' vs '.join(names)}",
    )


def print_report(out: Console, r: EvalReport) -> None:
    table = Table(
        "harness",
        "pass rate",
        "accepted",
        "mean attempts",
        "tokens",
        "cost",
        "cost / accepted",
        "escalations",
        "time",
    )
    for h in r.harnesses:
        per = "-" if h.cost_per_accepted is None else f"${h.cost_per_accepted:.4f}"
        table.add_row(
            h.harness,
            f"{h.pass_rate:.0%}",
            f"{h.accepted}/{h.cases}",
            f"{h.mean_attempts:.2f}",
            str(h.tokens),
            f"${h.cost_usd:.4f}",
            per,
            str(h.escalations),
            f"{h.seconds:.1f} s",
        )
    out.print(f"suite {r.suite} (hash {r.suite_hash[:12]}), run {r.run}")
    out.print(table)
    cases = Table("case", *[h.harness for h in r.harnesses])
    for case in dict.fromkeys(o.case for o in r.outcomes):
        cells = [
            next(
                (
                    f"{o.state} ({o.attempts})"
                    for o in r.outcomes
                    if o.case == case and o.harness == h.harness
                ),
                "-",
            )
            for h in r.harnesses
        ]
        cases.add_row(case, *cells)
    out.print(cases)
    if len(r.harnesses) > 1:
        a, b = r.harnesses[0], r.harnesses[1]
        out.print(
            f"{b.harness} vs {a.harness}: pass rate {b.pass_rate - a.pass_rate:+.0%}, "
            f"mean attempts {b.mean_attempts - a.mean_attempts:+.2f}, "
            f"cost ${b.cost_usd - a.cost_usd:+.4f}"
        )
        for f in r.flipped:
            out.print(f"  flipped: {f.case}: {f.before} -> {f.after}")
        if not r.flipped:
            out.print("  no case flipped")
    out.print(f"results: {r.results_path}")
