"""The witness's reading of a test file as pytest would read it: its ini options, the
module's import, its fixtures, marks and parametrization, and the ids pytest gives them.

Part of the witness (``sitecustomize.py`` in this folder), imported only in a child
that runs one file's tests; standard library only, no syntax newer than Python 3.8.
"""

import os
import sys

MESSAGE_CHARS = 1500


class Unwitnessable(Exception):
    """The witness cannot run this test as the runner would: say why, do not guess."""


def _ini(root):
    """pytest's ini options where pytest reads them (the first file that has a section)."""
    import configparser

    for name in ("pytest.ini", ".pytest.ini"):
        path = os.path.join(root, name)
        if os.path.isfile(path):
            parser = configparser.ConfigParser(interpolation=None)
            parser.read(path, encoding="utf-8")
            return dict(parser["pytest"]) if parser.has_section("pytest") else {}
    path = os.path.join(root, "pyproject.toml")
    if os.path.isfile(path):
        try:
            import tomllib

            with open(path, "rb") as f:
                options = tomllib.load(f).get("tool", {}).get("pytest", {}).get("ini_options")
            if options is not None:
                return options
        except (ImportError, ValueError):
            pass
    for name, section in (("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")):
        path = os.path.join(root, name)
        if os.path.isfile(path):
            parser = configparser.ConfigParser(interpolation=None)
            parser.read(path, encoding="utf-8")
            if parser.has_section(section):
                return dict(parser[section])
    return {}


def _ini_list(value):
    """An ini option of pytest's ``args``/``paths`` kind: a TOML list, or words."""
    if isinstance(value, list):
        return [str(v) for v in value]
    return str(value or "").split()


def _ini_lines(value):
    if isinstance(value, list):
        return [str(v) for v in value]
    return [line.strip() for line in str(value or "").split("\n") if line.strip()]


def _import_path(path):
    """Import ``path`` as pytest's default import mode (prepend) does: its package's
    parent folder first on ``sys.path``, the module named by its package path."""
    import importlib

    folder = os.path.dirname(os.path.abspath(path))
    parts = [os.path.splitext(os.path.basename(path))[0]]
    if parts[0] == "__init__":
        parts = []
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        parts.insert(0, os.path.basename(folder))
        folder = os.path.dirname(folder)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = ".".join(parts)
    known = sys.modules.get(name)
    if known is not None and os.path.abspath(getattr(known, "__file__", "") or "") != (
        os.path.abspath(path)
    ):
        del sys.modules[name]
    importlib.invalidate_caches()
    return importlib.import_module(name)


# ------------------------------------------------------------------ unittest


class _Fixture:
    def __init__(self, name, func, scope, autouse, params, owner):
        self.name, self.func, self.scope = name, func, scope or "function"
        self.autouse, self.params, self.owner = autouse, params, owner


def _fixture_of(value, attribute):
    """A pytest fixture's definition, from either way pytest has marked one."""
    marker = getattr(value, "_fixture_function_marker", None)  # pytest >= 8.4
    if marker is not None:
        getter = getattr(value, "_get_wrapped_function", None)
        func = getter() if getter is not None else getattr(value, "_fixture_function", None)
    else:
        marker = getattr(value, "_pytestfixturefunction", None)  # pytest < 8.4
        if marker is None:
            return None
        wrapped = getattr(value, "__pytest_wrapped__", None)
        func = getattr(wrapped, "obj", value)
    if func is None:
        return None
    name = getattr(marker, "name", None) or attribute
    scope = getattr(marker, "scope", "function")
    scope = scope if isinstance(scope, str) else getattr(scope, "value", "function")
    return _Fixture(name, func, scope, bool(getattr(marker, "autouse", False)),
                    getattr(marker, "params", None), None)  # fmt: skip


def _fixtures_in(namespace, owner=None):
    found = {}
    for attribute, value in list(vars(namespace).items()):
        fixture = _fixture_of(value, attribute)
        if fixture is not None:
            fixture.owner = owner
            found[fixture.name] = fixture
    return found


def _marks(obj):
    marks = getattr(obj, "pytestmark", [])
    if not isinstance(marks, list):
        marks = [marks]
    return [getattr(m, "mark", m) for m in marks]


def _escaped(value):
    if isinstance(value, bytes):
        text = value.decode("ascii", "backslashreplace")
    else:
        text = value.encode("unicode_escape").decode("ascii")
    table = {i: f"\\x{i:02x}" for i in range(128) if i not in range(32, 127)}
    table.update({ord("\t"): "\\t", ord("\r"): "\\r", ord("\n"): "\\n"})
    return text.translate(table)


def _idval(value, argname, idx, long_strings):
    import enum
    import re

    if isinstance(value, (str, bytes)):
        if len(value) > 100 and not long_strings:
            return argname + str(idx)
        return _escaped(value)
    if value is None or isinstance(value, (float, int, bool, complex)):
        return str(value)
    if isinstance(value, re.Pattern):
        return _escaped(value.pattern)
    if isinstance(value, enum.Enum):
        return str(value)
    name = getattr(value, "__name__", None)
    if isinstance(name, str):
        return name
    return argname + str(idx)


def _unique(ids):
    from collections import Counter, defaultdict

    counts = Counter(ids)
    if len(counts) == len(ids):
        return ids
    suffixes = defaultdict(int)
    out = list(ids)
    for index, one in enumerate(ids):
        if counts[one] > 1:
            suffix = "_" if one and one[-1].isdigit() else ""
            new = f"{one}{suffix}{suffixes[one]}"
            while new in set(ids):
                suffixes[one] += 1
                new = f"{one}{suffix}{suffixes[one]}"
            out[index] = new
            suffixes[one] += 1
    return out


_VALUES = {}
"""A mark's parameter values, read once (they may be an iterator, as pytest allows)."""


def _parameter_sets(mark, long_strings):
    """(ids, [(values by argname, marks)]) of one ``parametrize`` mark."""
    args, kwargs = list(mark.args), dict(mark.kwargs)
    argnames = kwargs.pop("argnames", args.pop(0) if args else None)
    argvalues = kwargs.pop("argvalues", args.pop(0) if args else None)
    if id(mark) not in _VALUES:
        _VALUES[id(mark)] = (mark, list(argvalues or ()))
    argvalues = _VALUES[id(mark)][1]
    if kwargs.get("indirect"):
        raise Unwitnessable("its parametrization is indirect (through fixtures)")
    if isinstance(argnames, str):
        names = [n.strip() for n in argnames.split(",") if n.strip()]
    else:
        names = list(argnames)
    given_ids = kwargs.get("ids")
    sets = []
    ids = []
    for idx, entry in enumerate(list(argvalues)):
        values, marks, given = entry, [], None
        if type(entry).__name__ == "ParameterSet":
            values, marks, given = entry.values, list(entry.marks), entry.id
        elif len(names) == 1:
            values = (entry,)
        values = tuple(values)
        if len(values) != len(names):
            raise Unwitnessable("a parameter set does not match its argument names")
        if given is not None:
            one = _escaped(given)
        elif (
            isinstance(given_ids, (list, tuple))
            and idx < len(given_ids)
            and (given_ids[idx] is not None)
        ):
            one = str(_idval(given_ids[idx], "", idx, True))
        elif callable(given_ids):
            parts = []
            for value, argname in zip(values, names):
                made = given_ids(value)
                parts.append(_idval(made, argname, idx, True) if made is not None
                             else _idval(value, argname, idx, long_strings))  # fmt: skip
            one = "-".join(parts)
        else:
            one = "-".join(_idval(v, n, idx, long_strings) for v, n in zip(values, names))
        ids.append(one)
        sets.append((dict(zip(names, values)), [getattr(m, "mark", m) for m in marks]))
    if not sets:
        return [""], [(dict.fromkeys(names), [_empty_mark(names)])]
    return _unique(ids), sets


class _Mark:
    def __init__(self, name, *args, **kwargs):
        self.name, self.args, self.kwargs = name, args, kwargs


def _empty_mark(names):
    return _Mark("skip", reason="got empty parameter set " + repr(names))


def _callspecs(marks, long_strings):
    """Every ``[id]`` of a test and its parameters and marks, as pytest forms them."""
    specs = [([], {}, [])]
    for mark in marks:
        if mark.name != "parametrize":
            continue
        ids, sets = _parameter_sets(mark, long_strings)
        specs = [
            ([*idlist, one], dict(params, **values), spec_marks + more)
            for idlist, params, spec_marks in specs
            for one, (values, more) in zip(ids, sets)
        ]
    return [("-".join(idlist), params, spec_marks) for idlist, params, spec_marks in specs]


def _condition(condition, module):
    if isinstance(condition, str):
        import platform

        scope = dict(vars(module))
        scope.update({"os": os, "sys": sys, "platform": platform})
        return bool(eval(condition, scope))  # the test file's own condition, as pytest does
    return bool(condition)
