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


SPAWNERS = {
    "run", "Popen", "check_output", "check_call", "call", "create_subprocess_exec",
    "create_subprocess_shell", "execv", "execvp", "execvpe", "spawnv", "spawnvp", "system",
}  # fmt: skip
"""Calls that start a process, as ``subprocess.*``, ``asyncio.*``, ``os.*`` or imported
from there by name."""


def _spawns(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                if f.value.id in {"subprocess", "asyncio", "os"} and f.attr in SPAWNERS:
                    return True
            elif isinstance(f, ast.Name) and f.id in SPAWNERS - {"run", "call", "system"}:
                return True
    return False


def _names_git(tree: ast.AST) -> list[int]:
    """Lines where a command is spelled starting with ``git``: a list or tuple whose first
    element is the string, or a call whose first argument is."""
    lines = []
    for node in ast.walk(tree):
        first = None
        if isinstance(node, ast.List | ast.Tuple) and node.elts:
            first = node.elts[0]
        elif isinstance(node, ast.Call) and node.args:
            first = node.args[0]
        if isinstance(first, ast.Constant) and first.value == "git":
            lines.append(node.lineno)
    return lines


def test_every_git_call_goes_through_the_hardened_runner():
    """A repository is hostile: a git call that skips ``loop.hardened.git`` runs with the
    repository's hooks, fsmonitor, external diff and the caller's ``GIT_*``. Only that
    module may start git; elsewhere a command starting with ``git`` may be spelled only
    where no process is started (an error message naming the command), and gitpython,
    which reads the same configuration, is not imported."""
    runner = ROOT / "loop" / "hardened" / "git.py"
    offenders = []
    for path in modules().values():
        if path == runner:
            continue
        tree = ast.parse(path.read_text())
        if _spawns(tree) and (lines := _names_git(tree)):
            offenders.append(f"{path.relative_to(ROOT)}:{lines[0]} starts git itself")
        for node in ast.walk(tree):
            if isinstance(node, ast.Import) and any(a.name == "git" for a in node.names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports gitpython")
            if isinstance(node, ast.ImportFrom) and node.module == "git" and not node.level:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports gitpython")
    assert offenders == []


def test_the_git_rule_catches_the_cheapest_bypass():
    """The rule above, tried on the three ways a copy would be written."""
    for source in (
        'import subprocess\nsubprocess.run(["git", "log"], cwd=".")\n',
        'import asyncio\nasync def f():\n    await asyncio.create_subprocess_exec("git", "log")\n',
        'import subprocess\ncmd = ("git", "-c", "x=y")\nsubprocess.check_output([*cmd, "log"])\n',
    ):
        tree = ast.parse(source)
        assert _spawns(tree) and _names_git(tree), source
    for quiet in ('raise ValueError(["git", "log"])\n', 'await hardened.run(["log"], ".")\n'):
        assert not _spawns(ast.parse(quiet)), quiet


def test_a_worker_start_loads_only_what_every_worker_needs() -> None:
    """A new worker's start is what a dead worker's step waits for, so what few steps use
    is imported by the step that first needs it: the providers' types (the gateway's
    first call) and the OpenTelemetry SDK (traces exported) cost more than a second
    together; githubkit about a tenth of a start, httpx a twentieth, slack-sdk a
    thirtieth, YAML and python-frontmatter a fiftieth (GitHub, an HTTP call, Slack, a
    task or issue file)."""
    import subprocess
    import sys

    probe = (
        "import sys, worker; heavy = ('anthropic', 'openai.types.responses', "
        "'opentelemetry.sdk', 'opentelemetry.exporter', 'githubkit', 'slack_sdk', 'httpx', "
        "'yaml', 'frontmatter'); "
        "print(sorted({m for m in sys.modules for h in heavy if m == h or m.startswith(h + '.')}))"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=60)  # fmt: skip
    assert out.stdout.strip() == "[]", out.stdout


def from_imports(package: str, module: str) -> list[str]:
    """Every ``from <module> import ...`` (absolute) in the modules of ``package``."""
    return [
        f"{name}: from {module} import {', '.join(a.name for a in node.names)}"
        for name, path in modules().items()
        if name == package or name.startswith(package + ".")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module == module and not node.level
    ]


def test_workflows_take_their_own_modules_as_the_workers() -> None:
    """The SDK's sandbox runs a workflow's module afresh for each run, and with it a fresh
    ``workflows`` package: ``from workflows import patches`` finds no ``patches`` on that
    package and runs ``workflows/patches.py`` again, per run, even inside
    ``imports_passed_through()``. ``import workflows.patches as patches`` is passed
    through (the worker's module, run once)."""
    assert from_imports("workflows", "workflows") == []


def test_the_contracts_evaluate_their_annotations_at_import() -> None:
    """Every worker and ``loop`` command imports the contracts. pydantic compiles each
    field's annotation when it is a string, as ``from __future__ import annotations``
    makes it: about 850 compiles, a twentieth of a worker's start."""
    assert from_imports("loop.contracts", "__future__") == []
