"""What keeping each attempt's commit in the repository costs (``refs/loopwork/<id>``).

``make`` pushes every attempt's work-in-progress commit from the task's clone into the
repository, so an ended task's diff outlives its clone and its branch. That push is on
every attempt's path; this measures it against the attempt's commit itself
(``wip_commit``), on the demo repository and on a generated one, medians of
``--rounds`` attempts of one task (each attempt changes one file, as the demo's do).

    .venv/bin/python bench/kept_attempts.py [--rounds 20] [--files 5000] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from common import make_demo_repo, median, print_machine, print_table, temp_home
from workspaces import generated_repo

from activities.host.clone import keep_attempt
from activities.host.worktree import wip_commit
from activities.workspace import WorkspaceActivities
from loop.contracts import PrepareInput
from loop.settings import Settings


async def attempts(home: Path, repo: Path, rounds: int) -> tuple[list[float], list[float]]:
    """Seconds of each attempt's commit, and of keeping it in the repository."""
    settings = Settings(home=home)
    ws = await WorkspaceActivities(settings).prepare_workspace(
        PrepareInput(task_id=f"kept-{repo.name}", repo=str(repo), base="main", run_id="r")
    )
    commits, kept = [], []
    for n in range(1, rounds + 1):
        (Path(ws.path) / "attempt.txt").write_text(f"attempt {n}\n" * 50)
        start = time.perf_counter()
        commit = await wip_commit(ws, n)
        commits.append(time.perf_counter() - start)
        start = time.perf_counter()
        await keep_attempt(ws, commit, settings.locks)
        kept.append(time.perf_counter() - start)
    return commits, kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--quick", action="store_true", help="3 rounds, 500 files")
    args = parser.parse_args()
    rounds, files = (3, 500) if args.quick else (args.rounds, args.files)
    print_machine("Keeping each attempt's commit in the repository")
    rows = []
    with temp_home() as home:
        (home.parent / "demo").mkdir()
        demo = make_demo_repo(home.parent / "demo")
        for repo in (demo, generated_repo(home.parent, files, 200)):
            commits, kept = asyncio.run(attempts(home, repo, rounds))
            rows.append(
                [repo.name, rounds, round(median(commits) * 1000, 1),
                 round(median(kept) * 1000, 1), round(max(kept) * 1000, 1)]
            )  # fmt: skip
    print_table(
        ["repository", "attempts", "wip commit, ms (median)", "kept ref, ms (median)",
         "kept ref, ms (max)"],
        rows,
    )  # fmt: skip


if __name__ == "__main__":
    main()
