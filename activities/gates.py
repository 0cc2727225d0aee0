"""Gate evaluation: ``run``, ``diff_scope``, ``no_removed_tests`` and ``contains``.

Why plain async functions and not an activity: one verify activity (written
elsewhere) runs all gates of an attempt, and it is the only thing that needs
Temporal. Keeping the checks here as ordinary coroutines means they are tested
on real git repositories without a server, and the verify activity stays a
thin wrapper (heartbeats come from ``run_process`` while a command runs).

Rules that hold for every gate:

- All gates run, in the task file's order, even after a failure: the feedback
  for the next attempt must say which requirements already pass.
- A gate result is evidence, never an exception: a failing command, a file
  outside the scope or a test file that no longer parses is a failed
  ``GateResult``. Exceptions are left for infrastructure trouble (git cannot
  read the repository), which the activity's retry policy handles.
- Gates check the artifact, not the agent's word: ``diff_scope`` reads the
  files of the agent's work-in-progress commit (``make.changed_files``),
  ``no_removed_tests`` compares base with that commit through git, so files a
  gate leaves in the worktree (caches, bytecode) cannot change the verdict.
  ``run`` gates also keep their byproducts out of the tree on their own
  (``PYTHONDONTWRITEBYTECODE``, pytest's cache provider switched off).

``llm_review`` is not evaluated here (it needs a model call of its own).
"""

from __future__ import annotations

import ast
import asyncio
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pathspec

from activities.host import sandbox
from loop.contracts import (
    Evidence,
    Gate,
    GateResult,
    MakeResult,
    SandboxPolicy,
    TaskSpec,
    Workspace,
)

CLAIM_EVIDENCE_CHARS = 1_000
"""How much of the agent's final answer a ``contains`` gate shows as evidence."""
DETAIL_MAX_ITEMS = 20
"""How many paths or tests a ``detail`` line names before it says "and N more"."""
NO_PYTEST_CACHE = "-p no:cacheprovider"


@dataclass
class Bench:
    """Where ``run`` gates run: a clean checkout of the commit they judge (``tree``), the
    worker's folder for their logs (``log_dir``), and LOOP_HOME (hidden from them)."""

    tree: Path
    log_dir: Path
    home: Path


async def evaluate(
    task: TaskSpec, ws: Workspace, make: MakeResult, bench: Bench
) -> list[GateResult]:
    """Run every gate of ``task.verify`` in order; one result per gate, failures included."""
    results: list[GateResult] = []
    for gate in task.verify:
        results.append(await evaluate_gate(gate, ws, make, bench, task.sandbox))
    return results


async def evaluate_gate(
    gate: Gate,
    ws: Workspace,
    make: MakeResult,
    bench: Bench,
    policy: SandboxPolicy | None = None,
) -> GateResult:
    kind = gate.kind
    if kind == "run":
        return await run_gate(gate, ws, bench, policy)
    if kind == "diff_scope":
        return diff_scope_gate(gate, make.changed_files)
    if kind == "no_removed_tests":
        return await no_removed_tests_gate(gate, ws, make)
    if kind == "contains":
        return contains_gate(gate, make.claim)
    # The task-file model refuses llm_review today; should one arrive, say so plainly
    # rather than pass it.
    return GateResult(
        name=gate.name,
        kind=kind,
        passed=False,
        requirement="an LLM reviewer accepts the change",
        evidence=Evidence(detail=f"{kind} gates are not evaluated by this version"),
    )


# --------------------------------------------------------------------------- run


def gate_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a ``run`` gate: the worker's, minus the ways tests litter the tree."""
    env = dict(os.environ if base is None else base)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    existing = env.get("PYTEST_ADDOPTS", "").strip()
    env["PYTEST_ADDOPTS"] = f"{NO_PYTEST_CACHE} {existing}".strip()
    return env


def gate_extra_env(policy: SandboxPolicy) -> dict[str, str]:
    """What a sandboxed ``run`` gate (or ``run`` tool call) gets on top of the sandbox's
    minimal environment: no bytecode, no pytest cache; the worker's own PYTEST_ADDOPTS
    only where the worker's environment passes (mode off, or named in ``sandbox.env``)."""
    passes = policy.mode == "off" or "PYTEST_ADDOPTS" in policy.env
    worker = os.environ.get("PYTEST_ADDOPTS") if passes else None
    return gate_env({"PYTEST_ADDOPTS": worker} if worker else {})


def _command_in_words(command: str, limit: int = 200) -> str:
    one_line = " ".join(command.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 1] + "…"


def gate_run(gate: Gate, ws: Workspace, bench: Bench, policy: SandboxPolicy) -> sandbox.SandboxRun:
    """How a ``run`` gate runs: its line under bash, as the task's uid, in the bench."""
    assert gate.run is not None
    return sandbox.SandboxRun(
        argv=["bash", "-c", gate.run],
        kind="gate",
        policy=policy,
        task_id=ws.task_id,
        home=bench.home,
        tree=bench.tree,
        state_dir=bench.log_dir,
        name=f"gate-{gate.name}",
        limit_s=gate.timeout,
        env=gate_extra_env(policy),
    )


async def run_gate(
    gate: Gate, ws: Workspace, bench: Bench, policy: SandboxPolicy | None = None
) -> GateResult:
    """A ``run`` gate in the sandbox (kind ``gate``: no network by default, the checkout
    read-only, a fresh HOME and TMPDIR), so a gate cannot change the artifact it judges."""
    assert gate.run is not None
    proc = await sandbox.run_sandboxed(gate_run(gate, ws, bench, policy or SandboxPolicy()))
    if proc.timed_out:
        detail = f"timed out after {gate.timeout} s"
    elif proc.exit_code == 0:
        detail = "exit code 0"
    else:
        detail = f"exit code {proc.exit_code}"
    return GateResult(
        name=gate.name,
        kind="run",
        passed=proc.exit_code == 0 and not proc.timed_out,
        requirement=f"`{_command_in_words(gate.run)}` exits 0",
        evidence=Evidence(
            exit_code=proc.exit_code,
            output_tail=proc.output_tail,
            duration_s=proc.duration_s,
            detail=detail,
        ),
    )


# --------------------------------------------------------------------------- diff_scope


def _spec(globs: Iterable[str]) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines(list(globs))


def _normalise_path(path: str) -> str:
    while path.startswith("./"):
        path = path[2:]
    return path


def listing(items: list[str], limit: int = DETAIL_MAX_ITEMS) -> str:
    shown = ", ".join(items[:limit])
    more = len(items) - limit
    return shown + (f" … and {more} more" if more > 0 else "")


def diff_scope_gate(gate: Gate, changed_files: list[str]) -> GateResult:
    """Allowed and protected globs (gitignore semantics) against the agent's changed files."""
    scope = gate.diff_scope
    assert scope is not None
    changed = sorted({_normalise_path(f) for f in changed_files if f})
    requirement = f"changes stay within {', '.join(scope.allow)}"
    if scope.protect:
        requirement += f" and leave {', '.join(scope.protect)} untouched"

    def result(passed: bool, files: list[str], detail: str, violation: bool = False) -> GateResult:
        return GateResult(
            name=gate.name,
            kind="diff_scope",
            passed=passed,
            policy_violation=violation,
            requirement=requirement,
            evidence=Evidence(files=files, detail=detail),
        )

    if scope.protect:
        protect = _spec(scope.protect)
        touched = [f for f in changed if protect.match_file(f)]
        if touched:
            return result(False, touched, f"protected path touched: {listing(touched)}", True)
    allow = _spec(scope.allow)
    outside = [f for f in changed if not allow.match_file(f)]
    if outside:
        return result(False, outside, f"changed outside the allowed scope: {listing(outside)}")
    detail = f"{len(changed)} changed file(s), all within scope" if changed else "no changes"
    return result(True, changed, detail)


# --------------------------------------------------------------------------- no_removed_tests


class GitError(RuntimeError):
    pass


async def _git(args: list[str], cwd: str | Path) -> bytes:
    """Run git, return stdout; raise ``GitError`` with stderr on failure."""
    proc = await asyncio.create_subprocess_exec(
        "git",
        *args,
        cwd=str(cwd),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        message = err.decode("utf-8", errors="replace").strip()
        raise GitError(f"git {' '.join(args)} failed ({proc.returncode}): {message}")
    return out


def is_test_file(path: str) -> bool:
    """``test_*.py``, ``*_test.py``, or any ``*.py`` under a ``tests/`` folder (not conftest)."""
    p = PurePosixPath(path)
    if p.suffix != ".py":
        return False
    if p.name.startswith("test_") or p.name.endswith("_test.py"):
        return True
    return "tests" in p.parts[:-1] and p.name not in ("conftest.py", "__init__.py")


async def _test_blobs(rev: str, cwd: str) -> dict[str, str]:
    """Test files at ``rev``: path -> blob id (regular files only, no symlinks or submodules)."""
    out = await _git(["ls-tree", "-r", "-z", rev], cwd)
    blobs: dict[str, str] = {}
    for entry in out.split(b"\0"):
        if not entry:
            continue
        meta, _, raw_path = entry.partition(b"\t")
        mode, kind, oid = meta.decode().split()
        path = raw_path.decode("utf-8", errors="surrogateescape")
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
    return parse_tests(path, await _git(["show", f"{rev}:{path}"], cwd))


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


async def no_removed_tests_gate(gate: Gate, ws: Workspace, make: MakeResult) -> GateResult:
    artifact = make.commit or "HEAD"
    changes = await compare_tests(ws.path, ws.base_commit, artifact)
    parts: list[str] = []
    if changes.removed_files:
        parts.append(f"test files removed: {listing(changes.removed_files)}")
    if changes.unparsable:
        parts.append(f"no longer parses: {listing(changes.unparsable)}")
    if changes.removed_tests:
        parts.append(f"tests removed: {listing(changes.removed_tests)}")
    if changes.skipped_tests:
        parts.append(f"tests newly skipped: {listing(changes.skipped_tests)}")
    files = changes.removed_files + changes.removed_tests + changes.skipped_tests
    return GateResult(
        name=gate.name,
        kind="no_removed_tests",
        passed=changes.ok,
        requirement="no test present at base is removed or newly skipped",
        evidence=Evidence(
            files=files,
            detail="; ".join(parts) if parts else "every test present at base is still there",
        ),
    )


# --------------------------------------------------------------------------- contains


def contains_gate(gate: Gate, claim: str) -> GateResult:
    """Every string of ``contains`` occurs in the agent's final answer (case-sensitive)."""
    wanted = gate.contains or []
    missing = [s for s in wanted if s not in claim]
    if not missing:
        detail = "all present"
    elif not claim.strip():
        detail = f"missing: {', '.join(missing)} (the agent gave no final answer)"
    else:
        detail = f"missing: {', '.join(missing)}"
    return GateResult(
        name=gate.name,
        kind="contains",
        passed=not missing,
        requirement=f"the final answer contains: {', '.join(s for s in wanted if s)}",
        evidence=Evidence(output_tail=claim[:CLAIM_EVIDENCE_CHARS], detail=detail),
    )
