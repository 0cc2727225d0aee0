"""The witness's runners: one file's named tests run as pytest or unittest would run
them (fixtures set up and torn down, marks obeyed, output captured), each outcome a
record for the child to sign.

Part of the witness (``sitecustomize.py`` in this folder), imported only in a child
that runs one file's tests; standard library only, no syntax newer than Python 3.8.
"""

import os
import sys

from loopwork_witness_capture import _Capture, _FdCapture, _Recorded
from loopwork_witness_collect import (
    MESSAGE_CHARS,
    Unwitnessable,
    _callspecs,
    _condition,
    _fixtures_in,
    _import_path,
    _ini,
    _ini_lines,
    _ini_list,
    _marks,
)


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
