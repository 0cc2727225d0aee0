"""``loop eval``: run a suite under one or two harnesses and compare them."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from temporalio.client import Client

from loop.cli import console
from loop.contracts import EVAL_WORKFLOW, EvalInput, EvalReport, Harness, Suite
from loop.errors import LoopError, TaskFileError
from loop.loaders import load_harness, load_suite
from loop.rules.evaluation import suite_hash
from loop.settings import Settings
from loop.tasks import has_worker


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
