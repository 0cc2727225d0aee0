"""What the witness gives a test in place of pytest's ``capsys``, ``capfd`` and
``recwarn``: its output and its warnings, read back as pytest's fixtures return them.

Part of the witness (``sitecustomize.py`` in this folder), imported only in a child
that runs one file's tests; standard library only, no syntax newer than Python 3.8.
"""

import os
import sys

from loopwork_witness_collect import Unwitnessable


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
