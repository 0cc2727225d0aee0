"""A repository whose code needs a third-party package, and an environment that installs it.

Offline: the setup makes a virtualenv without pip and writes into it what ``pip install -e .``
and ``pip install -r requirements.txt`` would (a ``.pth`` naming the tree's ``src``, the
package ``dep`` at the version ``requirements.txt`` pins), so everything but the registry is
real and no test here needs the network.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.repos import git

INSTALL = """set -e
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$PWD/src" > "$site/_calc.pth"
version=$(sed -n 's/^dep==//p' requirements.txt)
[ -n "$version" ] || { echo "requirements.txt pins no dep version" >&2; exit 4; }
echo "VALUE = $version" > "$site/dep.py"
"""
"""The setup's second command (``tools/install.sh``): the editable install and ``dep``."""

SETUP = ["python3 -m venv --without-pip .venv", "bash tools/install.sh"]
TESTS = ".venv/bin/python -m unittest discover -s tests -t ."
"""The gate: the virtualenv's interpreter, as a person would run it."""
CALC = """import dep


def add(a, b):
    return a - b
"""
"""The bug: ``add`` subtracts. ``calc`` is in ``src/``: only the editable install's path
makes it importable, and only ``dep`` installed makes it import."""
FIXED = CALC.replace("a - b", "a + b")
TEST_CALC = """import unittest

from calc import add


class Calc(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)

    def test_zero(self):
        self.assertEqual(add(0, 0), 0)
"""


def make_env_repo(repo: Path, requirements: str = "dep==1\n") -> Path:
    """The calc repository with its bug, committed on main."""
    (repo / "src" / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "tools").mkdir()
    (repo / "src" / "calc" / "__init__.py").write_text(CALC)
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "tests" / "test_calc.py").write_text(TEST_CALC)
    (repo / "tools" / "install.sh").write_text(INSTALL)
    (repo / "requirements.txt").write_text(requirements)
    (repo / ".gitignore").write_text(".venv/\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def environment(**overrides: object) -> dict:
    """The task file's ``environment`` for the calc repository."""
    return {"setup": list(SETUP), **overrides}
