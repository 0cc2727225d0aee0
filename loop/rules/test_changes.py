"""What an attempt did to tests and code, read from the source's syntax, not its lines.

``regression_test`` credits a test only where the attempt *added it or changed its body*:
a comment above an existing failing test, or a blank line inside it, changes the file and
its lines but not the test. So each test function (and method) is compared by its syntax
tree, decorators included, without positions or comments. And a test that fails at base
only because base lacks a name the attempt added (a new module, function, attribute)
proves nothing about the bug: those names come from here too.

Pure: the activity reads the two versions of each file.
"""

from __future__ import annotations

import ast
from pathlib import PurePosixPath


def _tree(source: bytes | None) -> ast.Module | None:
    if source is None:
        return None
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def definitions(source: bytes | None) -> dict[str, str]:
    """Every function and method, by qualified name (``test_a``, ``TestX::test_b``,
    ``Outer::Inner::test_c``) -> its syntax without positions."""
    found: dict[str, str] = {}
    tree = _tree(source)
    if tree is None:
        return found

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found[prefix + node.name] = ast.dump(node, include_attributes=False)
            elif isinstance(node, ast.ClassDef):
                walk(node.body, f"{prefix}{node.name}::")

    walk(tree.body, "")
    return found


def changed_tests(base: bytes | None, now: bytes) -> set[str]:
    """Qualified names of the functions ``now`` adds or whose syntax differs from ``base``'s."""
    before, after = definitions(base), definitions(now)
    return {name for name, dump in after.items() if before.get(name) != dump}


def added_names(base: bytes | None, now: bytes) -> set[str]:
    """Names ``now`` defines that ``base`` does not: functions, classes, methods, module
    variables (a test that fails at base for want of one of them proves nothing)."""

    def names(source: bytes | None) -> set[str]:
        tree = _tree(source)
        found: set[str] = set()
        if tree is None:
            return found
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                found.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        found.add(target.id)
                    elif isinstance(target, ast.Attribute):
                        found.add(target.attr)
        return found

    return names(now) - names(base)


def module_names(path: str) -> set[str]:
    """The names a new file is imported by: ``pkg.mod``, ``mod`` (and its package's)."""
    p = PurePosixPath(path)
    parts = list(p.with_suffix("").parts) if p.suffix == ".py" else list(p.parts)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    found = {".".join(parts[i:]) for i in range(len(parts))}
    found |= set(parts)
    return {n for n in found if n}


def qualified(case_id: str, file: str) -> str:
    """A test id as ``definitions`` names it: pytest's ``file::A::test_b[x]`` ->
    ``A::test_b``; unittest's ``pkg.mod.A.test_b`` (of ``pkg/mod.py``) -> ``A::test_b``."""
    if "::" in case_id:
        return case_id.split("::", 1)[1].split("[", 1)[0]
    module = ".".join(PurePosixPath(file).with_suffix("").parts) if file else ""
    rest = case_id[len(module) + 1 :] if module and case_id.startswith(module + ".") else case_id
    return rest.split(" ", 1)[0].replace(".", "::")
