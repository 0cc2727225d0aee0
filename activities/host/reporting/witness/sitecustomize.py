"""Loopwork's witness: the required tests run again, outside the runner, one process a file.

A ``run`` gate's verdict comes from records sent from inside the test process, where
the code under test runs too. The witness is a second, independent observation of
the tests the verdict requires (those failing at base, those of protected files): the
gate's command runs once more with this folder on ``PYTHONPATH``; its first test
process (``python -m pytest``, ``pytest``, ``python -m unittest``) never starts its
runner. Instead, before any code of the repository is imported, this module takes its
plan (which tests) and the channel's key, and forks one child per test file. A child
drops every trace of Loopwork and of the runner (the ``LOOP_*`` and ``PYTEST_*``
variables, this folder, this module), imports the file as pytest would, runs the
named tests with a small runner of its own (fixtures, parametrization, marks,
unittest cases) and writes each outcome, signed with a key of its own, to a pipe. The
parent has imported nothing of the repository: it checks each child's records and
exit, and only it holds the channel to the worker, which it closes in every child.

Code that behaves one way under pytest (a variable of the runner's, the reporter, the
runner's modules) and another way here is seen as two outcomes that disagree. What
this runner cannot run (a fixture it does not provide, a parametrization it cannot
match) is reported as not witnessed, with the reason.

Standard library only, no syntax newer than Python 3.8: it runs on the gate's Python.
"""

import os
import sys

FD_VARIABLE = "LOOP_WITNESS_FD"
PLAN_VARIABLE = "LOOP_WITNESS_PLAN"
TEST_COMMANDS = ("pytest", "py.test", "unittest")
DROPPED = ("LOOP_", "PYTEST_", "_PYTEST")
MESSAGE_CHARS = 1500
KEY_BYTES = 32
NO_KEY = b"no-key"


class Unwitnessable(Exception):
    """The witness cannot run this test as the runner would: say why, do not guess."""


def _is_test_process(argv):
    args = list(argv[1:])
    if "-m" in args[:-1]:
        return args[args.index("-m") + 1] in TEST_COMMANDS
    script = next((a for a in args if not a.startswith("-")), "")
    return os.path.basename(script) in TEST_COMMANDS


def _start():
    if FD_VARIABLE not in os.environ:
        return
    argv = getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]
    if not _is_test_process(argv):
        return
    fd = os.environ.pop(FD_VARIABLE)
    plan_path = os.environ.pop(PLAN_VARIABLE, "")
    status = 1
    try:
        status = _witness(int(fd), plan_path, argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)  # the command's own runner never starts


# ------------------------------------------------------------------ the parent


def _witness(fd, plan_path, argv):
    import json

    os.set_blocking(fd, False)
    try:
        first = os.read(fd, 256)
    except BlockingIOError:
        os.write(fd, NO_KEY)
        return 1
    os.set_blocking(fd, True)
    session, _, key = first.partition(b":")
    channel = _Channel(fd, int(session), key)
    with open(plan_path, encoding="utf-8") as f:
        plan = json.load(f)
    channel.send({"t": "start", "runner": "witness", "version": sys.version.split()[0],
                  "root": plan.get("root", ""), "cwd": os.getcwd()})  # fmt: skip
    module_mode = "-m" in argv[1:]
    for file, ids in plan.get("files", []):
        for record in _run_file(plan, file, ids, fd, module_mode):
            channel.send(record)
    channel.send({"t": "end", "exit": 0})
    channel.flush()
    return 0


class _Channel:
    def __init__(self, fd, session, key):
        import hashlib
        import json

        self.fd = fd
        self.session = session
        self.mac = hashlib.blake2b(key=key, digest_size=32)
        self.encode = json.JSONEncoder(separators=(",", ":"), default=str).encode
        self.seq = 0
        self.pending = []

    def send(self, record):
        self.pending.append(record)
        if len(self.pending) >= 64 or record["t"] != "test":
            self.flush()

    def flush(self):
        if not self.pending:
            return
        body = self.encode({"s": self.session, "n": self.seq, "r": self.pending})
        body = body.encode("utf-8", "replace")
        self.seq += 1
        self.pending = []
        signer = self.mac.copy()
        signer.update(body)
        os.write(self.fd, signer.hexdigest().encode("ascii") + b" " + body)


def _run_file(plan, file, ids, channel_fd, module_mode):
    """Fork a child for one file's tests; its signed records, checked. Every id gets a
    record: a child that ends before it reported one leaves it an error."""
    import hashlib
    import json

    key = os.urandom(KEY_BYTES)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nothing of the parent's channel, and a pipe of its own
        status = 0
        try:
            os.close(channel_fd)
            os.close(read_end)
            _child(plan, file, ids, write_end, key, module_mode)
        except BaseException:
            status = 70
        finally:
            os._exit(status)
    os.close(write_end)
    data = b""
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, wait_status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(wait_status) if hasattr(os, "waitstatus_to_exitcode") else (
        wait_status >> 8)  # fmt: skip
    found, ended = {}, False
    for line in data.split(b"\n"):
        mac, _, body = line.partition(b" ")
        if not body:
            continue
        signer = hashlib.blake2b(key=key, digest_size=32)
        signer.update(body)
        if signer.hexdigest().encode("ascii") != mac:
            continue  # not the child's runner: written blind, or forged
        try:
            record = json.loads(body)
        except ValueError:
            continue
        if record.get("t") == "done":
            ended = True
        elif record.get("t") == "test" and record.get("id") in ids:
            found.setdefault(record["id"], record)
    records = []
    for test_id in ids:
        record = found.get(test_id)
        if record is None or not ended or code != 0:
            why = (
                f"the witness's process for {file} ended (exit code {code}) before it "
                "reported this test"
                if record is None or not ended
                else f"the witness's process for {file} exited with code {code}"
            )
            record = {"t": "test", "id": test_id, "o": "error", "m": why}
        record["f"] = file
        records.append(record)
    return records


# ------------------------------------------------------------------ the child


def _child(plan, file, ids, write_end, key, module_mode):
    import hashlib
    import json

    here = os.path.dirname(os.path.abspath(__file__))
    for name in list(os.environ):
        if name.startswith(DROPPED):
            del os.environ[name]
    path = os.environ.get("PYTHONPATH", "")
    kept = [p for p in path.split(os.pathsep) if p and os.path.abspath(p) != here]
    if kept:
        os.environ["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        os.environ.pop("PYTHONPATH", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if module_mode:
        sys.path.insert(0, os.getcwd())
    for name in ("sitecustomize",):
        sys.modules.pop(name, None)
    sys.argv[:] = [os.path.join(os.getcwd(), file)]
    if hasattr(sys, "orig_argv"):
        sys.orig_argv = [sys.executable, sys.argv[0]]
    _chain(here)
    encode = json.JSONEncoder(separators=(",", ":"), default=str).encode
    out = os.fdopen(write_end, "wb", buffering=0)

    def emit(record):
        body = encode(record).encode("utf-8", "replace")
        signer = hashlib.blake2b(key=key, digest_size=32)
        signer.update(body)
        out.write(signer.hexdigest().encode("ascii") + b" " + body + b"\n")

    runner = _UnittestRunner if plan.get("runner") == "unittest" else _PytestRunner
    runner(plan, file, emit).run(ids)
    emit({"t": "done"})
    out.close()


def _chain(here):
    """Run the ``sitecustomize.py`` this one shadows (a distribution's), as ``site`` would."""
    for folder in sys.path:
        path = os.path.join(folder or ".", "sitecustomize.py")
        if os.path.abspath(folder or ".") != here and os.path.isfile(path):
            with open(path, "rb") as f:
                code = compile(f.read(), path, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": path})
            return


def _tail(text, limit=MESSAGE_CHARS):
    text = text or ""
    return text if len(text) <= limit else "…" + text[-limit:]


def _failure(exc_type, exc, tb):
    import traceback

    text = "".join(traceback.format_exception(exc_type, exc, tb))
    module = getattr(exc_type, "__module__", "") or ""
    name = getattr(exc_type, "__qualname__", "") or getattr(exc_type, "__name__", "")
    return _tail(text), name if module in ("builtins", "") else module + "." + name


def _is_skip(exc):
    import unittest

    return isinstance(exc, unittest.SkipTest) or type(exc).__name__ == "Skipped"


def _is_xfail_outcome(exc):
    return type(exc).__name__ == "XFailed"


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


class _Result:
    """A unittest result that keeps the first failure (subtests included)."""

    def __init__(self):
        import unittest

        self.result = unittest.TestResult()
        self.outcome = "passed"
        self.message = ""
        self.exception = ""

    def take(self):
        r = self.result
        for kind, entries in (("error", r.errors), ("failed", r.failures)):
            if entries and self.outcome == "passed":
                self.outcome, self.message = kind, entries[0][1]
        whole = [(t, why) for t, why in r.skipped if type(t).__name__ != "_SubTest"]
        if whole and self.outcome == "passed":
            self.outcome, self.message = "skipped", str(whole[0][1])  # a subtest's skip is not
        if r.expectedFailures and self.outcome == "passed":
            self.outcome = "xfailed"
        if r.unexpectedSuccesses and self.outcome == "passed":
            self.outcome = "xpassed"
        return self.outcome, _tail(self.message)


class _UnittestRunner:
    def __init__(self, plan, file, emit):
        self.plan, self.file, self.emit = plan, file, emit

    def run(self, ids):
        import unittest

        for test_id in ids:
            try:
                suite = unittest.defaultTestLoader.loadTestsFromName(test_id)
                errors = getattr(unittest.defaultTestLoader, "errors", [])
                if errors:
                    raise Unwitnessable("cannot load it: " + _tail(errors[-1], 300))
                result = _Result()
                suite.run(result.result)
                outcome, message = result.take()
                self.emit({"t": "test", "id": test_id, "o": outcome, "m": message})
            except Unwitnessable as e:
                self.emit({"t": "test", "id": test_id, "o": "missing", "m": str(e)})
            except Exception:
                message, exc = _failure(*sys.exc_info())
                self.emit({"t": "test", "id": test_id, "o": "error", "m": message, "x": exc})


# ------------------------------------------------------------------ pytest-style tests


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


class _Request:
    """The ``request`` fixture's everyday parts; the rest is not the witness's to fake."""

    def __init__(self, runner, test, param, name):
        self._runner, self._test = runner, test
        self.param = param
        self.fixturename = name
        self.function = test.function
        self.cls = test.cls
        self.instance = test.instance
        self.module = test.module
        self.node = test
        self.keywords = {m.name: m for m in test.marks}

    def getfixturevalue(self, name):
        return self._runner.value(name, self._test)

    def addfinalizer(self, finalizer):
        self._test.finalizers.append(finalizer)

    def __getattr__(self, name):
        raise Unwitnessable("it uses request." + name + ", which only pytest has")


class _Test:
    def __init__(self, test_id, function, cls, module, params, marks):
        self.nodeid = test_id
        self.name = test_id.rsplit("::", 1)[-1]
        self.function, self.cls, self.module = function, cls, module
        self.params, self.marks = params, marks
        self.instance = None
        self.finalizers = []
        self.values = {}

    def get_closest_marker(self, name):
        return next((m for m in self.marks if m.name == name), None)

    def iter_markers(self, name=None):
        return [m for m in self.marks if name is None or m.name == name]


class _PytestRunner:
    def __init__(self, plan, file, emit):
        self.plan, self.file, self.emit = plan, file, emit
        self.root = plan.get("root") or os.getcwd()
        self.ini = _ini(self.root)
        self.cached = {}
        self.finalizers = []
        self.setups = set()

    # -- collection
    def _conftests(self, path):
        found = []
        folder = os.path.dirname(os.path.abspath(path))
        root = os.path.abspath(self.root)
        chain = []
        while True:
            chain.append(folder)
            if folder == root or os.path.dirname(folder) == folder:
                break
            folder = os.path.dirname(folder)
        if root not in chain:
            chain = [os.path.dirname(os.path.abspath(path))]
        for folder in reversed(chain):
            candidate = os.path.join(folder, "conftest.py")
            if os.path.isfile(candidate):
                found.append(_import_path(candidate))
        return found

    def run(self, ids):
        for entry in reversed(_ini_list(self.ini.get("pythonpath", ""))):
            sys.path.insert(0, os.path.join(self.root, entry))
        path = os.path.join(self.root, self.file)
        try:
            conftests = self._conftests(path)
            module = _import_path(path)
        except BaseException:
            message, exc = _failure(*sys.exc_info())
            for test_id in ids:
                self.emit({"t": "test", "id": test_id, "o": "error", "x": exc,
                           "m": "cannot be imported: " + message})  # fmt: skip
            return
        self.layers = [_fixtures_in(c) for c in conftests] + [_fixtures_in(module)]
        hooks = [c for c in [*conftests, module] if hasattr(c, "pytest_generate_tests")]
        self.generates = bool(hooks)
        self.module = module
        try:
            for test_id in ids:
                self.emit(self._one(test_id))
        finally:
            for finalizer in reversed(self.finalizers):
                try:
                    finalizer()
                except Exception:
                    pass

    def _find(self, test_id):
        parts = test_id.split("::")
        if len(parts) < 2:
            raise Unwitnessable("its id names no test in " + self.file)
        names, tail = parts[1:], parts[-1]
        base, _, params = tail.partition("[")
        params = params[:-1] if params.endswith("]") else params
        owner, cls = self.module, None
        for name in names[:-1]:
            owner = getattr(owner, name, None)
            if not isinstance(owner, type):
                raise Unwitnessable("it is not a test function or method the witness can find")
            cls = owner
        function = getattr(owner, base, None)
        if function is None:
            raise Unwitnessable("its function " + base + " is not in " + self.file)
        return cls, function, params

    def _one(self, test_id):
        import inspect
        import warnings

        record = {"t": "test", "id": test_id}
        try:
            cls, function, params = self._find(test_id)
            if cls is not None and _is_unittest_case(cls):
                return dict(record, **self._unittest_case(cls, function.__name__))
            if self.generates:
                raise Unwitnessable("a pytest_generate_tests hook parametrizes its file")
            marks = _marks(function) + (_marks(cls) if cls is not None else []) + _marks(
                self.module)  # fmt: skip
            for lenient in (False, True):
                specs = {spec_id: (p, m) for spec_id, p, m in _callspecs(marks, lenient)}
                if params in specs:
                    break
            else:
                raise Unwitnessable("the witness cannot tell which parameters [" + params
                                    + "] are")  # fmt: skip
            values, spec_marks = specs[params]
            test = _Test(test_id, function, cls, self.module, values, spec_marks + marks)
        except Unwitnessable as e:
            return dict(record, o="missing", m=str(e))
        except Exception:
            message, exc = _failure(*sys.exc_info())
            return dict(record, o="missing", m="the witness could not read the test: " + message)
        skip = self._skipped(test)
        if skip is not None:
            return dict(record, o="skipped", m=skip)
        xfail = next((m for m in test.marks if m.name == "xfail"), None)
        if xfail is not None and xfail.args and not _condition(xfail.args[0], self.module):
            xfail = None
        if xfail is not None and "condition" in xfail.kwargs:
            if not _condition(xfail.kwargs["condition"], self.module):
                xfail = None
        if xfail is not None and xfail.kwargs.get("run") is False:
            return dict(record, o="xfailed", m="not run (xfail run=False)")
        with warnings.catch_warnings():
            self._filters(test)
            try:
                self._setup(test)
                if cls is not None:
                    test.instance = cls()
                kwargs = {}
                for name in self._argnames(function):
                    kwargs[name] = self.value(name, test)
                for name in self._autouse(test) + self._usefixtures(test):
                    self.value(name, test)
            except Unwitnessable as e:
                self._teardown(test)
                return dict(record, o="missing", m=str(e))
            except BaseException as exc:
                outcome = self._setup_failure(exc, test)
                self._teardown(test)
                return dict(record, **outcome)
            call = getattr(test.instance, function.__name__) if test.instance is not None else (
                function)  # fmt: skip
            try:
                result = call(**kwargs)
                if inspect.iscoroutine(result):
                    import asyncio

                    asyncio.run(result)
                raised = None
            except Unwitnessable as e:
                self._teardown(test)
                return dict(record, o="missing", m=str(e))
            except KeyboardInterrupt:
                raise
            except BaseException:
                raised = sys.exc_info()
            torn = self._teardown(test)
        return dict(record, **self._outcome(raised, torn, xfail))

    def _outcome(self, raised, torn, xfail):
        if raised is not None and _is_skip(raised[1]):
            return {"o": "skipped", "m": _tail(str(raised[1]))}
        if raised is not None and _is_xfail_outcome(raised[1]):
            return {"o": "xfailed", "m": _tail(str(raised[1]))}
        if xfail is not None:
            expected = xfail.kwargs.get("raises")
            if raised is not None and (expected is None or isinstance(raised[1], expected)):
                return {"o": "xfailed", "m": _tail(str(raised[1]))}
            if raised is None:
                strict = xfail.kwargs.get("strict", str(self.ini.get("xfail_strict", "")).lower()
                                          in ("true", "1", "yes"))  # fmt: skip
                return {"o": "failed", "m": "[XPASS(strict)]"} if strict else {"o": "xpassed"}
        if raised is not None:
            message, exc = _failure(*raised)
            return {"o": "failed", "m": message, "x": exc}
        if torn is not None:
            message, exc = torn
            return {"o": "error", "m": message, "x": exc}
        return {"o": "passed"}

    def _setup_failure(self, exc, test):
        if _is_skip(exc):
            return {"o": "skipped", "m": _tail(str(exc))}
        message, name = _failure(type(exc), exc, exc.__traceback__)
        return {"o": "error", "m": message, "x": name}

    def _filters(self, test):
        lines = _ini_lines(self.ini.get("filterwarnings", ""))
        lines += [a for m in reversed(test.marks) if m.name == "filterwarnings" for a in m.args]
        for line in lines:
            try:
                _filter(line)
            except Exception:
                raise Unwitnessable("its warning filter " + repr(line) + " is not one the "
                                    "witness can apply") from None  # fmt: skip

    def _skipped(self, test):
        for mark in test.marks:
            if mark.name == "skip":
                return str(mark.kwargs.get("reason", mark.args[0] if mark.args else ""))
            if mark.name == "skipif":
                conditions = list(mark.args) or [mark.kwargs.get("condition", True)]
                if any(_condition(c, self.module) for c in conditions):
                    return str(mark.kwargs.get("reason", "skipif"))
        return None

    def _usefixtures(self, test):
        found = []
        for mark in test.marks:
            if mark.name == "usefixtures":
                found += list(mark.args)
        return found + _ini_list(self.ini.get("usefixtures", ""))

    def _autouse(self, test):
        names = []
        for layer in self._layers(test):
            names += [f.name for f in layer.values() if f.autouse]
        return names

    def _layers(self, test):
        layers = list(self.layers)
        if test.cls is not None:
            for klass in reversed(test.cls.__mro__):
                if klass is not object:
                    layers.append(_fixtures_in(klass, owner=klass))
        return layers

    @staticmethod
    def _argnames(function):
        import inspect

        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError):
            return []
        names = []
        for index, parameter in enumerate(signature.parameters.values()):
            if (
                index == 0
                and parameter.name in ("self", "cls")
                and not isinstance(function, staticmethod)
            ):
                continue
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                continue
            if parameter.default is not parameter.empty:
                continue
            names.append(parameter.name)
        return names

    # -- fixtures
    def value(self, name, test, below=None):
        if name in test.params:
            return test.params[name]
        if name in test.values:
            return test.values[name]
        fixture = self._definition(name, test, below)
        if fixture is None:
            value = self._builtin(name, test)
            test.values[name] = value
            return value
        if fixture.params is not None:
            raise Unwitnessable("its fixture " + name + " is parametrized")
        key = (name, id(fixture.func))
        wide = fixture.scope != "function"
        if wide and key in self.cached:
            return self.cached[key]
        import inspect

        func = fixture.func
        if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func):
            raise Unwitnessable("its fixture " + name + " is asynchronous")
        kwargs = {}
        for arg in self._argnames(func):
            if arg == "request":
                kwargs[arg] = _Request(self, test, None, name)
            elif arg == name:
                kwargs[arg] = self.value(arg, test, below=fixture)
            else:
                kwargs[arg] = self.value(arg, test)
        if fixture.owner is not None:
            if test.instance is None:
                raise Unwitnessable("its fixture " + name + " is a method of another class")
            func = func.__get__(test.instance, type(test.instance))
        made = func(**kwargs)
        if inspect.isgenerator(made):
            generator = made
            made = next(generator)
            done = self.finalizers if wide else test.finalizers
            done.append(lambda g=generator: _finish(g))
        if wide:
            self.cached[key] = made
        else:
            test.values[name] = made
        return made

    def _definition(self, name, test, below):
        chosen = None
        passed = below is None
        for layer in reversed(self._layers(test)):
            fixture = layer.get(name)
            if fixture is None:
                continue
            if passed:
                chosen = fixture
                break
            if fixture is below or fixture.func is below.func:
                passed = True
        return chosen

    def _builtin(self, name, test):
        import tempfile

        if name == "tmp_path":
            import pathlib

            return pathlib.Path(tempfile.mkdtemp(prefix="witness-"))
        if name == "tmpdir":
            try:
                from _pytest._py.path import LocalPath  # pytest >= 7.2 carries py.path
            except ImportError:
                try:
                    from py.path import local as LocalPath
                except ImportError:
                    raise Unwitnessable("it uses tmpdir, and py.path is not installed") from None
            return LocalPath(tempfile.mkdtemp(prefix="witness-"))
        if name == "tmp_path_factory":
            import pathlib

            class Factory:
                def mktemp(self, basename, numbered=True):
                    return pathlib.Path(tempfile.mkdtemp(prefix=basename))

                def getbasetemp(self):
                    return pathlib.Path(tempfile.gettempdir())

            return Factory()
        if name == "monkeypatch":
            import pytest

            patch = pytest.MonkeyPatch()
            test.finalizers.append(patch.undo)
            return patch
        if name == "capsys":
            return _Capture(test)
        if name == "capfd":
            return _FdCapture(test)
        if name == "recwarn":
            import warnings

            recorder = warnings.catch_warnings(record=True)
            found = recorder.__enter__()
            warnings.simplefilter("always")
            test.finalizers.append(lambda: recorder.__exit__(None, None, None))
            return _Recorded(found)
        if name == "request":
            return _Request(self, test, None, "request")
        raise Unwitnessable("it needs the fixture " + name + ", which the witness does not "
                            "provide")  # fmt: skip

    # -- xunit setup and teardown
    def _setup(self, test):
        module = self.module
        if "module" not in self.setups:
            self.setups.add("module")
            for name in ("setup_module", "setUpModule"):
                hook = getattr(module, name, None)
                if callable(hook):
                    _call_one(hook, module)
            for name in ("teardown_module", "tearDownModule"):
                hook = getattr(module, name, None)
                if callable(hook):
                    self.finalizers.append(lambda h=hook: _call_one(h, module))
        if test.cls is not None and ("class", test.cls) not in self.setups:
            self.setups.add(("class", test.cls))
            hook = getattr(test.cls, "setup_class", None)
            if callable(hook):
                hook()
            hook = getattr(test.cls, "teardown_class", None)
            if callable(hook):
                self.finalizers.append(hook)
        if test.cls is None:
            hook = getattr(module, "setup_function", None)
            if callable(hook):
                _call_one(hook, test.function)
            hook = getattr(module, "teardown_function", None)
            if callable(hook):
                test.finalizers.append(lambda: _call_one(hook, test.function))

    def _teardown(self, test):
        if test.instance is not None:
            hook = getattr(test.instance, "teardown_method", None)
            if callable(hook):
                test.finalizers.append(lambda: _call_one(hook, test.function))
        failure = None
        for finalizer in reversed(test.finalizers):
            try:
                finalizer()
            except BaseException as exc:
                if failure is None:
                    failure = _failure(type(exc), exc, exc.__traceback__)
        test.finalizers = []
        return failure

    def _unittest_case(self, cls, method):
        result = _Result()
        cls(method).run(result.result)
        outcome, message = result.take()
        return {"o": outcome, "m": message}


def _filter(line):
    """One of pytest's ``filterwarnings`` (``action:message:category:module:lineno``, the
    message and module as regular expressions, the category by its dotted name)."""
    import importlib
    import warnings

    parts = [part.strip() for part in line.split(":", 4)]
    parts += [""] * (5 - len(parts))
    action, message, category, module, lineno = parts
    found = Warning
    if category:
        owner, _, name = category.rpartition(".")
        found = getattr(importlib.import_module(owner or "builtins"), name)
    warnings.filterwarnings(action or "default", message=message, category=found,
                            module=module, lineno=int(lineno or 0))  # fmt: skip


def _call_one(hook, argument):
    import inspect

    try:
        takes = len(inspect.signature(hook).parameters)
    except (TypeError, ValueError):
        takes = 0
    return hook(argument) if takes else hook()


def _finish(generator):
    try:
        next(generator)
    except StopIteration:
        return
    raise RuntimeError("a fixture yielded twice")


def _is_unittest_case(cls):
    import unittest

    return isinstance(cls, type) and issubclass(cls, unittest.TestCase)


class _Captured(tuple):
    @property
    def out(self):
        return self[0]

    @property
    def err(self):
        return self[1]


class _Capture:
    def __init__(self, test):
        import io

        self._out, self._err = io.StringIO(), io.StringIO()
        self._saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = self._out, self._err
        test.finalizers.append(self._restore)

    def _restore(self):
        sys.stdout, sys.stderr = self._saved

    def readouterr(self):
        out, err = self._out.getvalue(), self._err.getvalue()
        for stream in (self._out, self._err):
            stream.seek(0)
            stream.truncate()
        return _Captured((out, err))

    def disabled(self):
        raise Unwitnessable("it uses capsys.disabled, which only pytest has")


class _FdCapture:
    """``capfd``: what the process and its children write to descriptors 1 and 2."""

    def __init__(self, test):
        import tempfile

        sys.stdout.flush()
        sys.stderr.flush()
        self._files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
        self._saved = [os.dup(1), os.dup(2)]
        for fd, f in zip((1, 2), self._files):
            os.dup2(f.fileno(), fd)
        test.finalizers.append(self._restore)

    def _restore(self):
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in zip((1, 2), self._saved):
            os.dup2(saved, fd)
            os.close(saved)

    def readouterr(self):
        sys.stdout.flush()
        sys.stderr.flush()
        texts = []
        for f in self._files:
            f.seek(0)
            texts.append(f.read().decode("utf-8", "replace"))
            f.seek(0)
            f.truncate()
        return _Captured(tuple(texts))

    def disabled(self):
        raise Unwitnessable("it uses capfd.disabled, which only pytest has")


class _Recorded(list):
    def __init__(self, found):
        super().__init__()
        self._found = found

    def _sync(self):
        self[:] = list(self._found)

    @property
    def list(self):
        self._sync()
        return list(self)

    def __len__(self):
        return len(self._found)

    def __iter__(self):
        return iter(list(self._found))

    def __getitem__(self, index):
        return list(self._found)[index]

    def pop(self, cls=Warning):
        for i, warning in enumerate(self._found):
            if issubclass(warning.category, cls):
                return self._found.pop(i)
        raise AssertionError("no " + cls.__name__ + " was emitted")

    def clear(self):
        del self._found[:]


_start()
