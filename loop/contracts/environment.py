"""A repository's own environment: its defaults, and the record of one build.

What a task file says is ``EnvironmentSpec`` (``loop.contracts.task``); how it is built,
kept and laid into a sandbox is docs/guides/environment.md.
"""

from pydantic import Field

from loop.contracts.base import _Record

DEFAULT_PATHS = (".venv", "node_modules")
"""What a setup makes that attempts and gates use, unless the task file says."""
DEFAULT_KEY_FILES = (
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "requirements*.txt",
    "requirements/*.txt",
    "uv.lock",
    "poetry.lock",
    "Pipfile",
    "Pipfile.lock",
    "package.json",
    "package-lock.json",
    "npm-shrinkwrap.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "go.mod",
    "go.sum",
    ".loopwork/setup.sh",
    ".devcontainer/devcontainer.json",
    ".devcontainer.json",
)
"""The lockfiles and manifests whose content decides when an environment is built again,
unless the task file names its own (``key_files``); the top level only, but for
``requirements/``."""
SETUP_TREE = "/tmp/loopwork/tree"
"""Where a sandboxed setup sees the tree it builds in, and its cwd; every later run with
the environment finds its own tree there too (a link), so what the setup recorded
(a virtualenv's scripts, an editable install's path) points at the tree being judged."""


class BuiltEnvironment(_Record):
    """One environment on one host, as a step found or built it."""

    key: str
    """The hash of what it is made of: the setup, the key files' content, the sandbox level
    and the host's toolchain."""
    root: str
    """Where the host keeps it (``LOOP_HOME/envs/<key>/tree``): each path as built."""
    paths: list[str] = Field(default_factory=list)
    """What is laid into each tree, read-only (the ``paths`` the setup made)."""
    shows: list[str] = Field(default_factory=list)
    """Host paths it needs to see read-only: the interpreter a virtualenv was made from."""
    setup: list[str] = Field(default_factory=list)
    """The commands it was built with."""
    origin: str = ""
    """Where the commands come from: the task file, or what ``auto`` found."""
    cached: bool = False
    """Found built on this host: nothing ran."""
    seconds: float = 0.0
    """What this step took (waiting for another task's build of the same key included)."""
    built_seconds: float = 0.0
    """What building it took, when it was built."""
    log_path: str = ""
    """The setup's log, kept in the run folder of the task that built it."""
    size: int = 0
    """Bytes on disk."""
    host: str = ""
    commit: str = ""
    """The commit whose key files it was built from."""
    changed: list[str] = Field(default_factory=list)
    """The key files an attempt changed, for an attempt's own build."""
    failed: str = ""
    """An attempt's own build whose setup failed: why (its verdict fails with it)."""

    def said(self) -> str:
        """One line for the trace and the review page: key, time, cache hit or build."""
        key = self.key[:12]
        if self.failed:
            return f"{key}: setup failed: {self.failed}"
        if self.cached:
            return f"{key}: cache hit in {self.seconds:.2f} s (built in {self.built_seconds:.1f} s)"
        ran = f"{len(self.setup)} command{'s' if len(self.setup) != 1 else ''}"
        return f"{key}: built in {self.built_seconds:.1f} s ({ran}; log {self.log_path})"
