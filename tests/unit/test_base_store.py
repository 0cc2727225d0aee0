"""The worker's store of runs at base (``activities/gates/judging.py``): what a later task
copies is the worker's own file, never where a link or a FIFO in its place leads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from activities.gates.command import Ran
from activities.gates.judging import _copied, _share
from activities.host.proc import ProcResult


def ran_with_log(log: Path) -> Ran:
    return Ran(proc=ProcResult(exit_code=0, output_tail="ok", log_path=str(log)), path="")


def test_a_run_at_base_is_kept_and_copied_whole(tmp_path: Path) -> None:
    log = tmp_path / "gate.log"
    log.write_text("3 passed\n")
    shared, kept = tmp_path / "store" / "tests-k", tmp_path / "task" / "base" / "tests-k.json"
    _share(ran_with_log(log), shared)
    copied = _copied(shared, kept)
    assert copied is not None and copied.path == str(kept)
    assert Path(copied.proc.log_path).read_text() == "3 passed\n"
    assert Path(copied.proc.log_path).parent == kept.parent  # the task's own copy


def test_a_link_or_fifo_for_a_log_is_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("the worker's key\n")
    link = tmp_path / "gate.log"
    link.symlink_to(secret)
    shared = tmp_path / "store" / "tests-k"
    _share(ran_with_log(link), shared)
    assert not shared.exists(), "nothing kept rather than the link's target"
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    _share(ran_with_log(fifo), shared)  # would block on a FIFO opened for reading
    assert not shared.exists()
    # A store entry whose log became a link: the later task runs base itself.
    log = tmp_path / "real.log"
    log.write_text("ok\n")
    _share(ran_with_log(log), shared)
    (shared / "gate.log").unlink()
    (shared / "gate.log").symlink_to(secret)
    assert _copied(shared, tmp_path / "task" / "base" / "tests-k.json") is None


async def test_code_at_base_is_listed_once_per_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Explore and every verdict on one base ask for its code files: git answers once per
    commit, and another commit (of the same repository) gets its own answer."""
    from activities.gates import judging
    from tests.support.repos import git as git_sh

    repo = tmp_path / "repo"
    repo.mkdir()
    git_sh(repo, "init", "-q", "-b", "main")
    (repo / "app.py").write_text("x = 1\n")
    (repo / "test_app.py").write_text("def test(): pass\n")
    git_sh(repo, "add", "-A")
    git_sh(repo, "commit", "-q", "-m", "one")
    first = git_sh(repo, "rev-parse", "HEAD")
    (repo / "more.py").write_text("y = 2\n")
    git_sh(repo, "add", "-A")
    git_sh(repo, "commit", "-q", "-m", "two")
    second = git_sh(repo, "rev-parse", "HEAD")
    calls: list[list[str]] = []
    real = judging.git

    async def counted(args: list[str], cwd: object, **kw: object) -> str:
        calls.append(args)
        return await real(args, cwd, **kw)  # type: ignore[arg-type]  # git's own arguments

    monkeypatch.setattr(judging, "git", counted)
    assert await judging.code_at(first, str(repo)) == {"app.py"}
    assert await judging.code_at(first, str(repo)) == {"app.py"}
    assert len(calls) == 1
    assert await judging.code_at(second, str(repo)) == {"app.py", "more.py"}
    assert len(calls) == 2
