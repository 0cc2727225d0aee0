"""``hidden_tests``: tests the agent never sees, laid over its commit by the worker."""

from typing import Any, ClassVar, Literal, Self

from pydantic import Field, model_validator

from loop.contracts.base import GATE_NAME_PATTERN, _TaskFileModel
from loop.contracts.gates.base import GateSpec


class HiddenTests(_TaskFileModel):
    """Where the hidden tests are and what they must show."""

    ref: str = Field(min_length=1)
    """A commit of the task's repository that holds the test files, or an absolute path
    of a folder outside the repository (a mined suite's ``hidden/<case>``). The files are
    read by the worker and never enter the agent's worktree, its ``.git``, its prompt or
    its feedback."""
    files: list[str] = Field(min_length=1)
    """The test files to lay over the checkout: paths or globs relative to the
    repository's top (in ``ref``)."""
    run: str | None = Field(default=None, pattern=GATE_NAME_PATTERN)
    """The ``run`` gate whose command runs them, by name (default: the first ``run`` gate
    that reports tests)."""
    command: str | None = None
    """A command of their own instead (pytest or ``python -m unittest``), as a mined case
    has: the task then needs no ``run`` gate."""
    timeout: int = Field(default=600, ge=1, le=86_400)
    """Seconds ``command`` may take."""
    fail_to_pass: Literal["auto"] | list[str] = "auto"
    """The tests that must pass (ids or globs); ``auto``: those that fail on base's code
    with the same files laid over it."""
    pass_to_pass: list[str] | None = None
    """Tests that must still pass, by id (a mined case records them); unset: those that
    pass on base's code with the files laid over it, measured once per task."""

    @model_validator(mode="after")
    def _plain(self) -> Self:
        if self.run and self.command:
            raise ValueError("hidden_tests takes run (a gate's name) or command, not both")
        for glob in self.files:
            if glob.startswith("/") or ".." in glob.split("/"):
                raise ValueError(f"hidden_tests.files {glob!r} must be relative to the top")
        return self


class HiddenTestsGate(GateSpec):
    KIND: ClassVar[str] = "hidden_tests"
    EXAMPLE: ClassVar[dict[str, Any]] = {
        "name": "hidden",
        "hidden_tests": {"ref": "4f1c2d3", "files": ["tests/test_slug.py"], "run": "tests"},
    }

    hidden_tests: HiddenTests
    """Runs the named ``run`` gate's command on the commit with these test files laid over
    it, test by test: the ``fail_to_pass`` tests must pass, and every other test as at
    base. Feedback names failing tests and their assertion messages, never their source."""

    def seconds(self) -> int:
        return 2 * self.hidden_tests.timeout
