"""The gate kinds of a task's ``verify`` list: one module per kind, one union of them.

A task file names a gate's kind by the one key it gives (``run``, ``diff_scope``, ...),
so the union is discriminated by which of those keys is present; a gate with none or
two is refused with both named. Adding a kind: a module here (its model), one in
``loop.rules.gates`` (how it is described and corrected) and one in
``activities.gates`` (how it is evaluated), each registered where its package lists
the kinds; ``tests/unit/test_gate_kinds.py`` fails while one of them is missing.
"""

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Discriminator, Tag, TypeAdapter

from loop.contracts.gates.base import DEFAULT_SECONDS, GateSpec, unset
from loop.contracts.gates.checks import GitHubChecks, GitHubChecksGate
from loop.contracts.gates.contains import ContainsGate
from loop.contracts.gates.hidden import HiddenTests, HiddenTestsGate
from loop.contracts.gates.kept import NoRemovedTestsGate
from loop.contracts.gates.regression import RegressionTestGate
from loop.contracts.gates.review import LlmReview, LlmReviewGate
from loop.contracts.gates.run import JunitReport, Report, RunGate
from loop.contracts.gates.scope import DiffScope, DiffScopeGate

KINDS: tuple[type[GateSpec], ...] = (
    RunGate, DiffScopeGate, NoRemovedTestsGate, RegressionTestGate, ContainsGate, LlmReviewGate,
    GitHubChecksGate, HiddenTestsGate,
)  # fmt: skip
GATE_KINDS = tuple(k.KIND for k in KINDS)
GateKind = Literal[
    "run",
    "diff_scope",
    "no_removed_tests",
    "regression_test",
    "contains",
    "llm_review",
    "github_checks",
    "hidden_tests",
]
"""The kinds, for fields that hold one (``GateResult.kind``); ``test_gate_kinds`` keeps
it equal to ``GATE_KINDS``."""


def _given(data: dict[str, Any]) -> list[str]:
    """The kind keys a gate's mapping gives (a kind key at its "not given" value, as a
    spec recorded before kinds were models holds them, does not count)."""
    return [k for k in GATE_KINDS if k in data and not unset(k, data[k])]


def _one_kind(data: Any) -> Any:
    if isinstance(data, dict):
        kinds = _given(data)
        if len(kinds) != 1:
            found = ", ".join(kinds) or "none"
            raise ValueError(
                f"a gate needs exactly one of {', '.join(GATE_KINDS)} (found: {found})"
            )
    return data


def _kind_of(data: Any) -> str | None:
    if isinstance(data, GateSpec):
        return data.KIND
    if isinstance(data, dict):
        kinds = _given(data)
        return kinds[0] if len(kinds) == 1 else None
    return None


Gate = Annotated[
    Annotated[RunGate, Tag("run")]
    | Annotated[DiffScopeGate, Tag("diff_scope")]
    | Annotated[NoRemovedTestsGate, Tag("no_removed_tests")]
    | Annotated[RegressionTestGate, Tag("regression_test")]
    | Annotated[ContainsGate, Tag("contains")]
    | Annotated[LlmReviewGate, Tag("llm_review")]
    | Annotated[GitHubChecksGate, Tag("github_checks")]
    | Annotated[HiddenTestsGate, Tag("hidden_tests")],
    Discriminator(_kind_of),
    BeforeValidator(_one_kind),
]
"""One entry of ``verify``: the model of its kind."""

_ADAPTER: TypeAdapter[Gate] = TypeAdapter(Gate, config=ConfigDict(defer_build=True))


def gate(data: dict[str, Any]) -> Gate:
    """A gate from its task-file mapping (``{"name": "tests", "run": "pytest -q"}``)."""
    return _ADAPTER.validate_python(data)


__all__ = [
    "DEFAULT_SECONDS",
    "GATE_KINDS",
    "KINDS",
    "ContainsGate",
    "DiffScope",
    "DiffScopeGate",
    "Gate",
    "GateKind",
    "GateSpec",
    "GitHubChecks",
    "GitHubChecksGate",
    "HiddenTests",
    "HiddenTestsGate",
    "JunitReport",
    "LlmReview",
    "LlmReviewGate",
    "NoRemovedTestsGate",
    "RegressionTestGate",
    "Report",
    "RunGate",
    "gate",
]
