"""The period budget: one ledger per repository, reserved from and settled."""

from __future__ import annotations

from pydantic import Field

from loop.contracts.base import _Payload, _Record


class PeriodLimits(_Payload):
    """A repository's budget per UTC day, across all its tasks (None: no limit)."""

    cost_per_day: float | None = Field(default=None, ge=0)
    tokens_per_day: int | None = Field(default=None, ge=0)


class DaySpend(_Record):
    cost_usd: float = 0.0
    tokens: int = 0
    reserved_cost_usd: float = 0.0
    reserved_tokens: int = 0


class Reservation(_Record):
    day: str
    cost_usd: float | None = None
    tokens: int | None = None


class LedgerState(_Record):
    """Everything the ledger knows; carried whole across continue-as-new."""

    repo: str
    limits: PeriodLimits = Field(default_factory=PeriodLimits)
    days: dict[str, DaySpend] = Field(default_factory=dict)
    open: dict[str, Reservation] = Field(default_factory=dict)
    """Reservations not yet settled, by key (task id, run and attempt)."""
    settled: list[str] = Field(default_factory=list)
    """Recently settled keys, so a retried report is not counted twice."""


class ReserveRequest(_Payload):
    key: str
    day: str
    cost_usd: float | None = None
    """What the attempt may spend at most; None: whatever the day has left."""
    tokens: int | None = None


class ReserveReply(_Record):
    granted: bool
    reason: str = ""
    cost_usd: float | None = None
    """What the attempt may spend (None: unlimited)."""
    tokens: int | None = None


class UsageReport(_Payload):
    key: str
    cost_usd: float = 0.0
    tokens: int = 0


class ReserveBudgetInput(_Record):
    repo: str
    request: ReserveRequest


class ReportUsageInput(_Record):
    repo: str
    report: UsageReport


class ReportUsageResult(_Record):
    counted: bool
