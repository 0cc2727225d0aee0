"""``loop``: the one Typer app; it registers the commands of the modules beside it.

Only this module imports the command modules (``tasks``, ``budget``, ``triage``,
``evals``, ``server``, ``environment``); they share ``console`` and never import the app back.
Typer/click give the help texts and usage errors (which also exit 2).
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from loop.cli import budget, console, environment, evals, server, tasks, triage, ui

app = typer.Typer(
    help="Loopwork: AI coding agents in durable, verified loops on Temporal.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _options(
    address: Annotated[
        str | None, typer.Option(help="Temporal address; default TEMPORAL_ADDRESS or profile")
    ] = None,
    namespace: Annotated[str | None, typer.Option(help="Temporal namespace")] = None,
) -> None:
    console.connection.address, console.connection.namespace = address, namespace


for command in (server.dev, server.worker, tasks.start, tasks.status, tasks.inbox, tasks.approve,
                tasks.reject, tasks.feedback, tasks.extend, tasks.sign, tasks.cancel, tasks.trace,
                triage.triage, server.doctor, server.demo):  # fmt: skip
    app.command()(command)
app.command("eval")(evals.eval_)
app.command("codec-server")(server.codec_server)
app.command("ui")(ui.ui)
app.add_typer(budget.budget_app, name="budget")
app.add_typer(triage.schedule_app, name="schedule")
app.add_typer(environment.env_app, name="env")


def main() -> None:
    """Entry point; exits explicitly after flushing (sdk-python #300: teardown crashes)."""
    code = 0
    try:
        returned = app(standalone_mode=False)
        if isinstance(returned, int):
            code = returned  # typer returns, not raises, the code of a command's Exit
    except typer.Exit as e:
        code = e.exit_code
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except typer.Abort:
        code = 130
    except Exception as e:
        # click's usage errors (typer vendors click and does not export their base class)
        if not hasattr(e, "show") or not isinstance(getattr(e, "exit_code", None), int):
            raise
        e.show()
        code = e.exit_code
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
