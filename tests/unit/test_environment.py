"""A repository's environment, decided without building one: the task file's key, ``auto``'s
layouts, key files and the key, an attempt's changed key files, the view that lays it and
the folders it is laid on (docs/guides/environment.md). Builds are in tests/e2e."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from activities.host.sandbox import laid
from activities.host.sandbox.mounts import bwrap_args, plan_view
from activities.host.sandbox.refusals import refused_protected, refused_writes
from loop.contracts import SETUP_TREE, EnvironmentSpec, EvalCase, Harness, Suite, TaskSpec
from loop.contracts.triage import TEMPLATE_KEYS
from loop.rules import environment as rules
from loop.rules.evaluation import spec_for
from tests.support.tasks import task

# --------------------------------------------------------------------------- the task file


def test_environment_auto_and_its_fields(demo_repo: Path) -> None:
    spec = TaskSpec.model_validate({**task(demo_repo, ["true"]), "environment": "auto"})
    assert spec.environment == EnvironmentSpec(setup="auto")
    assert spec.environment.wanted_paths() == [".venv", "node_modules"]
    assert spec.environment.wanted_paths([".venv"]) == [".venv"]
    given = EnvironmentSpec(setup=["npm ci"], paths=["web/node_modules/"], allow_hosts=["Npm.org"])
    assert given.paths == ["web/node_modules"] and given.allow_hosts == ["npm.org"]
    assert "environment" in TEMPLATE_KEYS  # a sources file's template may set it


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("setup", [], "at least one command"),
        ("setup", ["  "], "at least one command"),
        ("setup", "pip install", "valid list"),
        ("paths", [], "at least one folder"),
        ("paths", ["../up"], "inside the tree"),
        ("paths", ["/abs"], "inside the tree"),
        ("paths", [".git/hooks"], "not .git"),
        ("paths", ["."], "inside the tree"),
        ("paths", ["*"], "no globs"),
        ("paths", ["a", "a/b"], "holds another"),
        ("paths", ["a", "a"], "named twice"),
        ("key_files", ["/etc/passwd"], "relative"),
        ("allow_hosts", ["not a host"], "is not a host"),
        ("timeout", 0, "greater than or equal"),
        ("sizes", 1, "Extra inputs"),
    ],
)
def test_an_environment_a_typo_would_open_is_refused(field: str, value: object, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        EnvironmentSpec.model_validate({"setup": ["true"], field: value})


def test_an_eval_case_holds_the_environment_and_a_harness_cannot() -> None:
    gate = {"name": "t", "run": "true"}
    case = EvalCase.model_validate(
        {"id": "c", "goal": "g", "repo": "/r", "commit": "a" * 40, "verify": [gate],
         "environment": "auto"}
    )  # fmt: skip
    harness = Harness(name="h", agent={"command": ["true"]})
    spec = spec_for(Suite(name="s", cases=[case]), harness, case, "run1")
    assert spec.environment == EnvironmentSpec(setup="auto")
    with pytest.raises(ValueError, match="Extra inputs"):
        Harness.model_validate({"name": "h", "agent": {"command": ["true"]}, "environment": "auto"})


# --------------------------------------------------------------------------- rules


def test_key_file_globs_match_from_the_top() -> None:
    assert rules.matches("requirements*.txt", "requirements-dev.txt")
    assert not rules.matches("requirements*.txt", "docs/requirements.txt")
    assert rules.matches("**/package.json", "package.json")
    assert rules.matches("**/package.json", "web/app/package.json")
    assert rules.matches("services/*/go.sum", "services/api/go.sum")
    assert not rules.matches("services/*/go.sum", "services/api/v2/go.sum")
    paths = ["pyproject.toml", "src/x.py", "requirements/test.txt", "sub/pyproject.toml"]
    globs = list(EnvironmentSpec(setup=["true"]).key_globs())
    assert rules.key_files(globs, paths) == ["pyproject.toml", "requirements/test.txt"]


PYPROJECT_WITH_TESTS = """
[project]
name = "x"
[project.optional-dependencies]
docs = ["mkdocs"]
tests = ["pytest"]
"""


@pytest.mark.parametrize(
    ("paths", "text", "setup", "kept"),
    [
        (
            {"pyproject.toml"},
            {"pyproject.toml": PYPROJECT_WITH_TESTS},
            [rules.VENV, ".venv/bin/python -m pip install -e '.[tests]'"],
            [".venv"],
        ),
        (
            {"setup.py", "requirements.txt", "requirements-dev.txt", "docs/requirements.txt"},
            {},
            [
                rules.VENV,
                ".venv/bin/python -m pip install -e .",
                ".venv/bin/python -m pip install -r requirements-dev.txt",
                ".venv/bin/python -m pip install -r requirements.txt",
            ],
            [".venv"],
        ),
        ({"pyproject.toml", "uv.lock"}, {}, ["uv sync --frozen"], [".venv"]),
        (
            {"pyproject.toml", "poetry.lock"},
            {"pyproject.toml": "not toml ["},
            ["POETRY_VIRTUALENVS_IN_PROJECT=true poetry install --no-interaction"],
            [".venv"],
        ),
        ({"package.json", "package-lock.json"}, {}, ["npm ci"], ["node_modules"]),
        ({"package.json", "yarn.lock"}, {}, ["yarn install --frozen-lockfile"], ["node_modules"]),
        ({"package.json"}, {}, ["npm install"], ["node_modules"]),
        ({"go.mod", "go.sum"}, {}, ["go mod vendor"], ["vendor"]),
        ({"go.mod", "vendor/modules.txt"}, {}, None, None),
        ({"README.md", "src/main.c"}, {}, None, None),
    ],
)
def test_auto_finds_the_usual_layouts(
    paths: set[str], text: dict[str, str], setup: list[str] | None, kept: list[str] | None
) -> None:
    found = rules.detect(paths, text)
    assert (found.setup if found else None) == setup
    assert (found.paths if found else None) == kept


def test_auto_reads_the_repository_s_own_word_first() -> None:
    """Its setup script, then a devcontainer's postCreateCommand (in any of its forms, in
    JSON with comments): run as they are, never trusted more (same sandbox, same hosts)."""
    both = {".loopwork/setup.sh", "pyproject.toml", ".devcontainer/devcontainer.json"}
    found = rules.detect(both, {})
    assert found is not None and found.setup == ["bash .loopwork/setup.sh"]
    assert found.origin == "the repository's .loopwork/setup.sh"
    devcontainer = """{
      // the image
      "image": "python:3.12", /* a comment */
      "postCreateCommand": "pip install -e . && echo 'a // not a comment'",
    }"""
    found = rules.detect(
        {".devcontainer/devcontainer.json"}, {".devcontainer/devcontainer.json": devcontainer}
    )
    assert found is not None and found.setup == ["pip install -e . && echo 'a // not a comment'"]
    assert rules.post_create('{"postCreateCommand": ["npm", "ci", "--no audit"]}') == [
        "npm ci '--no audit'"
    ]
    assert rules.post_create('{"postCreateCommand": {"a": "uv sync", "b": ["make", "x"]}}') == [
        "uv sync",
        "make x",
    ]
    for unusable in ("", "{", "[1]", '{"postCreateCommand": 3}', '{"postCreateCommand": [1]}'):
        assert rules.post_create(unusable) == []


def test_the_key_changes_with_everything_it_is_made_of() -> None:
    made = {
        "setup": ["python3 -m venv .venv"],
        "paths": [".venv"],
        "files": {"requirements.txt": "a" * 40},
        "level": "basic",
        "toolchain": "linux x86_64 3.11",
    }
    key = rules.key(**made)  # type: ignore[arg-type]
    assert key == rules.key(**made) and len(key) == 32  # type: ignore[arg-type]
    others = [
        {"setup": ["python3 -m venv .venv", "true"]},
        {"paths": [".venv", "node_modules"]},
        {"files": {"requirements.txt": "b" * 40}},
        {"files": {"requirements.txt": "a" * 40, "setup.py": "c" * 40}},
        {"level": "strict"},
        {"toolchain": "linux x86_64 3.12"},
    ]
    assert len({rules.key(**{**made, **o}) for o in others} | {key}) == len(others) + 1  # type: ignore[arg-type]


def test_an_attempt_s_changed_key_files() -> None:
    given = EnvironmentSpec(setup=["true"], key_files=["deps.lock"])
    assert rules.changed_key_files(given, ["src/a.py", "deps.lock"], 2) == ["deps.lock"]
    assert rules.changed_key_files(given, ["src/a.py", "package.json"], 2) == []
    # Only the first files listed, none of them a key file: the build decides.
    assert rules.changed_key_files(given, ["src/a.py"], 5000) == ["…"]
    auto = EnvironmentSpec(setup="auto", key_files=["deps.lock"])
    assert rules.changed_key_files(auto, [".loopwork/setup.sh", "package.json"], 2) == [
        ".loopwork/setup.sh",
        "package.json",
    ]


# --------------------------------------------------------------------------- the view


def test_the_view_binds_the_environment_read_only_and_links_the_setup_tree(tmp_path: Path) -> None:
    tree = str(tmp_path / "tree")
    kept = str(tmp_path / "home" / "envs" / "k" / "tree" / ".venv")
    view = plan_view(
        strict=True, uid=1, gid=1, tree=tree, tree_writable=True, read_only=[], writable=[],
        protected=[], hide=[str(tmp_path / "home")], secrets=[], tmp_bytes=1,
        laid=[(kept, f"{tree}/.venv")], tree_link=SETUP_TREE,
    )  # fmt: skip
    ops = view.operations()
    args = bwrap_args(ops)
    i = args.index(f"{tree}/.venv")
    assert args[i - 2 : i + 1] == ["--ro-bind", kept, f"{tree}/.venv"]
    j = args.index(SETUP_TREE)
    assert args[j - 2 : j + 1] == ["--symlink", tree, SETUP_TREE]
    # The tree before what is laid in it; the scratch /tmp before the link made in it.
    kinds = [(o.kind, o.path) for o in ops]
    assert kinds.index(("bind", tree)) < kinds.index(("bind", f"{tree}/.venv"))
    assert kinds.index(("tmpfs", "/tmp")) < kinds.index(("symlink", SETUP_TREE))
    building = plan_view(
        strict=False, uid=1, gid=1, tree=tree, tree_writable=True, read_only=[], writable=[],
        protected=[], hide=[], secrets=[], tmp_bytes=1, tree_also=SETUP_TREE,
    )  # fmt: skip
    assert (SETUP_TREE, tree, True) in building.moved


def test_the_folders_laid_on_are_made_and_taken_away(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (tree / "web").symlink_to(outside)  # a link on the way is replaced, never followed
    (tree / "docs").mkdir()
    (tree / "docs" / "node_modules").write_text("a file")
    (tree / "own").mkdir()
    (tree / "own" / "keep.txt").write_text("the tree's")
    env = laid.Laid("/kept", ("web/node_modules", ".venv", "docs/node_modules", "own"))
    made = laid.places(str(tree), env)
    assert sorted(made) == [".venv", "docs/node_modules", "web", "web/node_modules"]
    assert made[0].count("/") == 1  # deepest first
    assert (tree / "web").is_dir() and not (tree / "web").is_symlink()
    assert list(outside.iterdir()) == []
    assert (tree / "own" / "keep.txt").exists()  # a folder of the tree's own is bound over
    laid.remove(str(tree), made)
    assert sorted(os.listdir(tree)) == ["docs", "own"]
    linked = laid.places(str(tree), laid.Laid("/kept", (".venv", "own")), links=True)
    assert linked == [".venv"] and os.readlink(tree / ".venv") == "/kept/.venv"
    assert (tree / "own").is_dir()  # a folder that holds something is not replaced
    laid.remove(str(tree), linked)
    assert not os.path.lexists(tree / ".venv")


def test_a_write_refused_through_the_setup_tree_is_the_tree_s(tmp_path: Path) -> None:
    """A script's shebang names the tree at SETUP_TREE: a refused write there is inside
    the worktree (not a write outside it), and a protected file is known by either path."""
    log = tmp_path / "agent.log"
    log.write_text(
        f"OSError: [Errno 30] Read-only file system: '{SETUP_TREE}/.venv/lib/x.py'\n"
        f"PermissionError: [Errno 13] Permission denied: '{SETUP_TREE}/tests/test_a.py'\n"
        "touch: cannot touch '/etc/x': Read-only file system\n"
    )
    tree = str(tmp_path / "tree")
    assert refused_writes(log, tree, (SETUP_TREE,)) == ["/etc/x (Read-only file system)"]
    assert len(refused_writes(log, tree)) == 3
    assert refused_protected(log, tree, ["tests/test_a.py"], (SETUP_TREE,)) == ["tests/test_a.py"]
