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

    loopwork_report.install(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])


def _chain():
    """Run the ``sitecustomize.py`` this one shadows (Debian's, a distribution's), as
    ``site`` would have (without importlib: every Python process of a gate runs this)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for folder in sys.path:
        path = os.path.join(folder or ".", "sitecustomize.py")
        if os.path.abspath(folder or ".") != here and os.path.isfile(path):
            with open(path, "rb") as f:
                code = compile(f.read(), path, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": path})
            return


_start()
_chain()
