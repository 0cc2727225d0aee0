"""The period budget: one ledger per repository, reserved from and settled."""

from typing import Self

from pydantic import Field

from loop.contracts.base import _Payload, _Record, workflow_id_for


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


def reservation_key(task_id: str, run_id: str, attempt: int) -> str:
    """The one format of a reservation's key: the holder's task, run and attempt."""
    return f"{task_id}:{run_id}:{attempt}"


class Holder(_Record):
    """Who holds a reservation: one run of one task workflow."""

    key: str
    workflow_id: str
    run_id: str

    @classmethod
    def of(cls, key: str) -> Self | None:
        """The holder a key names; None for a key of another shape."""
        parts = key.split(":")
        if len(parts) != 3 or not all(parts):
            return None
        return cls(key=key, workflow_id=workflow_id_for(parts[0]), run_id=parts[1])


class LedgerState(_Record):
    """Everything the ledger knows; carried whole across continue-as-new."""

    repo: str
    limits: PeriodLimits = Field(default_factory=PeriodLimits)
    days: dict[str, DaySpend] = Field(default_factory=dict)
    open: dict[str, Reservation] = Field(default_factory=dict)
    """Reservations not yet settled, by key (task id, run and attempt)."""
    settled: list[str] = Field(default_factory=list)
    """Recently settled keys, so a retried report is not counted twice."""
    released: list[str] = Field(default_factory=list)
    """Recently released keys: reservations whose task had ended without settling."""
    sweep_every_s: float = Field(default=300.0, gt=0)
    """While reservations are open, how often the ledger asks whether their tasks ended."""


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
    held: bool = True
    """A ledger holds the reservation until the attempt settles it; False where the
    repository has no period budget, so there is nothing to settle."""


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


class HoldersInput(_Record):
    holders: list[Holder]


class HoldersResult(_Record):
    closed: list[str] = Field(default_factory=list)
    """Keys whose holder run has closed (or no longer exists): nobody will settle them."""
