"""``loop ui``: the review page in the browser (``loop.ui``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from loop import logs
from loop.cli import console
from loop.errors import LoopError
from loop.settings import Settings
from loop.tasks import local_user
from loop.ui.config import DEFAULT_BIND


def ui(
    bind: Annotated[
        str,
        typer.Option(
            metavar="HOST:PORT",
            help="where to listen; anything but loopback needs LOOP_UI_TOKEN (NAME:SECRET)",
        ),
    ] = DEFAULT_BIND,
    sources: Annotated[
        list[Path] | None,
        typer.Option(
            "--sources",
            metavar="FILE",
            help="a sources file whose github sources' webhook deliveries POST /hooks/github "
            "takes (with LOOP_GITHUB_WEBHOOK_SECRET_FILE), and whose sources' templates make "
            "the tasks of POST /hooks/tasks (with LOOP_HOOKS_TOKEN_FILE); repeatable",
        ),
    ] = None,
) -> None:
    """Serve the review page: tasks, evidence, diffs, budgets, eval, and the answers.

    With LOOP_GITHUB_WEBHOOK_SECRET_FILE and --sources it also takes GitHub's webhook
    deliveries at POST /hooks/github: labeled issues start their tasks, closed ones
    cancel them, /loop comments from people with write access answer them, and a
    review of a task's pull request is one feedback.

    With LOOP_HOOKS_TOKEN_FILE and --sources it starts tasks at POST /hooks/tasks from a
    tracker's JSON body of goal-level fields, sent with that bearer token.

    With LOOP_SLACK_SIGNING_SECRET_FILE (and LOOP_SLACK_BOT_TOKEN_FILE) it takes the
    buttons of Loopwork's Slack messages at POST /hooks/slack: approve, reject,
    feedback and extend, each request's signature and timestamp checked."""
    from loop.ui.config import ui_config
    from loop.ui.server import serve

    try:
        settings = Settings.from_env()
        config = ui_config(
            bind,
            dict(os.environ),
            home=settings.home,
            task_queue=settings.task_queue,
            local_user=local_user(),
            sources=sources or [],
        )
    except LoopError as e:
        console.fail(str(e))
    logs.configure("WARNING")
    console.run(
        lambda: serve(
            config,
            address=console.connection.address,
            namespace=console.connection.namespace,
            say=_say,
        )
    )


def _say(line: str) -> None:
    console.out.print(line, markup=False)
    sys.stdout.flush()  # the address is read by people and scripts as soon as it is printed
