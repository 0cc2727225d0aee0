"""The diff scan: what an attempt added that could end, steer or fake a test run.

The code under test runs inside the test process, so no in-process report is
unforgeable. What stays cheap to see is how a forgery would have to start: a module
that ends the process when it is imported, a ``conftest.py`` hook that deselects or
rewrites reports, a write to ``sys.modules`` or ``builtins``, a reference from
source code to the test runner or to Loopwork's reporter, a file that shadows the
runner. Found in what the attempt *added*, such a line makes the verdict uncertain:
the task waits for a person with the lines quoted. Deterministic (an ``ast`` walk
and a few string rules), the same every time; a gate's ``allow_constructs`` names
what a person has already accepted.

Pure: the activity gives each changed file's new text and its added line numbers.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import sys
from collections.abc import Set
from dataclasses import dataclass
from pathlib import PurePosixPath

EXITS = {"sys.exit", "exit", "quit"}
"""Calls that end the process the ordinary way: suspicious where they run at import (a
command-line tool's ``main`` may call them)."""
AT_IMPORT = {"signal.signal", "faulthandler.enable"}
"""Calls that change how the process ends or what it writes, where they run at import."""
ANYWHERE = {
    "os._exit", "os.abort", "os.kill", "os.killpg", "atexit.register",
    "os.fork", "os.forkpty", "os.register_at_fork", "multiprocessing.Process",
    "os.dup", "os.dup2", "socket.fromfd", "socket.socketpair",
    "sys.settrace", "sys.setprofile", "threading.settrace", "threading.setprofile",
    "sys._getframe", "inspect.currentframe", "inspect.stack", "inspect.getouterframes",
    "inspect.trace", "traceback.extract_stack", "traceback.format_stack",
    "traceback.walk_stack", "traceback.print_stack", "gc.get_objects", "gc.get_referrers",
    "gc.get_referents", "ctypes.memmove", "ctypes.string_at",
}  # fmt: skip
"""Calls that end the process at once, outlive it, reach into its descriptors, or into
the interpreter, its frames or its memory, wherever they run."""
DYNAMIC = {"exec", "eval", "compile", "__import__", "importlib.import_module", "runpy.run_path",
           "runpy.run_module"}  # fmt: skip
"""Calls that run or import code the scan cannot read, when what they run is not a
constant."""
RUNNER_MODULES = frozenset({"pytest", "_pytest", "pluggy", "py"})
PATCHED = {"sys.modules", "sys.meta_path", "sys.path_hooks", "sys.excepthook", "builtins"}
"""Objects whose change reaches every module of the process."""
RUNNERS = ("pytest", "_pytest", "pluggy", "unittest", "loopwork_report", "LOOP_REPORT")
"""Names source code has no business with; test files may name pytest and unittest."""
TEST_FILE_RUNNERS = ("_pytest", "pluggy", "loopwork_report", "LOOP_REPORT")
SAFE_HOOKS = {
    "pytest_generate_tests", "pytest_addoption", "pytest_make_parametrize_id",
    "pytest_assertrepr_compare",
}  # fmt: skip
"""pytest hooks that parametrize or describe, and cannot skip, deselect or rewrite."""
COLLECTION_NAMES = {"collect_ignore", "collect_ignore_glob", "pytest_plugins", "__test__"}
SHADOWS = (
    "sitecustomize.py", "usercustomize.py", "pytest.py", "py.py", "pluggy.py",
    "unittest.py", "loopwork_report.py", "*.pth",
)  # fmt: skip
"""File names that would stand in for the runner or Python's start-up, at any depth."""
TOP_SHADOWS = ("_pytest", "pluggy", "pytest", "unittest", "py")
"""Folders that would, at the top of the checkout (``python -m`` imports from there)."""
REPORT_WORDS = ("LOOP_REPORT", "loopwork_report", "<testsuite", "<testcase")
"""In any other file: a reference to Loopwork's reporter or a hand-made JUnit report."""
SOURCE_SUFFIXES = (".py", ".pyi")


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    construct: str
    """What was found, in the words ``allow_constructs`` takes: ``os._exit``,
    ``sys.modules``, ``pytest_collection_modifyitems``, ``reference:pytest``, ..."""
    why: str
    text: str

    def quote(self) -> str:
        return f"{self.path}:{self.line}: {self.why}: {self.text.strip()[:160]}"


def is_test_path(path: str) -> bool:
    """Test files and the files pytest reads to collect them."""
    p = PurePosixPath(path)
    if p.name == "conftest.py":
        return True
    if p.suffix != ".py":
        return False
    if p.name.startswith("test_") or p.name.endswith("_test.py"):
        return True
    return any(part in ("tests", "test", "testing") for part in p.parts[:-1])


def _dotted(node: ast.AST, aliases: dict[str, str] | None = None) -> str:
    """``os._exit`` for ``os._exit``, ``_os._exit`` (``import os as _os``), ``getattr(os,
    "_exit")`` and ``e`` (``from os import _exit as e``)."""
    if isinstance(node, ast.Call):
        func = _dotted(node.func, aliases)
        args = node.args
        if func == "getattr" and len(args) >= 2 and isinstance(args[1], ast.Constant):
            if not isinstance(args[1].value, str):
                return func
            return f"{_dotted(args[0], aliases)}.{args[1].value}"
        return func
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value, aliases)
        return f"{inner}.{node.attr}" if inner else node.attr
    if isinstance(node, ast.Name):
        return (aliases or {}).get(node.id, node.id)
    return ""


def _shared(dotted: str) -> bool:
    """A name in a module every part of the process shares: the standard library's, or
    the test runner's (``json.dumps``, ``os.write``, ``pytest.TestReport``,
    ``unittest.TestCase``)."""
    top = dotted.split(".", 1)[0]
    return bool(dotted) and (top in sys.stdlib_module_names or top in RUNNER_MODULES)


def _aliases(tree: ast.AST) -> dict[str, str]:
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    found[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                found[a.asname or a.name] = f"{node.module}.{a.name}"
    return found


def _is_main_guard(node: ast.If) -> bool:
    test = node.test
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


class _Scan(ast.NodeVisitor):
    def __init__(self, path: str, lines: list[str], added: set[int], aliases: dict[str, str]):
        self.aliases = aliases
        self.path = path
        self.lines = lines
        self.added = added
        self.test_file = is_test_path(path)
        self.depth = 0  # functions entered: 0 means the code runs at import
        self.found: list[Finding] = []

    def _hit(self, node: ast.AST, construct: str, why: str) -> None:
        line = getattr(node, "lineno", 0)
        end = getattr(node, "end_lineno", line) or line
        if not any(n in self.added for n in range(line, end + 1)):
            return
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        self.found.append(Finding(self.path, line, construct, why, text))

    def _name(self, node: ast.AST) -> str:
        return _dotted(node, self.aliases)

    # -- where code runs
    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            self._definition(node)
            for decorator in node.decorator_list:
                self.visit(decorator)
            self.visit(node.args)
        self.depth += 1
        for child in node.body if isinstance(node.body, list) else [node.body]:
            self.visit(child)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_If(self, node: ast.If) -> None:
        if self.depth == 0 and _is_main_guard(node):
            self.depth += 1  # a script's entry point does not run at import
            self.generic_visit(node)
            self.depth -= 1
        else:
            self.generic_visit(node)

    # -- what it does
    def _definition(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        name = node.name
        if name.startswith("pytest_") and name not in SAFE_HOOKS:
            self._hit(node, name, "defines a pytest hook (it can skip, deselect or rewrite)")
        if name == "load_tests" and self.depth == 0:
            self._hit(node, "load_tests", "defines unittest's load_tests (it chooses the tests)")
        for decorator in node.decorator_list:
            if self._name(decorator).endswith("hookimpl"):
                self._hit(decorator, "hookimpl", "registers a pytest hook implementation")

    def visit_Call(self, node: ast.Call) -> None:
        name = self._name(node)
        if self.depth == 0 and name in EXITS | AT_IMPORT:
            self._hit(node, name, f"calls {name} when the module is imported")
        elif name in ANYWHERE:
            self._hit(node, name, f"calls {name}")
        elif name in DYNAMIC and not (node.args and isinstance(node.args[0], ast.Constant)):
            self._hit(node, name, f"calls {name} on code the scan cannot read")
        elif name == "socket.socket" and any(k.arg == "fileno" for k in node.keywords):
            self._hit(node, "socket.fileno", "opens a socket on a descriptor it did not make")
        elif name == "setattr" and node.args and self._name(node.args[0]) in PATCHED:
            self._hit(node, self._name(node.args[0]), f"changes {self._name(node.args[0])}")
        elif name == "setattr" and node.args and _shared(self._name(node.args[0])):
            what = self._name(node.args[0])
            self._hit(node, f"patch:{what}", f"changes {what}, which every module shares")
        elif name.rsplit(".", 1)[0] in PATCHED and name.rsplit(".", 1)[-1] in (
            "update", "setdefault", "pop", "__setitem__", "__delitem__", "insert", "append",
            "clear", "popitem",
        ):  # fmt: skip
            self._hit(node, name.rsplit(".", 1)[0], f"changes {name.rsplit('.', 1)[0]}")
        self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = self._name(node.exc) if node.exc is not None else ""
        if self.depth == 0 and exc.rsplit(".", 1)[-1] in ("SystemExit", "KeyboardInterrupt"):
            self._hit(node, "SystemExit", f"raises {exc} when the module is imported")
        self.generic_visit(node)

    def _targets(self, node: ast.AST, targets: list[ast.expr]) -> None:
        for target in targets:
            base = target.value if isinstance(target, ast.Subscript) else target
            dotted = self._name(base)
            owner = self._name(base.value) if isinstance(base, ast.Attribute) else ""
            if dotted in PATCHED or owner in PATCHED or dotted == "__builtins__":
                self._hit(node, owner if owner in PATCHED else dotted, f"changes {dotted}")
            elif isinstance(target, ast.Attribute) and _shared(owner):
                self._hit(node, f"patch:{dotted}", f"replaces {dotted}, which every module shares")
            if isinstance(target, ast.Name) and target.id in COLLECTION_NAMES:
                self._hit(node, target.id, f"sets {target.id} (it changes what is collected)")
            if isinstance(target, ast.Attribute) and target.attr == "__test__":
                self._hit(node, "__test__", "sets __test__ (it hides a test from collection)")

    def visit_Assign(self, node: ast.Assign) -> None:
        self._targets(node, node.targets)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._targets(node, [node.target])
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._targets(node, [node.target])
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        self._targets(node, node.targets)
        self.generic_visit(node)

    # -- what it names
    def _reference(self, node: ast.AST, name: str) -> bool:
        words = TEST_FILE_RUNNERS if self.test_file else RUNNERS
        for word in words:
            if re.search(rf"(?<![A-Za-z0-9]){re.escape(word)}(?![A-Za-z0-9])", name):
                what = f"reference:{word}"
                self._hit(node, what, f"refers to {word} (code under test has no need to)")
                return True
        if name == "ctypes" or name.startswith("ctypes."):
            self._hit(node, "ctypes", "imports ctypes (it can change the interpreter's memory)")
            return True
        return False

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._reference(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self._reference(node, node.module or "")
        for alias in node.names:
            self._reference(node, alias.name)

    def visit_Name(self, node: ast.Name) -> None:
        self._reference(node, node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._reference(node, node.attr)
        if not self.test_file and self._name(node) == "sys.modules":
            self._hit(node, "reference:sys.modules", "looks at which modules are loaded (a way to "
                      "tell it runs under test)")  # fmt: skip
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, str) or self._reference(node, node.value):
            return
        if "/proc/self/fd" in node.value or "/dev/fd" in node.value:
            self._hit(node, "/proc/self/fd", "names the process's descriptors")
        upper = node.value.upper()
        if not self.test_file and ("PYTEST" in upper or "UNITTEST" in upper):
            self._hit(node, "reference:pytest", "asks whether it runs under a test runner")


def scan_python(path: str, source: bytes, added: set[int]) -> list[Finding]:
    """``source`` as Python reads it: bytes, so a coding cookie means what it means to
    the interpreter. Code that does not parse cannot be imported either: its tests
    fail, which is the verdict's to say (an attempt often leaves a half-edited file)."""
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError):
        return []
    text = source.decode("utf-8", "replace")
    scan = _Scan(path, text.splitlines(), added, _aliases(tree))
    scan.visit(tree)
    # One finding per line and construct is enough to quote.
    return list({(f.line, f.construct): f for f in scan.found}.values())


def scan_text(path: str, text: str, added: set[int]) -> list[Finding]:
    found = []
    for n, line in enumerate(text.splitlines(), start=1):
        if n in added and any(w in line for w in REPORT_WORDS):
            found.append(Finding(path, n, "report-forgery", "names a test report", line))
    return found


def shadows(path: str) -> Finding | None:
    parts = PurePosixPath(path).parts
    name = parts[-1] if parts else ""
    hit = any(fnmatch.fnmatchcase(name, pattern) for pattern in SHADOWS)
    if hit or (len(parts) > 1 and parts[0] in TOP_SHADOWS):
        part = name if hit else parts[0]
        return Finding(path, 0, f"file:{part}", "adds a file that stands in for the runner", path)
    return None


def scan(
    files: dict[str, tuple[bytes | str, set[int]]], new: set[str], links: Set[str] = frozenset()
) -> list[Finding]:
    """Findings over ``files`` (path -> new content, added line numbers); ``new``: the
    paths the attempt added (checked against the names that shadow the runner);
    ``links``: the symbolic links it added or changed (a link can make any file code)."""
    found: list[Finding] = []
    for path in sorted(new):
        hit = shadows(path)
        if hit is not None:
            found.append(hit)
    for path in sorted(links):
        found.append(Finding(path, 0, "symlink", "adds a symbolic link", path))
    for path, (content, added) in sorted(files.items()):
        data = content.encode("utf-8", "surrogateescape") if isinstance(content, str) else content
        if path.endswith(SOURCE_SUFFIXES):
            found += scan_python(path, data, added)
        else:
            found += scan_text(path, data.decode("utf-8", "replace"), added)
    return found


def allowed(finding: Finding, allow: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(finding.construct, pattern) for pattern in allow)
