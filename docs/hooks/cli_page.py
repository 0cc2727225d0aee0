"""The CLI page: every ``loop`` command from the Typer app, with its usage and options."""

from __future__ import annotations

import inspect
import re
from typing import Any

from generated import (
    anchor,
    markdown_text,
)


def commands() -> list[tuple[str, Any, Any]]:
    """(``loop …`` path, click command, its context) of every command, groups included."""
    import typer

    from loop.cli.app import app

    root = typer.main.get_command(app)
    found = []

    def walk(cmd: Any, ctx: Any, path: str) -> None:
        found.append((path, cmd, ctx))
        for name in getattr(cmd, "list_commands", lambda _: [])(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                walk(sub, typer.Context(sub, info_name=name, parent=ctx), f"{path} {name}")

    walk(root, typer.Context(root, info_name="loop"), "loop")
    return found


def cli() -> str:
    out = []
    for path, cmd, ctx in commands():
        depth = "##" if path.count(" ") <= 1 else "###"
        out.append(f"{depth} `{path}` {{#{anchor(path)}}}\n")
        if cmd.help:
            out.append(inspect.cleandoc(cmd.help).replace("\n", " ") + "\n")
        usage = cmd.get_usage(ctx).removeprefix("Usage: ")
        usage = re.sub(r"\{(\w+)\}", lambda m: m.group(1).upper(), usage)
        if path == "loop":
            usage = "loop [--address ADDRESS] [--namespace NAMESPACE] COMMAND [ARGS]..."
        out.append(f"```\n{usage}\n```\n")
        helper = cmd.get_help_option(ctx)
        records = [
            p.get_help_record(ctx)
            for p in cmd.params
            if not getattr(p, "hidden", False) and p is not helper
        ]
        rows = [r for r in records if r]
        if rows:
            out.append("| argument or option | meaning |")
            out.append("| --- | --- |")
            for decl, help_text in rows:
                out.append(f"| `{decl}` | {markdown_text(help_text or '')} |")
            out.append("")
        subs = [p for p, _, _ in commands() if p.startswith(path + " ") and p != path]
        if path != "loop" and subs:
            out.append("Commands: " + ", ".join(f"[`{s}`](#{anchor(s)})" for s in subs) + ".\n")
    return "\n".join(out)
