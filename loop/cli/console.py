"""What every command shares: the two consoles, the connection, running a command.

Exit codes (docs/architecture.md, "The CLI"): 0 ok · 1 a waited-for task ended
other than DONE_WITH_EVIDENCE · 2 bad input (nothing started, nothing sent) ·
3 a waited-for task waits for a person.
Loopwork's own errors become one ``error:`` line and exit 2 (``run``, ``fail``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.text import Text
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from loop.client import connect
from loop.contracts import (
    TaskResult,
    TaskStatus,
)
from loop.errors import BadInput, LoopError
from loop.hardened.text import for_terminal
from loop.tasks import live_status, task_state

WAITING = 3
"""The exit code of ``loop start --wait`` when the task waits for a person."""

PIPED_WIDTH = 400
"""Piped output is read by programs and `grep`: tables at their natural width, not 80."""


def _width(stream: Any) -> int | None:
    return None if stream.isatty() or os.environ.get("COLUMNS") else PIPED_WIDTH


class _Inert(Console):
    """A console on which nothing printed can act: no markup is parsed (colours come
    from ``Text`` styles), and every string rendered (printed, or a table's cell) has
    its control and invisible characters shown as stand-ins (``loop.hardened.text``).
    What the CLI prints holds agents', repositories' and issues' text."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(for_terminal(text), **kwargs)


out = _Inert(highlight=False, soft_wrap=True, markup=False, width=_width(sys.stdout))
err = _Inert(stderr=True, highlight=False, soft_wrap=True, markup=False, width=_width(sys.stderr))


def inert(text: str, style: str = "") -> Text:
    """``text`` as a rich ``Text`` (never parsed as markup), controls shown as stand-ins."""
    return Text(for_terminal(text), style=style)


def print_json(data: Any) -> None:
    """JSON for programs: ASCII only, so no character of an agent's reaches a terminal raw."""
    out.file.write(json.dumps(data, indent=2, ensure_ascii=True) + "\n")
    out.file.flush()


T = TypeVar("T")


@dataclass
class Connection:
    """``--address`` and ``--namespace``, given before the command (else Temporal's config)."""

    address: str | None = None
    namespace: str | None = None


connection = Connection()


def run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    """Run one command; Loopwork's own errors become a one-line message and exit 2."""
    try:
        return asyncio.run(coro_fn())  # type: ignore[arg-type]  # any awaitable: a coroutine here
    except LoopError as e:
        fail(str(e))


def fail(message: str) -> NoReturn:
    err.print(f"error: {message}", markup=False)
    raise typer.Exit(2)


async def client() -> Client:
    return await connect(connection.address, connection.namespace)


async def status_of(handle: WorkflowHandle, desc: Any, client: Client) -> TaskStatus | TaskResult:
    """Live status of an open task, its figures as of now; the result of a closed one (no
    worker needed)."""
    if desc.status == WorkflowExecutionStatus.RUNNING:
        return await live_status(handle, desc, client)
    if desc.status == WorkflowExecutionStatus.COMPLETED:
        return await handle.result()
    raise BadInput(f"task {handle.id} ended {task_state(desc)} (see the Temporal UI)")
