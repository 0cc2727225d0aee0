"""A repository's history mined into an eval suite: its bug fixes, each proved by its tests.

``loop eval mine`` starts a ``MineWorkflow``: it lists the commits that change both test
files and other files, runs the repository's tests on each one's parent with the commit's
test files laid over it and on the commit itself (twice each), and keeps a fix whose new
or changed tests fail on the parent and pass at the commit, with the same outcomes both
times. The suite it writes holds, per case, the parent as a repository of one commit and
the fix's tests as hidden tests (``hidden_tests``), judged by the recorded
FAIL_TO_PASS and PASS_TO_PASS ids.
"""

from pydantic import Field

from loop.contracts.base import TASK_ID_PATTERN, _Record
from loop.contracts.task import EnvironmentSpec, SandboxPolicy

QUERY_MINE_PROGRESS = "mine_progress"
"""What the mining has done so far, one line a step (``loop eval mine`` prints them)."""


class MineInput(_Record):
    repo: str
    """The repository to mine (an absolute path on the worker's host)."""
    name: str = Field(pattern=TASK_ID_PATTERN)
    """The suite's name (and its cases' task ids)."""
    run: str
    """The command that runs the repository's tests (pytest or ``python -m unittest``)."""
    timeout: int = Field(default=600, ge=1, le=86_400)
    out: str
    """The folder the suite is written to (``suite.yaml``, ``cases/``, ``hidden/``)."""
    since: str | None = None
    """Only commits after this date (git's ``--since``)."""
    paths: list[str] = Field(default_factory=list)
    """Only commits that touch these paths."""
    max_cases: int = Field(default=20, ge=1, le=1_000)
    """Stop after this many cases (newest first)."""
    max_commits: int = Field(default=400, ge=1, le=100_000)
    """Look at most at this many candidate commits."""
    environment: EnvironmentSpec | None = None
    """How the repository's dependencies are installed (from ``--environment``)."""
    sandbox: SandboxPolicy = Field(default_factory=SandboxPolicy)
    """How the tests run (from ``--environment``'s task file, else the defaults)."""


class FixCandidate(_Record):
    commit: str
    parent: str
    message: str
    """The commit's whole message: the case's goal."""
    test_files: list[str]
    """The test files it changes (existing at the commit)."""


class ListFixesResult(_Record):
    clone: str
    """The worker's clone of the repository the validations read (never the person's)."""
    head: str
    candidates: list[FixCandidate]
    skipped: int = 0
    """Commits that change no test file, or only tests, or are merges."""
    host_queue: str = ""
    """The queue of the host that holds the clone: validations run there."""


class ValidateFixInput(_Record):
    mine: MineInput
    clone: str
    candidate: FixCandidate


class MinedCase(_Record):
    id: str
    commit: str
    parent: str
    goal: str
    test_files: list[str]
    fail_to_pass: list[str]
    pass_to_pass: list[str]


class ValidateFixResult(_Record):
    case: MinedCase | None = None
    dropped: str = ""
    """Why the commit is not a case (its tests pass at the parent, they flip, ...)."""


class WriteMinedInput(_Record):
    mine: MineInput
    clone: str
    head: str
    cases: list[MinedCase]
    dropped: list[str]


class MineResult(_Record):
    suite_path: str
    cases: list[MinedCase]
    dropped: list[str]
    """``<commit>: why`` for each candidate that is not a case."""
