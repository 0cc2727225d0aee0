"""The workflow patches list: every ``patched(...)`` and ``deprecate_patch(...)`` in
``workflows/``, with the function that holds it."""

from __future__ import annotations

import ast

from generated import (
    ROOT,
    rel,
)


def patches_in_code() -> list[tuple[str, str, int, str]]:
    """(patch id, file, line, call) of every ``patched(...)`` (``workflow``'s, and
    ``workflows.patches``' that the release marker answers) and ``deprecate_patch(...)``
    in ``workflows/``, with the function that holds it."""
    found: dict[tuple[str, str, int], str] = {}
    for path in sorted((ROOT / "workflows").rglob("*.py")):
        tree = ast.parse(path.read_text())
        named = {  # an id given by a module-level constant, as period.py's LOCAL
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        # Outer functions come first in the walk: the innermost holder is written last.
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("patched", "deprecate_patch")
                    and node.args
                ):
                    arg = node.args[0]
                    if isinstance(arg, ast.Constant):
                        patch = arg.value
                    elif isinstance(arg, ast.Name) and arg.id in named:
                        patch = named[arg.id]
                    else:
                        continue
                    key = (patch, rel(path), node.lineno)
                    found[key] = f"{func.name}: {node.func.attr}"
    return sorted(((*key, where) for key, where in found.items()), key=lambda r: (r[1], r[2]))


def patches() -> str:
    rows = patches_in_code()
    if not rows:
        return "No workflow code is behind a patch today.\n"
    out = ["| patch id | where | function: call |", "| --- | --- | --- |"]
    for patch, file, line, where in rows:
        out.append(f'| `"{patch}"` | `{file}:{line}` | `{where}` |')
    return "\n".join(out) + "\n"
