"""The ``no_removed_tests`` gate: no test present at base is gone, skipped or deselected.

Where a ``run`` gate's runner reports tests, the runner decides what exists and what
runs: a test collected at base must be collected at the commit, not deselected, not
newly skipped or xfailed. That is what catches the ways of hiding a test that leave
its name in the file (``del test_a``, ``__test__ = False``, a skip marker under an
alias, an empty ``parametrize``, an ``xfail`` marker, ``collect_ignore``, a hook that
deselects). Test files removed are caught by git either way. Without a reporting
runner the test files themselves are read (``ast``): functions and classes that were
there and are gone or newly marked skipped.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from activities.gates.judging import Judging
from activities.host.git import git
from loop.contracts import Evidence, GateResult, NoRemovedTestsGate, Workspace
from loop.rules import verdicts

KIND = NoRemovedTestsGate.KIND

REQUIREMENT = "no test present at base is removed, newly skipped, xfailed or deselected"
DETAIL_MAX_ITEMS = 20


def listing(items: list[str], limit: int = DETAIL_MAX_ITEMS) -> str:
    shown = ", ".join(items[:limit])
    more = len(items) - limit
    return shown + (f" … and {more} more" if more > 0 else "")


def is_test_file(path: str) -> bool:
    """``test_*.py``, ``*_test.py``, or any ``*.py`` under a ``tests/`` folder (not conftest)."""
    p = PurePosixPath(path)
    if p.suffix != ".py":
        return False
    if p.name.startswith("test_") or p.name.endswith("_test.py"):
        return True
    return "tests" in p.parts[:-1] and p.name not in ("conftest.py", "__init__.py")


async def evaluate(gate: NoRemovedTestsGate, judging: Judging) -> GateResult:
    ws, commit = judging.ws, judging.commit
    removed_files = await removed_test_files(ws, commit)
    parts: list[str] = []
    files: list[str] = list(removed_files)
    if removed_files:
        parts.append(f"test files removed: {listing(removed_files)}")
    compared = 0
    for run_gate in judging.reporting():
        base = (await judging.at_base(run_gate)).report
        if base is None:
            continue
        now = (await judging.at_commit(run_gate)).report
        compared += 1
        if now is None or not now.complete:
            parts.append(f"{run_gate.name}: the test run at the commit did not report whole")
            continue
        lost = verdicts.lost_tests(base, now)
        for label, ids in (
            ("missing from collection", lost.missing),
            ("deselected", lost.deselected),
            ("newly skipped or xfailed", lost.skipped),
        ):
            if ids:
                parts.append(f"{run_gate.name}: {label}: {listing(ids)}")
                files += ids
    if not compared:
        changes = await compare_tests(ws.path, ws.base_commit, commit)
        if changes.unparsable:
            parts.append(f"no longer parses: {listing(changes.unparsable)}")
        if changes.removed_tests:
            parts.append(f"tests removed: {listing(changes.removed_tests)}")
        if changes.skipped_tests:
            parts.append(f"tests newly skipped: {listing(changes.skipped_tests)}")
        files += changes.removed_tests + changes.skipped_tests
    how = "by the runner's report" if compared else "by reading the test files"
    return GateResult(
        name=gate.name,
        kind="no_removed_tests",
        passed=not parts,
        requirement=REQUIREMENT,
        evidence=Evidence(
            files=files,
            detail="; ".join(parts)
            if parts
            else f"every test present at base is still there ({how})",
        ),
    )


async def removed_test_files(ws: Workspace, commit: str) -> list[str]:
    before = await _test_blobs(ws.base_commit, ws.path)
    after = await _test_blobs(commit, ws.path)
    return sorted(p for p in before if p not in after)


# --------------------------------------------------------------------------- the source parse


async def _test_blobs(rev: str, cwd: str) -> dict[str, str]:
    """Test files at ``rev``: path -> blob id (regular files only, no symlinks or submodules)."""
    out = await git(["ls-tree", "-r", "-z", rev], cwd)
    blobs: dict[str, str] = {}
    for entry in out.split("\0"):
        if not entry:
            continue
        meta, _, path = entry.partition("\t")
        mode, kind, oid = meta.split()
        if kind == "blob" and mode != "120000" and is_test_file(path):
            blobs[path] = oid
    return blobs


@dataclass
class _FileTests:
    tests: dict[str, bool] = field(default_factory=dict)
    """Test id (``path::Class::name``) -> skipped."""
    error: str = ""
    """Why the file does not parse; empty when it does."""


_SKIP_NAMES = {"skip", "skipif", "xfail", "skipIf", "skipUnless", "expectedFailure"}


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _is_skip_marker(node: ast.expr) -> bool:
    """``pytest.mark.skip``/``skipif``/``xfail``, ``unittest.skip*``, ``expectedFailure``."""
    name = _dotted(node)
    return bool(name) and name.rsplit(".", 1)[-1] in _SKIP_NAMES


def _marks_skip(value: ast.expr) -> bool:
    """A ``pytestmark = ...`` value that holds a skip marker (alone or in a list)."""
    if isinstance(value, ast.List | ast.Tuple):
        return any(_marks_skip(v) for v in value.elts)
    return _is_skip_marker(value)


def _first_statement(body: list[ast.stmt]) -> ast.stmt | None:
    for stmt in body:
        is_docstring = (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str)
        )
        if not is_docstring:
            return stmt
    return None


def _skips_at_once(stmt: ast.stmt | None) -> bool:
    """``pytest.skip(...)``, ``self.skipTest(...)`` or ``raise SkipTest`` as the first statement."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        name = _dotted(stmt.value)
        return name in ("pytest.skip", "skip") or name.endswith(".skipTest")
    if isinstance(stmt, ast.Raise) and stmt.exc is not None:
        return _dotted(stmt.exc).rsplit(".", 1)[-1] in ("SkipTest", "Skipped")
    return False


def _module_skipped(tree: ast.Module) -> bool:
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets
        ):
            if _marks_skip(stmt.value):
                return True
        elif (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and stmt.target.id == "pytestmark"
            and stmt.value is not None
            and _marks_skip(stmt.value)
        ):
            return True
        elif (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and _dotted(stmt.value) == "pytest.skip"
        ):
            return True  # pytest.skip(..., allow_module_level=True)
    return False


def _collect(body: list[ast.stmt], prefix: str, skipped: bool, out: dict[str, bool]) -> None:
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name.startswith("test"):
                out[f"{prefix}::{node.name}"] = (
                    skipped
                    or any(_is_skip_marker(d) for d in node.decorator_list)
                    or _skips_at_once(_first_statement(node.body))
                )
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            class_skipped = skipped or any(_is_skip_marker(d) for d in node.decorator_list)
            _collect(node.body, f"{prefix}::{node.name}", class_skipped, out)


def parse_tests(path: str, source: bytes) -> _FileTests:
    """The test functions of one file and whether each is skipped."""
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as e:
        where = f" (line {e.lineno})" if isinstance(e, SyntaxError) and e.lineno else ""
        return _FileTests(error=f"{type(e).__name__}{where}")
    found: dict[str, bool] = {}
    _collect(tree.body, path, _module_skipped(tree), found)
    return _FileTests(tests=found)


async def _read_tests(rev: str, path: str, cwd: str) -> _FileTests:
    return parse_tests(
        path, (await git(["show", f"{rev}:{path}"], cwd)).encode("utf-8", "surrogateescape")
    )


@dataclass
class LostTests:
    removed_files: list[str] = field(default_factory=list)
    unparsable: list[str] = field(default_factory=list)
    """Test files that parse at base and not at the artifact, with the reason."""
    removed_tests: list[str] = field(default_factory=list)
    skipped_tests: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.removed_files or self.unparsable or self.removed_tests or self.skipped_tests
        )


async def compare_tests(cwd: str, base: str, artifact: str) -> LostTests:
    """Tests present at ``base`` that are gone or newly skipped at ``artifact``."""
    changes = LostTests()
    before = await _test_blobs(base, cwd)
    after = await _test_blobs(artifact, cwd)
    for path, oid in sorted(before.items()):
        if path not in after:
            changes.removed_files.append(path)
            continue
        if after[path] == oid:
            continue  # same content, same tests
        old = await _read_tests(base, path, cwd)
        if old.error:
            continue  # nothing known at base to lose
        new = await _read_tests(artifact, path, cwd)
        if new.error:
            changes.unparsable.append(
                f"{path}: {new.error}, so its {len(old.tests)} test(s) count as removed"
            )
            changes.removed_tests.extend(old.tests)
            continue
        for test_id, was_skipped in old.tests.items():
            if test_id not in new.tests:
                changes.removed_tests.append(test_id)
            elif new.tests[test_id] and not was_skipped:
                changes.skipped_tests.append(test_id)
    return changes
