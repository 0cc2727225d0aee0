"""``loop budget``: per-repository period budgets (cost and tokens per UTC day)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from loop.budgets import set_limits
from loop.cli import console
from loop.cli.render import count, money
from loop.contracts import (
    LEDGER_WORKFLOW,
    QUERY_LEDGER,
    DaySpend,
    LedgerState,
    PeriodLimits,
)
from loop.errors import LoopError
from loop.hardened import git
from loop.rules import budget
from loop.settings import Settings

budget_app = typer.Typer(
    help="Per-repository period budgets: cost and tokens per UTC day, across all tasks.",
    no_args_is_help=True,
)


@budget_app.command("set")
def budget_set(
    repo: Annotated[Path, typer.Argument(help="the repository (any folder inside it)")],
    cost_per_day: Annotated[float | None, typer.Option(min=0, help="dollars per UTC day")] = None,
    tokens_per_day: Annotated[int | None, typer.Option(min=0, help="tokens per UTC day")] = None,
) -> None:
    """Set a repository's daily limits; new attempts wait in NEEDS_HUMAN once one is spent."""
    top = _repo_top(repo)
    settings = Settings.from_env()

    async def main() -> None:
        client = await console.client()
        limits = PeriodLimits(cost_per_day=cost_per_day, tokens_per_day=tokens_per_day)
        state = await set_limits(client, top, limits, settings.task_queue)
        _print_ledger(state)

    console.run(main)


@budget_app.command("show")
def budget_show(
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """Every repository's limits, today's spend, and what running attempts hold."""

    async def main() -> None:
        client = await console.client()
        states = []
        queue = Settings.from_env().task_queue
        query = (
            f'WorkflowType="{LEDGER_WORKFLOW}" AND ExecutionStatus="Running" '
            f'AND TaskQueue="{queue}"'
        )
        async for wf in client.list_workflows(query):
            handle = client.get_workflow_handle(wf.id)
            try:
                ledger = handle.query(QUERY_LEDGER, result_type=LedgerState)
                states.append(await asyncio.wait_for(ledger, timeout=10))
            except TimeoutError:
                raise LoopError(
                    f"ledger {wf.id} did not answer: is a worker serving {queue!r} running?"
                ) from None
        if as_json:
            console.print_json([st.model_dump(mode="json") for st in states])
            return
        if not states:
            console.out.print(
                "no period budgets; set one with `loop budget set REPO --cost-per-day X`"
            )
        for st in states:
            _print_ledger(st)

    console.run(main)


def _repo_top(repo: Path) -> str:
    if not repo.is_dir():
        console.fail(f"{repo} is not a folder inside a git repository")
    found = git.run_sync(["rev-parse", "--show-toplevel"], repo)
    if found.code != 0:
        console.fail(f"{repo} is not a folder inside a git repository")
    return str(Path(found.text.strip()).resolve())


def _print_ledger(st: LedgerState) -> None:
    today = datetime.now(UTC).date().isoformat()
    day = st.days.get(today, DaySpend())
    lim = st.limits
    table = Table("per UTC day", "limit", f"spent {today}", "held by running attempts", "left")
    cost_left = budget.left(lim.cost_per_day, day.cost_usd + day.reserved_cost_usd)
    tokens_left = budget.left(lim.tokens_per_day, day.tokens + day.reserved_tokens)
    table.add_row(
        "cost",
        money(lim.cost_per_day),
        money(day.cost_usd),
        money(day.reserved_cost_usd),
        money(cost_left),
    )
    table.add_row(
        "tokens",
        count(lim.tokens_per_day),
        count(day.tokens),
        count(day.reserved_tokens),
        count(tokens_left),
    )
    console.out.print(st.repo, markup=False)
    console.out.print(table)
    if st.open:
        console.out.print(f"open reservations: {', '.join(sorted(st.open))}", markup=False)
