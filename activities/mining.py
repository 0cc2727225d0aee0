"""``loop eval mine``'s steps: list a history's candidate fixes, prove each, write the suite.

The repository's code and history are untrusted: its tests run only in the sandbox, as a
gate's do (``activities.gates.command``), on checkouts of the worker's own bare clone
(``LOOP_HOME/mine/<suite>/repo.git``), never in the person's repository. A candidate's
tests run on its parent with its test files laid over it, then on the commit, twice each
(``loop.rules.mining`` says what the four reports make of it).

The suite folder holds, per case, a repository of one commit (the parent's tree, no
history: nothing later, the fix least of all, is in its objects) and the fix's test files
under ``hidden/<case>``, and is made 0700: no task's sandbox (a uid of its own) can list
it, and each case's runs also cover its own hidden folder.
"""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import tarfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio import activity

from activities.gates.command import run_command
from activities.host import artifact, environments, hidden
from activities.host.clone import ALLOW_LOCAL
from activities.host.git import git
from activities.host.proc import heartbeating
from loop.contracts import (
    LIST_FIXES,
    VALIDATE_FIX,
    WRITE_MINED,
    AgentSpec,
    FixCandidate,
    ListFixesResult,
    MineInput,
    MineResult,
    RunGate,
    SuiteReport,
    TaskSpec,
    ValidateFixInput,
    ValidateFixResult,
    Workspace,
    WriteMinedInput,
)
from loop.errors import permanent
from loop.hardened import git as hardened_git
from loop.hardened import tar as hardened_tar
from loop.loaders.evals import snapshot
from loop.rules import mining
from loop.rules.tamper import is_test_path
from loop.settings import Settings

RUNS = 2
"""Runs per side: a test whose outcome differs between them is flaky."""


class MiningActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def _folder(self, inp: MineInput) -> Path:
        return self.settings.home / "mine" / inp.name

    @activity.defn(name=LIST_FIXES.name)
    async def list_fixes(self, inp: MineInput) -> ListFixesResult:
        if not Path(inp.repo, ".git").exists() and not Path(inp.repo, "HEAD").is_file():
            raise permanent(f"{inp.repo} is not a git repository on this host")
        clone = self._folder(inp) / "repo.git"
        if not clone.exists():
            clone.parent.mkdir(parents=True, exist_ok=True)
            await git(["init", "-q", "--bare", str(clone)], clone.parent)
        fetch = [*ALLOW_LOCAL, "fetch", "-q", "--no-tags", inp.repo, "+HEAD:refs/heads/mined"]
        await git(fetch, clone)
        head = await git(["rev-parse", "mined^{commit}"], clone)
        listing = ["rev-list", "--no-merges", f"--max-count={inp.max_commits}"]
        if inp.since:
            listing.append(f"--since={inp.since}")
        listing += [head, "--", *inp.paths]
        commits = (await git(listing, clone)).split()
        candidates: list[FixCandidate] = []
        skipped = 0
        for commit in commits:
            activity.heartbeat(commit)
            parents = (await git(["rev-list", "--parents", "-n", "1", commit], clone)).split()[1:]
            if len(parents) != 1:
                skipped += 1
                continue
            existing = await _changed(clone, parents[0], commit, "--diff-filter=AM")
            tests = [f for f in existing if is_test_path(f)]
            _, others = mining.split(await _changed(clone, parents[0], commit))
            if not tests or not others:
                skipped += 1
                continue
            message = await git(["log", "-1", "--format=%B", commit], clone)
            candidates.append(
                FixCandidate(
                    commit=commit, parent=parents[0], message=message, test_files=tests
                )
            )  # fmt: skip
        return ListFixesResult(
            clone=str(clone), head=head, candidates=candidates, skipped=skipped,
            host_queue=self.settings.host_queue,
        )  # fmt: skip

    @activity.defn(name=VALIDATE_FIX.name)
    async def validate_fix(self, inp: ValidateFixInput) -> ValidateFixResult:
        mine, candidate = inp.mine, inp.candidate
        folder = self._folder(mine) / candidate.commit[:12]
        try_no = activity.info().attempt
        tests, problem = await hidden.from_commit(inp.clone, candidate.commit, candidate.test_files)
        if problem:
            return ValidateFixResult(dropped=problem)
        gate = RunGate(name="tests", run=mine.run, timeout=mine.timeout)
        spec = _spec(mine, inp.clone, gate)
        sides: dict[str, list[SuiteReport | None]] = {}
        for side, commit, laid in (
            ("parent", candidate.parent, tests),
            ("fix", candidate.commit, {}),
        ):
            ws = await self._workspace(spec, inp.clone, commit, folder / side)
            reports: list[SuiteReport | None] = []
            for n in range(RUNS):
                where = folder / f"{side}-{n}"
                async with artifact.checkout(
                    inp.clone, commit, where, try_no, self.settings.locks
                ) as tree:
                    if laid:
                        await asyncio.to_thread(hidden.lay, tree, laid)
                    ran = await run_command(gate, ws, tree, where, self.settings.home, mine.sandbox)
                reports.append(ran.report)
            sides[side] = reports
        case, dropped = mining.judge(candidate, mine.name, sides["parent"], sides["fix"])
        return ValidateFixResult(case=case, dropped=dropped)

    async def _workspace(self, spec: TaskSpec, clone: str, commit: str, folder: Path) -> Workspace:
        """The workspace a validation's runs see: the clone, and the repository's
        environment at ``commit`` where the suite names one."""
        folder.mkdir(parents=True, exist_ok=True)
        ws = Workspace(
            task_id=spec.id, repo=clone, path=clone, branch="mined", base_ref="mined",
            base_commit=commit, run_dir=str(folder),
        )  # fmt: skip
        if spec.environment is None:
            return ws
        builder = environments.Builder(
            home=self.settings.home,
            locks=self.settings.locks,
            spec=spec,
            repo=clone,
            commit=commit,
            state_dir=folder / "environment",
            hidden=[],
            host=self.settings.host_id,
            repository=clone,
        )
        try:
            planned = await environments.plan(spec, clone, commit)
            found = await heartbeating(builder.find_or_build(planned))
        except environments.SetupFailed as e:
            raise permanent(f"the environment does not build at {commit[:12]}: {e}") from None
        return ws.model_copy(update={"environment": found})

    @activity.defn(name=WRITE_MINED.name)
    async def write_mined(self, inp: WriteMinedInput) -> MineResult:
        out = Path(inp.mine.out)
        await asyncio.to_thread(_private_folder, out)
        cases: list[dict[str, Any]] = []
        for case in inp.cases:
            activity.heartbeat(case.id)
            repo = out / "cases" / case.id
            commit = await _one_commit(inp.clone, case.parent, repo, out / ".mining")
            files, problem = await hidden.from_commit(inp.clone, case.commit, case.test_files)
            if problem:
                raise RuntimeError(problem)
            folder = out / "hidden" / case.id
            await asyncio.to_thread(_write_hidden, folder, files)
            cases.append(_case_entry(inp.mine, case, commit))
        suite = {"name": inp.mine.name, "cases": cases}
        path = out / "suite.yaml"
        await asyncio.to_thread(_write_suite, path, suite, inp)
        return MineResult(suite_path=str(path), cases=inp.cases, dropped=inp.dropped)


async def _changed(clone: Path, parent: str, commit: str, *only: str) -> list[str]:
    names = await git(
        ["diff-tree", "--no-commit-id", "--name-only", "-r", "-z", "--no-renames", *only,
         parent, commit],
        clone,
    )  # fmt: skip
    return [n for n in names.split("\0") if n]


def _spec(mine: MineInput, clone: str, gate: RunGate) -> TaskSpec:
    return TaskSpec(
        id=f"mine-{mine.name}"[:63],
        goal="mine a history",
        repo=clone,
        agent=AgentSpec(command=["true"]),
        verify=[gate],
        sandbox=mine.sandbox,
        environment=mine.environment,
    )


async def _one_commit(clone: str, commit: str, repo: Path, scratch: Path) -> str:
    """``commit``'s tree as a repository of one commit with a commit id that depends only
    on the files: no history, no later object."""
    archive = await hardened_git.run(["archive", "--format=tar", commit], clone)
    if archive.code != 0:
        raise RuntimeError(f"git archive {commit[:12]} failed: {archive.err.strip()}")
    source = scratch / commit[:12]

    def unpack() -> None:
        if source.exists():
            shutil.rmtree(source)
        source.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(archive.out)) as tar:
            hardened_tar.unpack(tar, source)

    await asyncio.to_thread(unpack)
    _, made = await asyncio.to_thread(snapshot, source, repo)
    await asyncio.to_thread(shutil.rmtree, source)
    return made


def _private_folder(out: Path) -> None:
    """The suite's folder: anyone may open ``suite.yaml`` by name, nobody but the worker may
    list it or enter ``cases/`` and ``hidden/`` (a task's sandbox is a uid of its own)."""
    out.mkdir(parents=True, exist_ok=True)
    os.chmod(out, 0o711)
    for inner in ("cases", "hidden", ".mining"):
        (out / inner).mkdir(exist_ok=True)
        os.chmod(out / inner, 0o700)


def _write_hidden(folder: Path, files: dict[str, bytes]) -> None:
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, mode=0o700)
    hidden.lay(folder, files)
    for path in [folder, *folder.rglob("*")]:
        os.chmod(path, 0o700 if path.is_dir() else 0o600)


def _case_entry(mine: MineInput, case: Any, commit: str) -> dict[str, Any]:
    hidden_tests: dict[str, Any] = {
        "ref": f"hidden/{case.id}",
        "files": case.test_files,
        "command": mine.run,
        "timeout": mine.timeout,
        "fail_to_pass": case.fail_to_pass,
        "pass_to_pass": case.pass_to_pass,
    }
    entry: dict[str, Any] = {
        "id": case.id,
        "goal": case.goal,
        "repo": f"cases/{case.id}",
        "commit": commit,
        "verify": [{"name": "hidden", "hidden_tests": hidden_tests}],
    }
    if mine.environment is not None:
        entry["environment"] = mine.environment.model_dump(mode="json", exclude_defaults=True)
    return entry


def _write_suite(path: Path, suite: dict[str, Any], inp: WriteMinedInput) -> None:
    import yaml  # here, not at the top: a new worker starts without it

    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"# Mined by `loop eval mine` from {inp.mine.repo} at {inp.head[:12]} on {when}.",
        "# Each case: the parent of a fix as a repository of one commit (cases/<id>), the",
        "# fix's tests hidden from the agent (hidden/<id>), judged by the FAIL_TO_PASS and",
        "# PASS_TO_PASS ids recorded when every case was validated twice.",
    ]
    if inp.dropped:
        lines.append("# Not cases:")
        lines += [f"#   {d}" for d in inp.dropped]
    body = yaml.safe_dump(suite, sort_keys=False, allow_unicode=True, width=100)
    path.write_text("\n".join(lines) + "\n" + body)
    os.chmod(path, 0o644)
