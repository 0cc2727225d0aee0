"""The layers of docs/architecture.md, as a test over the import graph (an ``ast`` walk).

Every import counts, module-level or inside a function: a lazy import that dodges a
cycle is still a cycle, and a workflow that imports I/O late is still impure.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.repos import ROOT

PACKAGES = ("loop", "workflows", "activities")


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    found["worker"] = ROOT / "worker.py"
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The Loopwork modules ``name`` imports (``from loop import x`` counts as loop.x)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            # ``from pkg import sub`` needs the submodule; ``from mod import name``, the module.
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports_of(name, path, set(mods)) for name, path in mods.items()}


def under(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_workflows_import_only_contracts_and_pure_rules() -> None:
    for name, deps in graph().items():
        if under(name, "workflows"):
            wrong = {d for d in deps if not under(d, "loop.contracts", "loop.rules", "workflows")}
            assert not wrong, f"{name} imports {sorted(wrong)}"


def test_contracts_and_rules_import_nothing_but_contracts_and_rules() -> None:
    for name, deps in graph().items():
        if under(name, "loop.contracts"):
            assert all(under(d, "loop.contracts") for d in deps), (name, deps)
        if under(name, "loop.rules"):
            assert all(under(d, "loop.contracts", "loop.rules") for d in deps), (name, deps)


def test_nothing_outside_the_cli_imports_the_cli_or_the_composition_root() -> None:
    for name, deps in graph().items():
        if not under(name, "loop.cli"):
            wrong = {d for d in deps if under(d, "loop.cli", "worker")}
            assert not wrong, f"{name} imports {sorted(wrong)}"


def test_the_lower_layers_never_reach_up() -> None:
    for name, deps in graph().items():
        if under(name, "activities"):
            assert not {d for d in deps if under(d, "workflows")}, name
        if under(name, "loop") and not under(name, "loop.cli"):
            wrong = {d for d in deps if under(d, "activities", "workflows", "worker")}
            assert not wrong, f"{name} imports {sorted(wrong)}"


def test_no_import_cycles() -> None:
    edges = graph()
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt) :], nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)


def test_the_walk_sees_the_imports_it_judges() -> None:
    """The checks above mean something only if the graph is found at all."""
    edges = graph()
    assert "loop.contracts" in edges["workflows.task"]
    assert "worker" in edges["loop.cli.server"]
    assert "activities.host.sandbox" in edges["activities.make"]
