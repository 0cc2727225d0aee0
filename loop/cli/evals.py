"""``loop eval``: run a suite under one or two harnesses and compare them."""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from rich.console import Console
from rich.table import Table
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from typer.core import TyperGroup

from loop.cli import console
from loop.contracts import (
    EVAL_WORKFLOW,
    MINE_WORKFLOW,
    QUERY_MINE_PROGRESS,
    TASK_ID_PATTERN,
    EvalInput,
    EvalReport,
    Harness,
    MineInput,
    MineResult,
    SandboxPolicy,
    Suite,
)
from loop.errors import LoopError, TaskFileError
from loop.loaders import load_harness, load_suite, load_task
from loop.rules.evaluation import suite_hash
from loop.settings import Settings
from loop.tasks import has_worker


class _RunByDefault(TyperGroup):
    """``loop eval SUITE ...`` runs a suite, as it always has; ``loop eval mine REPO`` mines
    one: a first word that names no subcommand is the suite of ``run``."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            return "run", self.commands["run"], args
        return super().resolve_command(ctx, args)


eval_app = typer.Typer(
    cls=_RunByDefault,
    help="Harness evaluation: run a suite under one or two harnesses (loop eval SUITE "
    "--harness H [--vs H2]), or mine one from a repository's history (loop eval mine REPO).",
    no_args_is_help=True,
)


@eval_app.command("run")
def eval_(
    suite_file: Annotated[Path, typer.Argument(metavar="SUITE", help="suite file (YAML/JSON)")],
    harness: Annotated[Path, typer.Option(help="harness file (model, prompt, agent, budgets)")],
    vs: Annotated[Path | None, typer.Option(help="a second harness to compare with")] = None,
) -> None:
    """Run every case of a suite under one or two harnesses and compare them."""
    settings = Settings.from_env()
    try:
        harnesses = [load_harness(harness)] + ([load_harness(vs)] if vs else [])
        suite = load_suite(suite_file, settings.home)
    except LoopError as e:
        console.fail(str(e))

    async def main() -> None:
        client = await console.client()
        if not await has_worker(client, settings.task_queue):
            console.err.print(f"note: no worker polls {settings.task_queue!r}; start `loop worker`")
        console.out.print(
            f"running {len(suite.cases)} cases x {len(harnesses)} harness(es), "
            f"{suite.max_parallel} at a time …"
        )
        print_report(console.out, await run_eval(client, suite, harnesses, settings.task_queue))

    console.run(main)


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
        "pass@1",
        "pass@k",
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
            f"{h.pass_at_1:.0%}",
            f"{h.pass_at_k:.0%} (k={h.k})",
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
    f2p = any(o.fail_to_pass for o in r.outcomes)
    columns = [h.harness for h in r.harnesses]
    if f2p:
        columns = [c for h in r.harnesses for c in (h.harness, f"{h.harness} FAIL_TO_PASS")]
    cases = Table("case", *columns)
    for case in dict.fromkeys(o.case for o in r.outcomes):
        cells: list[str] = []
        for h in r.harnesses:
            o = next((o for o in r.outcomes if o.case == case and o.harness == h.harness), None)
            cells.append(f"{o.state} ({o.attempts})" if o else "-")
            if f2p:
                cells.append(o.fail_to_pass or "-" if o else "-")
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


@eval_app.command("mine")
def mine(
    repo: Annotated[Path, typer.Argument(help="the git repository whose history to mine")],
    run: Annotated[
        str,
        typer.Option(help="the command that runs its tests (pytest or python -m unittest)"),
    ] = "python -m pytest -q",
    name: Annotated[
        str | None, typer.Option(help="the suite's name (default: the repository's folder)")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="where the suite is written (default: ./mined-<name>)")
    ] = None,
    since: Annotated[str | None, typer.Option(help="only commits after this date")] = None,
    paths: Annotated[
        list[str] | None, typer.Option("--paths", help="only commits that touch these paths")
    ] = None,
    max_cases: Annotated[int, typer.Option(help="stop after this many cases")] = 20,
    environment: Annotated[
        Path | None,
        typer.Option(help="a task file whose environment (and sandbox) the tests need"),
    ] = None,
    timeout: Annotated[int, typer.Option(help="seconds one run of the tests may take")] = 600,
) -> None:
    """Mine an eval suite from a repository's history.

    Each commit that changes tests and code, whose tests fail on its parent and pass at
    it (twice each), becomes a case whose tests the agent never sees."""
    settings = Settings.from_env()
    inp = _mine_input(repo, run, name, out, since, paths or [], max_cases, environment, timeout)

    async def main() -> None:
        client = await console.client()
        if not await has_worker(client, settings.task_queue):
            console.err.print(f"note: no worker polls {settings.task_queue!r}; start `loop worker`")
        console.out.print(f"mining {inp.repo} into {inp.out} …")
        handle = await client.start_workflow(
            MINE_WORKFLOW,
            inp,
            id=f"mine-{inp.name}-{uuid.uuid4().hex[:6]}",
            task_queue=settings.task_queue,
            result_type=MineResult,
            static_summary=f"mine {inp.repo}",
        )
        shown = 0
        result: MineResult | None = None
        ending = asyncio.ensure_future(handle.result())
        while result is None:
            try:
                result = await asyncio.wait_for(asyncio.shield(ending), 1.0)
            except TimeoutError:
                pass
            except WorkflowFailureError as e:
                cause = e.cause.message if isinstance(e.cause, ApplicationError) else str(e)
                console.err.print(f"loop eval mine: {cause}", markup=False)
                raise typer.Exit(1) from None
            lines = await _progress(handle)
            for line in lines[shown:]:
                console.out.print(f"  {line}", markup=False)
            shown = max(shown, len(lines))
        console.out.print(
            f"{len(result.cases)} case(s), {len(result.dropped)} commit(s) not cases: "
            f"{result.suite_path}"
        )
        console.out.print(f"run it: loop eval {result.suite_path} --harness HARNESS", markup=False)

    console.run(main)


async def _progress(handle: WorkflowHandle[Any, MineResult]) -> list[str]:
    try:
        found: list[str] = await handle.query(QUERY_MINE_PROGRESS, result_type=list[str])
    except RPCError:
        return []
    return found


def _mine_input(
    repo: Path,
    run: str,
    name: str | None,
    out: Path | None,
    since: str | None,
    paths: list[str],
    max_cases: int,
    environment: Path | None,
    timeout: int,
) -> MineInput:
    """The mining's input, checked here: bad input is one line and exit 2, nothing started."""
    top = repo.expanduser().resolve()
    if not (top / ".git").exists():
        console.fail(f"{repo}: not a git repository (the folder holding .git)")
    suite = name or re.sub(r"[^a-z0-9._-]", "-", top.name.lower()).strip("-._") or "mined"
    if not re.fullmatch(TASK_ID_PATTERN, suite):
        console.fail(f"--name {suite!r}: use lowercase letters, digits, '.', '_', '-'")
    folder = (out or Path(f"mined-{suite}")).expanduser().resolve()
    if folder == top or top in folder.parents:
        console.fail(f"--out {folder} is inside the repository; write the suite outside it")
    env, policy = None, SandboxPolicy()
    if environment is not None:
        try:
            spec = load_task(environment)
        except LoopError as e:
            console.fail(str(e))
        env, policy = spec.environment, spec.sandbox
    try:
        return MineInput(
            repo=str(top), name=suite, run=run, out=str(folder), since=since, paths=paths,
            max_cases=max_cases, environment=env, sandbox=policy, timeout=timeout,
        )  # fmt: skip
    except ValueError as e:
        console.fail(f"loop eval mine: {str(e).splitlines()[-1]}")
