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

The scan fails closed: a name it cannot read where the name matters is a finding
itself. Strings built from pieces (``"_ex" + "it"``, ``"".join([...])``, ``chr``,
slices, ``codecs.decode``) are folded to the name they spell and judged as that name;
an attribute of a module looked up by a name that does not fold (``getattr(os,
name)``), a module's namespace by name (``sys.__dict__``, ``vars(sys)``), the ways from
an object to another module's globals or to a running frame (``__globals__``,
``tb_frame.f_back``), ``sys.modules`` by any path, and, in code that is not a test,
what ``inspect`` and ``gc`` have beyond describing, ``ctypes``, and environment reads
by a name it cannot read or a name of the runner's. Names resolve by scope: a local
variable called ``token`` or ``builtins`` is not the module of that name.

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

from loop.rules.static_names import RUNNER_MODULES, Names

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
           "runpy.run_module", "importlib.__import__"}  # fmt: skip
"""Calls that run or import code the scan cannot read, when what they run is not a
constant (or a string the scan folds)."""
ATTRIBUTE_FUNCTIONS = {"getattr", "setattr", "delattr", "hasattr"}
PATCHED = {"sys.modules", "sys.meta_path", "sys.path_hooks", "sys.excepthook", "builtins"}
"""Objects whose change reaches every module of the process."""
RUNNERS = ("pytest", "_pytest", "pluggy", "unittest", "loopwork_report", "LOOP_REPORT",
           "LOOP_WITNESS", "loopwork_witness", "pluginmanager")  # fmt: skip
"""Names source code has no business with; test files may name pytest and unittest (not
the runner's plugin manager, the way to every plugin's hooks)."""
TEST_FILE_RUNNERS = ("_pytest", "pluggy", "loopwork_report", "LOOP_REPORT", "LOOP_WITNESS",
                     "loopwork_witness", "pluginmanager")  # fmt: skip
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
INTROSPECTION = ("ctypes", "_ctypes", "cffi", "_testcapi")
"""Modules that reach into the interpreter's memory: code under test (not its tests) has
no need of them."""
OBSERVING = {
    "inspect": {
        "signature", "Signature", "Parameter", "BoundArguments", "isclass", "isfunction",
        "ismethod", "ismodule", "isroutine", "isbuiltin", "iscoroutinefunction",
        "isgeneratorfunction", "isasyncgenfunction", "iscoroutine", "isawaitable",
        "isgenerator", "isabstract", "isdatadescriptor", "ismethoddescriptor", "getdoc",
        "cleandoc", "getfile", "getsourcefile", "getsource", "getsourcelines", "unwrap",
        "getmro", "getfullargspec", "get_annotations", "CO_VARARGS", "CO_VARKEYWORDS",
        "markcoroutinefunction", "ClassFoundException", "Attribute",
    },
    "gc": {"collect", "disable", "enable", "isenabled", "get_count", "get_threshold",
           "set_threshold", "freeze", "unfreeze", "get_freeze_count", "is_tracked",
           "is_finalized", "get_stats", "callbacks", "garbage", "DEBUG_STATS"},
}  # fmt: skip
"""The parts of ``inspect`` and ``gc`` that only describe (a signature, a docstring, the
collector's switches): everything else of theirs reaches frames or other objects, and is
a finding in code that is not a test."""
REACHING = {
    "__globals__", "__closure__", "cell_contents", "__builtins__", "__subclasses__",
    "f_back", "f_globals", "f_locals", "f_builtins", "tb_frame", "gi_frame", "cr_frame",
    "ag_frame",
}  # fmt: skip
"""Attributes that lead from an object to another module's namespace or a running frame."""
REPLACED = {"__code__", "__class__", "__defaults__", "__kwdefaults__", "__globals__"}
"""Attributes whose assignment changes what a function does or what an object is."""
RUNNER_ENV_PREFIXES = ("PYTEST", "_PYTEST", "LOOP_", "TOX_", "NOX_", "UNITTEST", "CI_")
RUNNER_ENV = {"CI", "CONTINUOUS_INTEGRATION", "GITHUB_ACTIONS", "GITLAB_CI", "CIRCLECI",
              "TRAVIS", "JENKINS_URL", "BUILDKITE", "TF_BUILD", "BUILD_NUMBER"}  # fmt: skip
"""Environment variables that say a test runner or CI runs the code."""
ENV_READS = {"os.environ.get", "os.getenv", "os.environ.pop", "os.environ.setdefault",
             "os.environb.get", "os.getenvb"}  # fmt: skip
ENV_WHOLE = {"os.environ.keys", "os.environ.items", "os.environ.values", "os.environ.__iter__",
             "os.environb.keys", "os.environb.items"}  # fmt: skip
"""Reads of every variable's name: a way to find the runner's under a name built later."""
LISTING = {"list", "tuple", "set", "sorted", "frozenset", "iter", "enumerate", "filter", "map"}
SUSPICIOUS_BUILT = re.compile(r"^(__\w+__|_[A-Za-z0-9]\w*)$")
"""A dunder or private name: what a string built from pieces has no honest need to spell."""
BUILT_WORDS = ("modules", "environ", "/proc/", "getframe")


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


def _is_main_guard(node: ast.If) -> bool:
    test = node.test
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


# ------------------------------------------------------------------ the walk


class _Scan(Names):
    def __init__(self, path: str, lines: list[str], added: set[int]):
        super().__init__()
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

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            self._definition(node)
            for decorator in node.decorator_list:
                self.visit(decorator)
        self.visit(node.args)
        body: list[ast.stmt] = node.body if isinstance(node.body, list) else [ast.Expr(node.body)]
        self._enter("function", body, node.args)
        self.depth += 1
        for child in body:
            self.visit(child)
        self.depth -= 1
        self._leave()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for part in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(part)
        self._enter("class", node.body, None)
        for child in node.body:
            self.visit(child)
        self._leave()

    def visit_Module(self, node: ast.Module) -> None:
        for parent in ast.walk(node):
            for child in ast.iter_child_nodes(parent):
                self._parents[id(child)] = parent
        self._enter("module", node.body, None)
        self.generic_visit(node)
        self._leave()

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
            if self._callee(decorator).endswith("hookimpl"):
                self._hit(decorator, "hookimpl", "registers a pytest hook implementation")

    def visit_Call(self, node: ast.Call) -> None:
        if self._built(node):
            return  # a string computed from constants ("".join, chr, codecs.decode)
        name = self._callee(node)
        if self.depth == 0 and name in EXITS | AT_IMPORT:
            self._hit(node, name, f"calls {name} when the module is imported")
        elif name in ANYWHERE:
            self._hit(node, name, f"calls {name}")
        elif name in DYNAMIC and not (node.args and isinstance(node.args[0], ast.Constant)):
            self._hit(node, name, f"calls {name} on code the scan cannot read")
        elif name == "socket.socket" and any(k.arg == "fileno" for k in node.keywords):
            self._hit(node, "socket.fileno", "opens a socket on a descriptor it did not make")
        elif name in ATTRIBUTE_FUNCTIONS and len(node.args) >= 2:
            self._attribute_call(node, name)
        elif (
            _dunder_lookup(node)
            and self._fold(node.args[-1]) is None
            and any(
                self._module_like(n)
                for n in [node.func.value, *node.args[:-1]]  # type: ignore[attr-defined]
            )
        ):
            self._hit(node, "dynamic-attribute", "looks up an attribute of a module by a name "
                      "the scan cannot read")  # fmt: skip
        elif name in ("operator.attrgetter", "operator.methodcaller") and node.args:
            if self._fold(node.args[0]) is None:
                self._hit(node, "dynamic-attribute", f"calls {name} with a name the scan "
                          "cannot read")  # fmt: skip
        elif name == "vars" and node.args and self._module_like(node.args[0]):
            self._hit(node, "module-dict", "reads a module's namespace by name (vars)")
        elif name.rsplit(".", 1)[0] in PATCHED and name.rsplit(".", 1)[-1] in (
            "update", "setdefault", "pop", "__setitem__", "__delitem__", "insert", "append",
            "clear", "popitem",
        ):  # fmt: skip
            self._hit(node, name.rsplit(".", 1)[0], f"changes {name.rsplit('.', 1)[0]}")
        if not self.test_file:
            self._environment_call(node, name)
        self.generic_visit(node)

    def _attribute_call(self, node: ast.Call, name: str) -> None:
        target, key = node.args[0], node.args[1]
        folded = self._fold(key)
        owner = self._dotted(target)
        if folded is None:
            if self._module_like(target):
                self._hit(node, "dynamic-attribute", f"{name} on {owner or 'a module'} by a "
                          "name the scan cannot read")  # fmt: skip
            return
        if folded in REACHING:
            self._hit(node, f"reach:{folded}", f"{name} of {folded}")
        if name == "setattr" and owner in PATCHED:
            self._hit(node, owner, f"changes {owner}")
        elif name == "setattr" and self._shared(owner):
            self._hit(node, f"patch:{owner}", f"changes {owner}, which every module shares")
        elif name in ("setattr", "delattr") and folded in REPLACED:
            self._hit(node, f"replace:{folded}", f"replaces {folded}")

    def _environment_call(self, node: ast.Call, name: str) -> None:
        if name in ENV_READS and node.args:
            self._environment_key(node, node.args[0])
        elif name in ENV_WHOLE:
            self._hit(node, "environ:all", "reads the name of every environment variable")
        elif (
            name in LISTING
            and node.args
            and self._dotted(node.args[0]) in ("os.environ", "os.environb")
        ):
            self._hit(node, "environ:all", "reads the name of every environment variable")

    def _environment_key(self, node: ast.AST, key: ast.AST) -> None:
        folded = self._fold(key)
        if folded is None:
            self._hit(node, "environ:dynamic", "reads an environment variable by a name the "
                      "scan cannot read")  # fmt: skip
        elif _runner_variable(folded):
            self._hit(node, f"environ:{folded}", f"reads {folded} (a way to tell it runs under "
                      "test)")  # fmt: skip

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self._built(node):
            return  # a string cut from a constant ("tixe_"[::-1])
        if not self.test_file and isinstance(node.ctx, ast.Load):
            if self._dotted(node.value) in ("os.environ", "os.environb"):
                self._environment_key(node, node.slice)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        if not self.test_file:
            for op, right in zip(node.ops, node.comparators, strict=True):
                if isinstance(op, ast.In | ast.NotIn) and self._dotted(right) in (
                    "os.environ",
                    "os.environb",
                ):
                    self._environment_key(node, node.left)
        self.generic_visit(node)

    def visit_For(self, node: ast.For | ast.AsyncFor | ast.comprehension) -> None:
        if not self.test_file and self._dotted(node.iter) in ("os.environ", "os.environb"):
            self._hit(node.iter, "environ:all", "reads the name of every environment variable")
        self.generic_visit(node)

    visit_AsyncFor = visit_comprehension = visit_For

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = self._callee(node.exc) if node.exc is not None else ""
        if self.depth == 0 and exc.rsplit(".", 1)[-1] in ("SystemExit", "KeyboardInterrupt"):
            self._hit(node, "SystemExit", f"raises {exc} when the module is imported")
        self.generic_visit(node)

    def _shared(self, dotted: str) -> bool:
        """A name in a module every part of the process shares: the standard library's, or
        the test runner's (``json.dumps``, ``os.write``, ``pytest.TestReport``,
        ``unittest.TestCase``), reached from an import."""
        top = dotted.split(".", 1)[0]
        return bool(dotted) and (top in sys.stdlib_module_names or top in RUNNER_MODULES)

    def _targets(self, node: ast.AST, targets: list[ast.expr]) -> None:
        for target in targets:
            base = target.value if isinstance(target, ast.Subscript) else target
            # A name assigned is rebound, whatever it aliased: only attributes and items change
            # (and the module ``builtins`` itself, or ``__builtins__``, where the name is one).
            if isinstance(target, ast.Name):
                kind, _ = self._lookup(target.id)
                dotted = target.id if kind == "module" or target.id == "__builtins__" else ""
            else:
                dotted = self._dotted(base)
            owner = self._dotted(base.value) if isinstance(base, ast.Attribute) else ""
            if dotted in PATCHED or owner in PATCHED or dotted == "__builtins__":
                self._hit(node, owner if owner in PATCHED else dotted, f"changes {dotted}")
            elif isinstance(target, ast.Attribute) and self._shared(owner):
                self._hit(node, f"patch:{dotted}", f"replaces {dotted}, which every module shares")
            if isinstance(target, ast.Name) and target.id in COLLECTION_NAMES:
                self._hit(node, target.id, f"sets {target.id} (it changes what is collected)")
            if isinstance(target, ast.Attribute) and target.attr == "__test__":
                self._hit(node, "__test__", "sets __test__ (it hides a test from collection)")
            elif isinstance(target, ast.Attribute) and target.attr in REPLACED:
                self._hit(node, f"replace:{target.attr}", f"replaces {target.attr}")

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
        return False

    def _observing(self, node: ast.AST, dotted: str) -> None:
        """``inspect.stack``, ``gc.get_objects``: beyond what only describes (``OBSERVING``)."""
        module, _, name = dotted.partition(".")
        if self.test_file or module not in OBSERVING or not name:
            return
        if name.split(".", 1)[0] not in OBSERVING[module]:
            self._hit(node, dotted, f"uses {dotted} (it reaches frames or other objects)")

    def _introspection(self, node: ast.AST, module: str) -> None:
        top = module.split(".", 1)[0]
        if top == "ctypes" or (not self.test_file and top in INTROSPECTION):
            self._hit(node, top, f"imports {top} (it reaches into the interpreter, its frames "
                      "or its memory)")  # fmt: skip

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._reference(node, alias.name)
            self._introspection(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self._reference(node, node.module or "")
        if not node.level:
            self._introspection(node, node.module or "")
        for alias in node.names:
            self._reference(node, alias.name)
            if not node.level and node.module:
                self._observing(node, f"{node.module}.{alias.name}")

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "__builtins__":
            self._hit(node, "reach:__builtins__", "reaches __builtins__ (every module's builtins)")
        else:
            self._reference(node, node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._reference(node, node.attr)
        dotted = self._dotted(node)
        self._observing(node, dotted)
        if dotted == "sys.modules" and not self._own_module(node):
            self._hit(node, "reference:sys.modules", "looks at which modules are loaded (a way to "
                      "tell it runs under test, or to reach another module)")  # fmt: skip
        elif node.attr in REACHING:
            self._hit(node, f"reach:{node.attr}", f"reaches {node.attr} (another module's "
                      "namespace or a running frame)")  # fmt: skip
        elif node.attr == "__dict__" and self._module_like(node.value):
            self._hit(node, "module-dict", "reads a module's namespace by name (__dict__)")
        self.generic_visit(node)

    def _own_module(self, node: ast.Attribute) -> bool:
        """``sys.modules[__name__]``: the module's own entry, which reaches nothing else."""
        parent = self._parents.get(id(node))
        return (
            isinstance(parent, ast.Subscript)
            and parent.value is node
            and isinstance(parent.slice, ast.Name)
            and parent.slice.id == "__name__"
            and isinstance(parent.ctx, ast.Load)
        )

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self._judge_string(node, node.value)

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant):
            return  # a docstring, or any other value no code can use
        self.generic_visit(node)

    def _judge_string(self, node: ast.AST, value: str) -> None:
        if "://" in value:
            return  # an address (a project's documentation): to use it, code must cut it
        if self._reference(node, value):
            return
        if "/proc/self/fd" in value or "/dev/fd" in value:
            self._hit(node, "/proc/self/fd", "names the process's descriptors")
        upper = value.upper()
        if not self.test_file and ("PYTEST" in upper or "UNITTEST" in upper):
            self._hit(node, "reference:pytest", "asks whether it runs under a test runner")

    def _built(self, node: ast.expr) -> bool:
        """A string built from pieces: judged as the string it spells (True: it folded)."""
        value = self._fold(node)
        if value is None:
            return False
        self._judge_string(node, value)
        if SUSPICIOUS_BUILT.match(value) or any(w in value for w in BUILT_WORDS):
            self._hit(node, "built-name", f"builds the name {value[:60]!r} from pieces")
        return True

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if not self._built(node):
            self.generic_visit(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        if not self._built(node):
            self.generic_visit(node)


def _dunder_lookup(node: ast.Call) -> bool:
    """``x.__getattribute__(name)`` and its kin: ``getattr`` by another name."""
    return (
        isinstance(node.func, ast.Attribute)
        and node.func.attr in ("__getattribute__", "__getattr__", "__setattr__", "__delattr__")
        and bool(node.args)
    )


def _runner_variable(name: str) -> bool:
    upper = name.upper()
    return upper in RUNNER_ENV or upper.startswith(RUNNER_ENV_PREFIXES)


def scan_python(path: str, source: bytes, added: set[int]) -> list[Finding]:
    """``source`` as Python reads it: bytes, so a coding cookie means what it means to
    the interpreter. Code that does not parse cannot be imported either: its tests
    fail, which is the verdict's to say (an attempt often leaves a half-edited file)."""
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError):
        return []
    except (RecursionError, MemoryError):
        return [Finding(path, 0, "unread", "not scanned: nested too deeply to read", path)]
    text = source.decode("utf-8", "replace")
    scan = _Scan(path, text.splitlines(), added)
    try:
        scan.visit(tree)
    except RecursionError:
        return [Finding(path, 0, "unread", "not scanned: nested too deeply to read", path)]
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
