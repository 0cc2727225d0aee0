"""Real git repositories: git with a fixed identity, the demo repository, the project's paths."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The project's folder (``worker.py``, ``examples/``, ...)."""
EXAMPLES = ROOT / "examples"
GIT = [
    "git",
    "-c",
    "user.name=Test",
    "-c",
    "user.email=test@localhost",
    "-c",
    "commit.gpgsign=false",
]


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` (failing on a non-zero exit); its stdout, stripped."""
    return subprocess.run(
        [*GIT, *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_demo_repo(repo: Path) -> Path:
    """The demo's slugify repository with its bug, committed on main, at ``repo``."""
    subprocess.run(["cp", "-r", str(EXAMPLES / "demo" / "repo"), str(repo)], check=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def task_clones(home: Path, repo: Path) -> list[str]:
    """The task clones under ``home`` (LOOP_HOME) made from ``repo``: each borrows the
    objects of that repository's store of base history."""
    from activities.host import clone

    store = clone.store_for((home / "stores").resolve(), str(repo.resolve())) / "objects"
    found = (home / "worktrees").resolve()
    return sorted(
        str(p)
        for p in (found.iterdir() if found.is_dir() else [])
        if str(store.resolve()) in clone.alternates(str(p / ".git"))
    )


SRC_SLUGIFY = '''"""Turn titles into URL slugs."""


def slugify(text: str) -> str:
    return text.lower().replace(" ", "-")
'''
SRC_TESTS = """from slugify import slugify


def test_plain_words():
    assert slugify("Hello World") == "hello-world"


def test_punctuation():
    assert slugify("Hello, World!") == "hello-world"
"""


SRC_PROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "slugs"
version = "0.1"

[project.optional-dependencies]
test = ["pytest"]

[tool.setuptools]
py-modules = ["slugify"]
package-dir = {"" = "src"}

[tool.pytest.ini_options]
pythonpath = ["src"]
"""


def make_src_repo(repo: Path) -> Path:
    """A second repository, laid out as the guides' task files expect: the code under
    ``src/``, pytest tests under ``tests/`` (``tests/test_slugify.py`` and
    ``tests/test_slugify_existing.py``, the same), a project pip installs with its
    ``test`` extra (pytest); the bug of the demo's, committed on main."""
    (repo / "src").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "src" / "slugify.py").write_text(SRC_SLUGIFY)
    (repo / "tests" / "test_slugify.py").write_text(SRC_TESTS)
    (repo / "tests" / "test_slugify_existing.py").write_text(SRC_TESTS)
    (repo / "pyproject.toml").write_text(SRC_PROJECT)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo
