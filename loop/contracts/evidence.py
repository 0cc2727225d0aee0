"""What a gate saw, its verdict, and the feedback built from a failed verdict."""

from typing import Literal

from pydantic import Field

from loop.contracts.base import _Record

Outcome = Literal["passed", "failed", "error", "skipped", "xfailed", "xpassed", "missing"]
"""One test's outcome, as the runner decided it (``xfailed``: an expected failure;
``xpassed``: an expected failure that passed); ``missing``: the verdict required it and
the runner did not report it (not collected, deselected, never run)."""
FAILURES: tuple[Outcome, ...] = ("failed", "error")


class CaseResult(_Record):
    """One test as the runner reported it."""

    id: str
    """The runner's id: pytest's node id, unittest's ``module.Class.test``, JUnit's
    ``classname::name``."""
    outcome: Outcome
    file: str = ""
    """The file that defines it, relative to the checkout ("" when the runner does not say)."""
    message: str = ""
    """Why it failed or was skipped: the assertion and its traceback's tail."""
    output: str = ""
    """What it printed (the tail), where the runner captured it."""
    at_base: str = ""
    """Its outcome at base, where the verdict compares ("" : not known there)."""
    exception: str = ""
    """The type of what it raised (``AssertionError``, ``socket.gaierror``), where the
    runner says."""
    raised_at: str = ""
    """The file of the innermost frame that raised it, relative to where the runner ran."""


class SuiteReport(_Record):
    """Every test of one gate run, from the runner's own report, as the worker collected it.

    An artifact file in the run folder (never in workflow history): written by the
    worker from records its reporter sent or from a JUnit file, read back by later
    verdicts on the same task (the base run)."""

    runner: str = ""
    """``pytest``, ``unittest`` or ``junit``."""
    sessions: int = 0
    """Test sessions that started reporting (one per pytest or unittest process)."""
    finished: int = 0
    """Sessions that reported their end: fewer than ``sessions`` means one was cut short."""
    problems: list[str] = Field(default_factory=list)
    """Why the report cannot be trusted whole (forged records, a cut stream)."""
    collected: dict[str, str] = Field(default_factory=dict)
    """Test id -> file, as collected (after the command's own selection)."""
    deselected: list[str] = Field(default_factory=list)
    collect_errors: list[CaseResult] = Field(default_factory=list)
    """Files or modules that could not be collected (import errors, syntax errors)."""
    tests: dict[str, CaseResult] = Field(default_factory=dict)
    """Test id -> what it did."""
    root: str = ""
    """The folder the runner's test ids are relative to (pytest's rootdir)."""
    cwd: str = ""
    """Where the runner ran."""
    contradictions: list[str] = Field(default_factory=list)
    """Where the runner's own output disagrees with these records (found by the worker):
    a question for a person, never a pass."""

    @property
    def complete(self) -> bool:
        return self.sessions > 0 and self.finished >= self.sessions and not self.problems

    def counts(self) -> dict[str, int]:
        counted: dict[str, int] = {}
        for case in self.tests.values():
            counted[case.outcome] = counted.get(case.outcome, 0) + 1
        if self.collect_errors:
            counted["collection errors"] = len(self.collect_errors)
        return counted

    def present(self) -> dict[str, str]:
        """Every test the run knew of (collected or reported), id -> file."""
        found = dict(self.collected)
        for case in self.tests.values():
            found.setdefault(case.id, case.file)
        return found


class SuiteSummary(_Record):
    """What history keeps of a ``SuiteReport``: counts, the first tests that decided the
    verdict, and where the whole report is."""

    runner: str
    counts: dict[str, int] = Field(default_factory=dict)
    failing: list[CaseResult] = Field(default_factory=list)
    """The tests that made the gate fail (failed now, or required and not passing), first
    ones only, messages cut."""
    more_failing: int = 0
    report_path: str = ""
    set_aside: list[CaseResult] = Field(default_factory=list)
    """Tests whose outcome did not count (pre-existing at base, flaky), the reason as the
    message."""
    fixed: list[str] = Field(default_factory=list)
    """The ids the verdict required to pass that did not pass at base (SWE-bench's
    FAIL_TO_PASS), the first ones."""


class Evidence(_Record):
    """What a gate (or the agent run) saw."""

    exit_code: int | None = None
    output_tail: str = ""
    files: list[str] = Field(default_factory=list)
    detail: str = ""
    duration_s: float = 0.0
    tests: SuiteSummary | None = None
    """Per-test results, for gates whose runner reported them."""
    quoted: list[str] = Field(default_factory=list)
    """Lines of the attempt a person must look at (what made the checker uncertain)."""
    failure: list[str] = Field(default_factory=list)
    """The lines of the output that say what failed (``loop.rules.failures``), shown
    before the tail; for a gate without per-test results, whose tail may open with
    warnings."""


class GateResult(_Record):
    name: str
    kind: str
    passed: bool
    policy_violation: bool = False
    """True when failing this gate is a policy violation (BLOCKED), not a recoverable failure."""
    evidence: Evidence = Field(default_factory=Evidence)
    requirement: str = ""
    """What the gate demands, in words the agent can act on."""
    uncertain: bool = False
    """The checker could not decide (an LLM review that did not validate): escalate."""


REFUSALS = ("disk", "commit", "attributes", "environment")
"""Kinds of the results that end a verdict before any gate runs (``activities/verify.py``):
an attempt past its disk limit, one git cannot store, one that changes git attributes,
one whose changed key files the environment's setup fails on."""


class Verdict(_Record):
    passed: bool
    gates: list[GateResult] = Field(default_factory=list)
    artifact: str = ""
    """The commit the gates ran on (the latest state of the worktree)."""
    ignored_files: list[str] = Field(default_factory=list)
    """Files the agent made that git ignores: never part of the artifact the gates judged."""
    kept: str = ""
    """Where verify kept this verdict on its host: the next attempt's feedback there cites
    its evidence from the file (``PromptParts.evidence_from``)."""
    environment: str = ""
    """The environment the gates ran with, where the attempt's commit changed its key
    files and it was built again for this verdict."""

    @property
    def failed(self) -> list[GateResult]:
        return [g for g in self.gates if not g.passed]

    @property
    def policy_violations(self) -> list[GateResult]:
        return [g for g in self.gates if not g.passed and g.policy_violation]

    def summary(self) -> str:
        if not self.gates:
            return "no gates ran"
        return ", ".join(f"{g.name} {'pass' if g.passed else 'FAIL'}" for g in self.gates)


class FailedRequirement(_Record):
    gate: str
    requirement: str
    evidence: Evidence
    required_correction: str


PREVIOUS_OUTPUT_CHARS = 1_500
"""How much of the last claim (or output) the feedback quotes: its end."""


class Feedback(_Record):
    """A failed verdict turned into structured input for the next attempt."""

    after_attempt: int
    previous_output: str = ""
    failed: list[FailedRequirement] = Field(default_factory=list)
    passing: list[str] = Field(default_factory=list)
    human_feedback: list[str] = Field(default_factory=list)
