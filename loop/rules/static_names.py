"""What a name or an expression is, read statically: the diff scan's reading of Python.

A name resolves by scope (an import, an alias of a module, a string bound once, or a
local the scan knows nothing of), an expression to the dotted name of the module or
builtin it reaches (``os._exit``, ``getattr(os, "_ex" + "it")``), and a string built
from pieces (``"_ex" + "it"``, ``"".join([...])``, ``chr``, slices, ``codecs.decode``,
base64) to the text it spells, within bounds (``FOLD_CHARS``, ``FOLD_DEPTH``).
``loop.rules.tamper`` judges what this reads; nothing here judges.
"""

from __future__ import annotations

import ast
import base64
import binascii
import codecs
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

IMPORTERS = {"__import__", "importlib.import_module", "importlib.__import__"}
"""Calls whose value is the module their first argument names."""
RUNNER_MODULES = frozenset({"pytest", "_pytest", "pluggy", "py"})
"""The test runner's modules: shared by every part of the process, as the standard
library's are (``Names._module_like``)."""
CANONICAL = {"sys", "os", "builtins", "gc", "inspect", "ctypes", "importlib", "posix"}
"""Modules that other modules expose as attributes (``os.sys``): a chain through one is that
module's."""
DECODERS = {"base64.b64decode", "base64.b32decode", "base64.b16decode",
            "base64.urlsafe_b64decode", "binascii.unhexlify", "bytes.fromhex"}  # fmt: skip
FOLD_CHARS = 10_000
FOLD_DEPTH = 40


def canonical(dotted: str) -> str:
    """``sys.modules`` for ``os.sys.modules``; ``os._exit`` for ``posix._exit``."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        if parts[i] in CANONICAL:
            parts = parts[i:]
            break
    if parts[0] in ("posix", "nt"):
        parts[0] = "os"
    return ".".join(parts)


@dataclass
class _Scope:
    """What the names of one scope are: modules (imports and aliases of them), strings
    (bound once, to an expression that may fold), and everything else bound there."""

    kind: str
    modules: dict[str, str] = field(default_factory=dict)
    strings: dict[str, ast.expr] = field(default_factory=dict)
    local: set[str] = field(default_factory=set)


def _own_statements(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """Every node of a scope's body that belongs to that scope (not to a nested function,
    class or lambda, whose names are their own)."""
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _target_names(target: ast.AST) -> Iterator[str]:
    for node in ast.walk(target):
        if isinstance(node, ast.Name):
            yield node.id


class Names(ast.NodeVisitor):
    """A walk that knows, at each node, what names mean in the scopes around it."""

    def __init__(self) -> None:
        self.scopes: list[_Scope] = []
        self._folding: set[int] = set()
        self._parents: dict[int, ast.AST] = {}

    # -- scopes
    def _enter(self, kind: str, body: list[ast.stmt], params: ast.arguments | None) -> None:
        scope = _Scope(kind)
        self.scopes.append(scope)
        if params is not None:
            for arg in [*params.posonlyargs, *params.args, *params.kwonlyargs]:
                scope.local.add(arg.arg)
            for extra in (params.vararg, params.kwarg):
                if extra is not None:
                    scope.local.add(extra.arg)
        bound: dict[str, list[ast.expr | None]] = {}
        declared: set[str] = set()
        for node in _own_statements(body):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        scope.modules[a.asname] = a.name
                    else:
                        top = a.name.split(".", 1)[0]
                        scope.modules[top] = top
            elif isinstance(node, ast.ImportFrom):
                for a in node.names:
                    name = a.asname or a.name
                    if node.module and not node.level:
                        scope.modules[name] = f"{node.module}.{a.name}"
                    else:
                        scope.local.add(name)  # the repository's own module
            elif isinstance(node, ast.Global | ast.Nonlocal):
                declared.update(node.names)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    one = node.value if isinstance(target, ast.Name) else None
                    for name in _target_names(target):
                        bound.setdefault(name, []).append(one)
            elif isinstance(node, ast.AnnAssign | ast.NamedExpr):
                for name in _target_names(node.target):
                    bound.setdefault(name, []).append(node.value)
            elif isinstance(node, ast.AugAssign):
                for name in _target_names(node.target):
                    bound.setdefault(name, []).extend([None, None])  # changed: not one value
            elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                for name in _target_names(node.target):
                    bound.setdefault(name, []).append(None)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                for name in _target_names(node.optional_vars):
                    bound.setdefault(name, []).append(None)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                bound.setdefault(node.name, []).append(None)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                bound.setdefault(node.name, []).append(None)
        for name, values in bound.items():
            if name in declared:
                continue
            module = self._module_of(values[0]) if len(values) == 1 and values[0] else ""
            if module:
                scope.modules[name] = module
            elif any(v is not None and self._module_of(v) for v in values):
                scope.modules[name] = next(self._module_of(v) for v in values if v is not None)
            elif name in scope.modules:
                continue  # imported and reassigned: still taken for the module (fail closed)
            elif len(values) == 1 and values[0] is not None:
                scope.strings[name] = values[0]
            else:
                scope.local.add(name)

    def _leave(self) -> None:
        self.scopes.pop()

    def _lookup(self, name: str) -> tuple[str, object]:
        """("module", dotted), ("string", expr), ("local", None) or ("free", None): a
        builtin, or a name the file never binds."""
        for i, scope in enumerate(reversed(self.scopes)):
            if scope.kind == "class" and i > 0:
                continue  # a class body's names are not its methods'
            if name in scope.modules:
                return "module", scope.modules[name]
            if name in scope.strings:
                return "string", scope.strings[name]
            if name in scope.local:
                return "local", None
        return "free", None

    # -- what an expression is
    def _dotted(self, node: ast.AST | None) -> str:
        """The dotted name of what ``node`` evaluates to, where it is a module, a builtin
        or something reached from one (``os._exit``, ``getattr(os, "_ex" + "it")``,
        ``__import__("sys").modules``); "" for anything else (a local object)."""
        if isinstance(node, ast.Name):
            kind, value = self._lookup(node.id)
            if kind == "module":
                return canonical(str(value))
            return node.id if kind == "free" else ""
        if isinstance(node, ast.Attribute):
            inner = self._dotted(node.value)
            return canonical(f"{inner}.{node.attr}") if inner else ""
        if isinstance(node, ast.Call):
            func = self._dotted(node.func)
            if func == "getattr" and len(node.args) >= 2:
                name = self._fold(node.args[1])
                inner = self._dotted(node.args[0])
                return canonical(f"{inner}.{name}") if inner and name else ""
            if func in IMPORTERS and node.args:
                name = self._fold(node.args[0])
                return canonical(name) if name else ""
            return ""
        if isinstance(node, ast.Subscript) and self._dotted(node.value) == "sys.modules":
            name = self._fold(node.slice)
            return canonical(name) if name else ""
        return ""

    def _callee(self, node: ast.AST) -> str:
        """What a call calls (a decorator or an exception may be a call or a name)."""
        return self._dotted(node.func if isinstance(node, ast.Call) else node)

    def _module_of(self, node: ast.AST) -> str:
        """The module ``node`` is, where the scan can tell (an alias, an import call)."""
        if isinstance(node, ast.Name):
            kind, value = self._lookup(node.id)
            return canonical(str(value)) if kind == "module" else ""
        if isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
            dotted = self._dotted(node)
            if dotted and dotted.split(".", 1)[0] in sys.stdlib_module_names | RUNNER_MODULES:
                return dotted
        return ""

    def _module_like(self, node: ast.AST) -> bool:
        """A module every part of the process shares (the standard library's, the runner's),
        or one the scan cannot name: an import by a name it cannot read, ``sys.modules[...]``.
        The repository's own modules and third-party ones are not: their attributes looked
        up by name are ordinary code (a registry, a plugin table)."""
        module = self._module_of(node)
        if module and module.split(".", 1)[0] in sys.stdlib_module_names | RUNNER_MODULES:
            return True
        if isinstance(node, ast.Call) and self._dotted(node.func) in IMPORTERS:
            return True
        if isinstance(node, ast.Subscript):
            return self._dotted(node.value) == "sys.modules"
        if isinstance(node, ast.Attribute):
            return self._module_like(node.value) and not node.attr.startswith("__")
        return False

    def _fold(self, node: ast.AST | None, depth: int = 0) -> str | None:
        """The string ``node`` always evaluates to, where the scan can tell."""
        value = self._fold_any(node, depth)
        return value if isinstance(value, str) else None

    def _fold_any(self, node: ast.AST | None, depth: int) -> str | bytes | int | None:
        if node is None or depth > FOLD_DEPTH:
            return None
        d = depth + 1
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str | bytes | int) else None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            number = self._fold_any(node.operand, d)
            return -number if isinstance(number, int) else None
        if isinstance(node, ast.Name):
            kind, value = self._lookup(node.id)
            if kind != "string" or id(value) in self._folding:
                return None
            self._folding.add(id(value))
            try:
                return self._fold_any(value, d)  # type: ignore[arg-type]  # an ast.expr
            finally:
                self._folding.discard(id(value))
        if isinstance(node, ast.BinOp):
            left, right = self._fold_any(node.left, d), self._fold_any(node.right, d)
            return _binop(node.op, left, right)
        if isinstance(node, ast.JoinedStr):
            parts = []
            for part in node.values:
                if isinstance(part, ast.FormattedValue):
                    if part.format_spec is not None or part.conversion not in (-1, 115):
                        return None
                    part = part.value
                piece = self._fold_any(part, d)
                if not isinstance(piece, str | int):
                    return None
                parts.append(str(piece))
            return _capped("".join(parts))
        if isinstance(node, ast.Subscript):
            return self._fold_slice(node, d)
        if isinstance(node, ast.Call):
            return self._fold_call(node, d)
        return None

    def _fold_slice(self, node: ast.Subscript, d: int) -> str | bytes | None:
        value = self._fold_any(node.value, d)
        if not isinstance(value, str | bytes):
            return None
        s = node.slice
        try:
            if isinstance(s, ast.Slice):
                bounds: list[int | None] = []
                for part in (s.lower, s.upper, s.step):
                    bound = self._fold_any(part, d) if part is not None else None
                    if part is not None and not isinstance(bound, int):
                        return None
                    bounds.append(bound if isinstance(bound, int) else None)
                return value[slice(*bounds)]
            index = self._fold_any(s, d)
            return value[index] if isinstance(index, int) and isinstance(value, str) else None
        except (IndexError, ValueError):
            return None

    def _fold_call(self, node: ast.Call, d: int) -> str | bytes | int | None:
        func = node.func
        if node.keywords:
            return None
        if isinstance(func, ast.Attribute) and func.attr == "join" and len(node.args) == 1:
            return self._fold_join(func.value, node.args[0], d)
        args = [self._fold_any(a, d) for a in node.args]
        if any(a is None for a in args):
            return None
        if isinstance(func, ast.Name):
            kind, _ = self._lookup(func.id)
            if kind != "free":
                return None
            if func.id == "chr" and len(args) == 1 and isinstance(args[0], int):
                return chr(args[0]) if 0 <= args[0] < 0x110000 else None
            if func.id == "str" and len(args) == 1 and isinstance(args[0], str):
                return args[0]
            if func.id == "bytes" and not args:
                return b""
            return None
        if not isinstance(func, ast.Attribute):
            return None
        dotted = self._dotted(func)
        if dotted in ("codecs.decode", "codecs.encode") and len(args) == 2:
            data, codec = args
            if isinstance(codec, str) and codec.lower().replace("_", "") in ("rot13", "rot-13"):
                return codecs.decode(data, "rot13") if isinstance(data, str) else None
            return None
        if dotted in DECODERS:
            if len(args) != 1 or not isinstance(args[0], str | bytes):
                return None
            return _decode_base(dotted, args[0])
        target = self._fold_any(func.value, d)
        if not isinstance(target, str | bytes):
            return None
        method = func.attr
        try:
            if method == "decode" and isinstance(target, bytes):
                return target.decode(*[a for a in args if isinstance(a, str)][:1] or ["utf-8"])
            if method == "encode" and isinstance(target, str):
                return target.encode()
            if method in ("lower", "upper", "strip", "lstrip", "rstrip", "title", "capitalize",
                          "casefold", "swapcase", "replace", "format", "removeprefix",
                          "removesuffix", "zfill", "center", "ljust", "rjust"):  # fmt: skip
                return _capped(getattr(target, method)(*args))
        except (ValueError, TypeError, UnicodeError, IndexError, KeyError, AttributeError):
            return None
        return None

    def _fold_join(self, separator: ast.expr, items: ast.expr, d: int) -> str | bytes | None:
        sep = self._fold_any(separator, d)
        if not isinstance(sep, str | bytes) or not isinstance(items, ast.List | ast.Tuple):
            return None
        pieces = [self._fold_any(i, d) for i in items.elts]
        if not all(isinstance(p, type(sep)) for p in pieces):
            return None
        joined = _capped(sep.join(pieces))  # type: ignore[arg-type]  # all of sep's type
        return joined if isinstance(joined, str | bytes) else None

    # -- where code runs


def _binop(op: ast.operator, left: object, right: object) -> str | bytes | int | None:
    try:
        if isinstance(op, ast.Add) and type(left) is type(right) and left is not None:
            return _capped(left + right)  # type: ignore[operator]
        if isinstance(op, ast.Mult) and isinstance(left, str | bytes) and isinstance(right, int):
            return _capped(left * min(right, FOLD_CHARS)) if right >= 0 else None
        if isinstance(op, ast.Mod) and isinstance(left, str) and isinstance(right, str | int):
            return _capped(left % right)
    except (TypeError, ValueError, OverflowError):
        return None
    return None


def _capped(value: object) -> str | bytes | int | None:
    if isinstance(value, str | bytes):
        return value if len(value) <= FOLD_CHARS else None
    return value if isinstance(value, int) else None


def _decode_base(how: str, data: str | bytes) -> bytes | None:
    try:
        if how == "bytes.fromhex":
            return bytes.fromhex(data if isinstance(data, str) else data.decode("ascii"))
        if how == "binascii.unhexlify":
            return binascii.unhexlify(data)
        decoder = getattr(base64, how.split(".", 1)[1])
        return decoder(data)  # type: ignore[no-any-return]
    except (ValueError, TypeError, binascii.Error):
        return None
