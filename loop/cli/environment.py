"""``loop env``: the repositories' environments this host keeps (``ls``, ``build``, ``prune``),
and what ``loop start --print`` says a task's environment will run.

They are this host's (``LOOP_HOME/envs/``): ``build`` makes one here, with the same
sandbox a worker of this ``LOOP_HOME`` uses (so run it as that worker's user), before a
night of tasks; a host of a fleet builds its own (docs/guides/environment.md).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from activities.host import environments, sandbox
from activities.host.git import GitError, git
from activities.host.remote import mirror, tracking
from loop.cli import console
from loop.contracts import TaskSpec, is_remote
from loop.errors import LoopError
from loop.loaders import load_task
from loop.settings import Settings

env_app = typer.Typer(
    help="The repositories' environments this host keeps: list, build ahead, prune.",
    no_args_is_help=True,
)


@env_app.command("ls")
def env_ls(
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Every environment this host keeps: key, repository, size, last used, who holds it."""
    kept = environments.listing(Settings.from_env().home)
    if as_json:
        console.print_json([k.__dict__ for k in kept])
        return
    if not kept:
        console.out.print("no environments on this host")
        return
    table = Table("key", "repository", "size", "last used", "built", "held by")
    now = time.time()
    for k in kept:
        table.add_row(
            k.key[:12],
            console.inert(k.repository),
            _size(k.size),
            _ago(now - k.last_used),
            _ago(now - k.built_at),
            console.inert(", ".join(k.holders) or "-"),
        )
    console.out.print(table)


@env_app.command("build")
def env_build(
    file: Annotated[Path, typer.Argument(help="a task file with an environment")],
) -> None:
    """Build a task file's environment on this host now (or find it built): later tasks on
    the same key take it at once. A setup that fails is said with its log's tail, exit 1."""
    spec = _load(file)
    settings = Settings.from_env()

    async def main() -> int:
        repo, commit = await _at_base(spec, settings)
        planned = await environments.plan(spec, repo, commit)
        # A build of its own: its uid lease and its hold end with it.
        holder = f"env-build-{uuid.uuid4().hex[:8]}"
        builder = environments.Builder(
            home=settings.home,
            locks=settings.locks,
            spec=spec.model_copy(update={"id": holder}),
            repo=repo,
            commit=commit,
            state_dir=settings.runs / holder / "environment",
            hidden=[] if is_remote(spec.repo) else [Path(spec.repo)],
            host=settings.host_id,
            repository=spec.repo,
        )
        try:
            found = await builder.find_or_build(planned)
        finally:
            environments.release(settings.home, holder)
            await asyncio.to_thread(sandbox.release, settings.home, holder)
        console.out.print(f"environment {found.said()}", markup=False)
        console.out.print(f"keeps {', '.join(found.paths)} in {found.root}", markup=False)
        return 0

    try:
        code = asyncio.run(main())
    except environments.SetupFailed as e:
        console.err.print(f"error: {e}", markup=False)
        raise typer.Exit(1) from None
    except (LoopError, GitError) as e:
        console.fail(str(e))
    raise typer.Exit(code)


@env_app.command("prune")
def env_prune(
    older_than: Annotated[
        float | None, typer.Option(min=0, help="remove what was last used more than DAYS ago")
    ] = None,
    max_size: Annotated[
        float | None,
        typer.Option(min=0, help="then remove the least recently used until the rest fit in GB"),
    ] = None,
) -> None:
    """Remove environments nobody holds: by age, then by size. One a running task holds, or
    one being built, is never removed."""
    if older_than is None and max_size is None:
        console.fail("say what to prune: --older-than DAYS and/or --max-size GB")
    gone = environments.prune(
        Settings.from_env().home,
        older_than_s=older_than * 86_400 if older_than is not None else None,
        max_bytes=int(max_size * 1e9) if max_size is not None else None,
    )
    for k in gone:
        console.out.print(f"removed {k.key[:12]} ({console.inert(k.repository)}, {_size(k.size)})")
    console.out.print(f"{len(gone)} removed, {_size(sum(k.size for k in gone))} freed")


def describe(spec: TaskSpec) -> list[str]:
    """What ``loop start --print`` says of the task's environment: where its setup comes
    from, the commands, what it keeps, where it may reach."""
    env = spec.environment
    if env is None:
        return []
    hosts = ", ".join(env.allow_hosts) or "nothing (no network)"
    if env.setup != "auto":
        setup, paths, origin = list(env.setup), env.wanted_paths(), "the task file"
    elif is_remote(spec.repo):
        return [
            "environment: auto, found on the worker from base's files "
            f"(`loop env build` shows what it runs); may reach {hosts}"
        ]
    else:
        settings = Settings.from_env()
        try:
            repo, commit = asyncio.run(_at_base(spec, settings))
            planned = asyncio.run(environments.plan(spec, repo, commit))
        except environments.SetupFailed as e:
            return [str(e)]
        setup, paths, origin = planned.setup, planned.paths, planned.origin
    lines = [f"environment (from {origin}), run once per key in the sandbox:"]
    lines += [f"  $ {command}" for command in setup]
    lines.append(f"  keeps {', '.join(paths)}; may reach {hosts}")
    return lines


async def _at_base(spec: TaskSpec, settings: Settings) -> tuple[str, str]:
    """The repository to check base out from (this host's mirror of a URL), and base."""
    if not is_remote(spec.repo):
        repo = spec.repo
        names = [spec.base or "HEAD"]
    else:
        repo = await mirror(settings.repos, settings.locks, spec.repo)
        names = [tracking(spec.base), spec.base] if spec.base else ["HEAD"]
    for name in names:
        try:
            return repo, (await git(["rev-parse", "--verify", f"{name}^{{commit}}"], repo)).strip()
        except GitError:
            continue
    raise LoopError(f"{spec.repo} has no commit {spec.base or 'HEAD'}")


def _load(file: Path) -> TaskSpec:
    try:
        spec = load_task(file)
    except LoopError as e:
        console.fail(str(e))
    if spec.environment is None:
        console.fail(f"{file}: no environment to build (add environment: with setup:)")
    return spec


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n < 1e9 else f"{n / 1e9:.2f} GB"


def _ago(seconds: float) -> str:
    for unit, length in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= length:
            return f"{seconds / length:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"
