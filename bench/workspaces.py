"""What a task's own clone costs against the git worktree it replaced.

``prepare_workspace`` makes each task a clone with one branch, whose objects come
from a store of base history (alternates), so that no task can read another's
work. The first task on a repository fills the store (a push of base's history);
every later one only checks out. The baseline is what came before: ``git worktree
add`` in the repository. Measured on the demo repository and on a generated one
(``--files`` files over ``--commits`` commits), medians of ``--rounds`` tasks.

    .venv/bin/python bench/workspaces.py [--rounds 10] [--files 5000] [--commits 200] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from common import git, make_demo_repo, median, print_machine, print_table, temp_home

from activities.workspace import WorkspaceActivities
from loop.contracts import PrepareInput, RemoveInput
from loop.settings import Settings


def generated_repo(folder: Path, files: int, commits: int) -> Path:
    """A repository of ``files`` small text files, built over ``commits`` commits."""
    repo = folder / "generated"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    per = max(1, files // commits)
    made = 0
    for c in range(commits):
        for i in range(per if c < commits - 1 else files - made):
            path = repo / f"pkg{(made + i) % 50}" / f"mod{made + i}.py"
            path.parent.mkdir(exist_ok=True)
            path.write_text(f"VALUE = {made + i}\n" * 20)
        made += per if c < commits - 1 else files - made
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"commit {c}")
    return repo


async def clones(home: Path, repo: Path, rounds: int) -> tuple[float, list[float]]:
    """Seconds for the first task (fills the store) and for each later one."""
    acts = WorkspaceActivities(Settings(home=home))
    times = []
    for n in range(rounds + 1):
        start = time.perf_counter()
        ws = await acts.prepare_workspace(
            PrepareInput(task_id=f"c{n}", repo=str(repo), base="main", run_id="r")
        )
        times.append(time.perf_counter() - start)
        await acts.remove_workspace(RemoveInput(workspace=ws, delete_branch=True))
    return times[0], times[1:]


def worktrees(folder: Path, repo: Path, rounds: int) -> list[float]:
    times = []
    for n in range(rounds):
        path = folder / f"wt{n}"
        start = time.perf_counter()
        git(repo, "worktree", "add", "-q", "-b", f"bench/w{n}", str(path), "main")
        times.append(time.perf_counter() - start)
        git(repo, "worktree", "remove", str(path))
    return times


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="3 tasks, 500 files")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.files, args.commits = 3, 500, 20
    print_machine("Workspaces: a task's own clone against a git worktree")
    rows = []
    with temp_home() as home:
        folder = home.parent
        for name, repo in [
            ("demo", make_demo_repo(folder / "demo")),
            (f"generated, {args.files:,} files", generated_repo(folder, args.files, args.commits)),
        ]:
            first, later = await clones(home, repo, args.rounds)
            plain = worktrees(folder, repo, args.rounds)
            rows.append(
                [name, round(median(plain) * 1000, 1), round(first * 1000, 1),
                 round(median(later) * 1000, 1), round(median(later) / median(plain), 2)]
            )  # fmt: skip
    print_table(
        ["repository", "worktree add ms", "first clone ms", "later clone ms", "later / worktree"],
        rows,
    )
    print(
        "\nfirst clone: prepare_workspace with an empty store (it pushes base's history);"
        "\nlater clone: prepare_workspace once the store has base (init, alternates, checkout)."
    )


if __name__ == "__main__":
    asyncio.run(main())
