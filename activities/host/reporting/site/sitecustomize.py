"""Start-up hook of a gate's Python processes: claim Loopwork's report channel early.

Python imports ``sitecustomize`` while it starts, before the script's folder or the
current directory is on ``sys.path``, so no file of the repository can stand in for
this one, and nothing of the repository has run yet. A test process (``python -m
pytest``, ``python -m unittest``, a ``pytest`` script) claims the channel here;
any other process leaves it to its children. The interpreter's own
``sitecustomize``, if it has one, runs afterwards as it would have.
"""

import os
import sys


def _start():
    if "LOOP_REPORT_FD" not in os.environ:
        return
    import loopwork_report

    argv = getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]
    if loopwork_report.is_test_process(argv):
        loopwork_report.claim()
        if "unittest" in argv:
            loopwork_report.watch_unittest()


def _chain():
    """Run the ``sitecustomize`` this one shadows (Debian's, a distribution's)."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_start()
_chain()
