"""A repository's environment, in rules: which files are its key files, what ``auto``
runs for a layout, the key, and whether an attempt changed it (docs/guides/environment.md).

Pure: the worker lists and reads the files at a commit and hands them in.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import shlex
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from loop.contracts import DEFAULT_KEY_FILES, EnvironmentSpec

KEY_VERSION = 1
"""Changes when what a build makes from the same inputs changes (a new way to lay it)."""
SETUP_SCRIPT = ".loopwork/setup.sh"
DEVCONTAINERS = (".devcontainer/devcontainer.json", ".devcontainer.json")
READ_FOR_AUTO = ("pyproject.toml", *DEVCONTAINERS)
"""The files ``detect`` reads (the others it only looks for)."""
TEST_EXTRAS = ("test", "tests", "testing", "dev")
"""A pyproject's optional dependencies installed with the project, the first one found."""
VENV = "python3 -m venv .venv"
PIP = ".venv/bin/python -m pip install"


def matches(glob: str, path: str) -> bool:
    """``glob`` names ``path`` from the tree's top: ``*`` and ``?`` within one folder,
    ``**`` across any number of them."""
    return _match(glob.strip("/").split("/"), path.split("/"))


def _match(pattern: list[str], parts: list[str]) -> bool:
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_match(pattern[1:], parts[i:]) for i in range(len(parts) + 1))
    return (
        bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _match(pattern[1:], parts[1:])
    )


def key_files(globs: list[str], paths: Collection[str]) -> list[str]:
    """The paths any of ``globs`` names, sorted."""
    return sorted(p for p in paths if any(matches(g, p) for g in globs))


@dataclass(frozen=True)
class Detected:
    """What ``auto`` runs, what it keeps, and what it went by."""

    setup: list[str]
    paths: list[str] = field(default_factory=list)
    origin: str = ""


def detect(paths: Collection[str], text: Mapping[str, str]) -> Detected | None:
    """The setup a layout calls for, from the paths at base and the text of those of
    ``READ_FOR_AUTO`` found there; None when nothing calls for one.

    The repository's own word comes first, but it is only read: its script runs in the
    same sandbox, with the same limits and the task file's ``allow_hosts``."""
    if SETUP_SCRIPT in paths:
        return Detected([f"bash {SETUP_SCRIPT}"], [], f"the repository's {SETUP_SCRIPT}")
    for name in DEVCONTAINERS:
        commands = post_create(text.get(name, ""))
        if commands:
            return Detected(commands, [], f"{name}'s postCreateCommand")
    setup: list[str] = []
    kept: list[str] = []
    found: list[str] = []
    python = _python(paths, text.get("pyproject.toml", ""))
    if python:
        commands, what = python
        setup += commands
        kept.append(".venv")
        found.append(what)
    node = _node(paths)
    if node:
        setup.append(node[0])
        kept.append("node_modules")
        found.append(node[1])
    if ("go.mod" in paths or "go.sum" in paths) and "vendor/modules.txt" not in paths:
        setup.append("go mod vendor")
        kept.append("vendor")
        found.append("go.mod")
    if not setup:
        return None
    return Detected(setup, kept, "auto: " + ", ".join(found))


def _python(paths: Collection[str], pyproject: str) -> tuple[list[str], str] | None:
    if "uv.lock" in paths:
        return ["uv sync --frozen"], "uv.lock"
    if "poetry.lock" in paths:
        return ["POETRY_VIRTUALENVS_IN_PROJECT=true poetry install --no-interaction"], "poetry.lock"
    requirements = sorted(p for p in paths if "/" not in p and matches("requirements*.txt", p))
    project = [p for p in ("pyproject.toml", "setup.py", "setup.cfg") if p in paths]
    if not (project or requirements):
        return None
    commands = [VENV]
    if project:
        extra = _test_extra(pyproject)
        target = f".[{extra}]" if extra else "."
        commands.append(f"{PIP} -e {shlex.quote(target)}")
    commands += [f"{PIP} -r {shlex.quote(r)}" for r in requirements]
    return commands, ", ".join([*project[:1], *requirements])


def _test_extra(pyproject: str) -> str:
    try:
        extras = tomllib.loads(pyproject).get("project", {}).get("optional-dependencies", {})
    except (tomllib.TOMLDecodeError, AttributeError):
        return ""
    return next((e for e in TEST_EXTRAS if isinstance(extras, dict) and e in extras), "")


def _node(paths: Collection[str]) -> tuple[str, str] | None:
    for lock, command in (
        ("package-lock.json", "npm ci"),
        ("npm-shrinkwrap.json", "npm ci"),
        ("yarn.lock", "yarn install --frozen-lockfile"),
        ("pnpm-lock.yaml", "pnpm install --frozen-lockfile"),
        ("package.json", "npm install"),
    ):
        if lock in paths:
            return command, lock
    return None


_COMMENT = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/', re.S)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


def post_create(devcontainer: str) -> list[str]:
    """A devcontainer's ``postCreateCommand`` as shell commands: a string is one, a list is
    one argv, an object is one per value; [] when there is none or it cannot be read."""
    if not devcontainer.strip():
        return []
    plain = _COMMENT.sub(lambda m: m.group(0) if m.group(0).startswith('"') else "", devcontainer)
    try:
        config = json.loads(_TRAILING_COMMA.sub(r"\1", plain))
    except ValueError:
        return []
    command = config.get("postCreateCommand") if isinstance(config, dict) else None
    values = list(command.values()) if isinstance(command, dict) else [command]
    commands: list[str] = []
    for value in values:
        if isinstance(value, str) and value.strip():
            commands.append(value)
        elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            commands.append(shlex.join(value))
    return commands


def key(
    *,
    setup: list[str],
    paths: list[str],
    files: Mapping[str, str],
    level: str,
    toolchain: str,
) -> str:
    """What an environment is made of, hashed: its commands and paths, its key files'
    content (git's blob ids), the sandbox level it is built at, the host's toolchain."""
    body = json.dumps(
        {
            "version": KEY_VERSION,
            "setup": setup,
            "paths": paths,
            "files": sorted(files.items()),
            "level": level,
            "toolchain": toolchain,
        },
        sort_keys=True,
    )
    return hashlib.sha256(body.encode()).hexdigest()[:32]


def globs_for(spec: EnvironmentSpec) -> list[str]:
    """The key files' globs: the task file's (or the defaults), and with ``auto`` every
    file the layout is found by."""
    globs = spec.key_globs()
    if spec.setup == "auto":
        globs += [g for g in DEFAULT_KEY_FILES if g not in globs]
    return globs


def changed_key_files(spec: EnvironmentSpec, changed: list[str], changed_count: int) -> list[str]:
    """The key files an attempt's commit changes; ``["…"]`` when its record lists only
    the first of its files and none of those (the build tells: same key, nothing runs)."""
    touched = key_files(globs_for(spec), changed)
    if not touched and changed_count > len(changed):
        return ["…"]
    return touched
