"""The exit codes page: the list ``loop.cli.console`` states, checked against the codes
the CLI's code exits with."""

from __future__ import annotations

import ast
import re

from generated import (
    ROOT,
    DocsError,
    markdown_text,
)

EXIT_CODES_ELSEWHERE = {130: "interrupted (Ctrl-C)"}
"""Exit codes the CLI's entry point gives that ``loop.cli.console`` does not list."""


def documented_exit_codes() -> dict[int, str]:
    """The list in ``loop.cli.console``'s docstring, the one place the CLI states them."""
    import loop.cli.console as console

    doc = " ".join((console.__doc__ or "").split())
    listed = re.search(r"Exit codes \([^)]*\): (.*?)\. ", doc)
    if not listed:
        raise DocsError("loop/cli/console.py no longer lists its exit codes")
    codes = {}
    for part in listed.group(1).split("·"):
        number, _, meaning = part.strip().partition(" ")
        codes[int(number)] = meaning
    if codes.get(console.WAITING, "").find("waits for a person") < 0:
        raise DocsError(f"console.WAITING ({console.WAITING}) is not listed as waiting")
    return codes


def exit_codes_in_code() -> set[int]:
    """Literal codes the CLI exits with: ``typer.Exit(N)``, ``code = N``, ``return N``
    of a command's ``main``, and console's ``WAITING``."""
    import loop.cli.console as console

    found = {console.WAITING}
    for path in sorted((ROOT / "loop" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "Exit":
                found |= {a.value for a in node.args if isinstance(a, ast.Constant)}
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                if any(getattr(t, "id", "") == "code" for t in node.targets):
                    found.add(node.value.value)
            if isinstance(node, ast.IfExp) and isinstance(node.orelse, ast.Constant):
                if isinstance(node.orelse.value, int) and isinstance(node.body, ast.Constant):
                    found |= {node.body.value, node.orelse.value}
    return {c for c in found if isinstance(c, int) and not isinstance(c, bool)}


def exit_codes() -> str:
    codes = {**documented_exit_codes(), **EXIT_CODES_ELSEWHERE}
    unexplained = sorted(exit_codes_in_code() - set(codes))
    if unexplained:
        raise DocsError(f"the CLI exits with {unexplained}, which no list explains")
    out = ["| code | meaning |", "| --- | --- |"]
    out += [f"| `{code}` | {markdown_text(codes[code])} |" for code in sorted(codes)]
    return "\n".join(out) + "\n"
