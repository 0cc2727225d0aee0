"""``run``: a command on a clean checkout of the attempt's commit, judged test by test."""

from typing import Any, ClassVar, Literal, Self

from pydantic import Field, field_validator, model_validator

from loop.contracts.base import _TaskFileModel
from loop.contracts.gates.base import GateSpec


class JunitReport(_TaskFileModel):
    """A runner that writes JUnit XML: where, in the folder the worker makes for each run."""

    junit: str = Field(min_length=1)
    """File name or glob under ``$LOOP_REPORT_DIR`` (e.g. ``junit.xml``, ``*.xml``): the
    command writes its report there; the worker reads it after the run."""

    @field_validator("junit")
    @classmethod
    def _inside(cls, name: str) -> str:
        if name.startswith("/") or "/" in name.strip("/") or name in (".", ".."):
            raise ValueError(
                f"report.junit {name!r} must be a file name or glob in $LOOP_REPORT_DIR "
                "(e.g. junit.xml), not a path"
            )
        return name


Report = Literal["auto", "exit"] | JunitReport
"""How a ``run`` gate's verdict is made: ``auto`` (per-test results from Loopwork's
reporter, for pytest and ``python -m unittest``), a JUnit file, or ``exit`` (the exit
code alone, labelled so in the evidence)."""


class RunGate(GateSpec):
    KIND: ClassVar[str] = "run"
    EXAMPLE: ClassVar[dict[str, Any]] = {
        "name": "tests",
        "run": "python -m pytest -q tests",
        "timeout": 600,
    }

    run: str
    """Shell command, run on a clean checkout of the attempt's commit. Where its runner
    reports tests (``report``), it passes when every required test passes (see
    ``fail_to_pass``) and no test fails; otherwise on exit 0."""
    timeout: int = Field(default=300, ge=1, le=86_400)
    """Seconds the command may take."""
    report: Report = "auto"
    """Where per-test results come from (``auto``, ``{junit: file}``, ``exit``)."""
    fail_to_pass: Literal["auto"] | list[str] = "auto"
    """With per-test results: ``auto`` requires every test failing at base to pass; a
    list of test ids or globs requires those (others failing at base may still fail).
    Tests passing at base must pass either way."""
    allow_constructs: list[str] = Field(default_factory=list)
    """Constructs the attempt may add although they can end or steer a test process
    (``sys.exit``, ``atexit.register``, ...): the diff scan does not ask a person about these."""
    flaky: list[str] = Field(default_factory=list)
    """Test ids or globs known to be flaky: their outcome neither blocks the gate nor counts
    as fixed. Tests found flaky (an outcome that differs between the two runs at base, or a
    failure that passes on one retry) are treated the same way and named in the evidence."""

    def seconds(self) -> int:
        return self.timeout

    @property
    def reports(self) -> bool:
        """Whether its verdict may come from per-test results (not ``report: exit``)."""
        return self.report != "exit"

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if not self.run.strip():
            raise ValueError("'run' must be a non-empty shell command")
        if self.report == "exit" and self.fail_to_pass != "auto":
            raise ValueError("fail_to_pass needs per-test results; report: exit has none")
        if isinstance(self.fail_to_pass, list) and not [t for t in self.fail_to_pass if t.strip()]:
            raise ValueError("fail_to_pass needs at least one test id or glob (or auto)")
        return self
