"""A task's budget across its candidates: one pool per task run, on the host where all
its candidates work (docs/concepts/candidates.md).

Each model call a candidate's gateway forwards is appended to the pool as it ends (an
agent that reports its usage instead is appended once per attempt), and before each
call the gateway reads the pool: once it holds the task's limit, or once another
candidate was chosen (``choose``), the call is refused. The pool is a file of JSON lines,
each written by one ``write`` on a descriptor opened for appending, so the gateways of
every worker process on the host add to it without a lock, and a line cut by a crash is
skipped. Calls wait one at a time per run while a pool is set (``Grant.one_at_a_time``):
the task overshoots its limit by at most one call per running candidate.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from loop.contracts import SharedBudget, Usage
from loop.rules import budget

POOLS = "pools"
READ_LIMIT = 8 * 1024 * 1024
"""A pool past this (some 80,000 calls) is read from its end; its first lines say least."""


def pool_file(home: Path, key: str) -> Path:
    return Path(home) / POOLS / f"{key}.jsonl"


@dataclass
class Tally:
    """What a pool holds: what the task's candidates spent, each and together, and who
    was chosen (stopping the others)."""

    tokens: int = 0
    cost_usd: float = 0.0
    members: dict[str, Usage] = field(default_factory=dict)
    chosen: str = ""


def read(path: Path) -> Tally:
    tally = Tally()
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - READ_LIMIT))
            data = f.read(READ_LIMIT)
    except FileNotFoundError:
        return tally
    for line in data.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # cut by a crash, or the first line read from the end
        if not isinstance(entry, dict):
            continue
        if isinstance(entry.get("chosen"), str):
            tally.chosen = entry["chosen"]
            continue
        member, tokens, cost = entry.get("m"), entry.get("t"), entry.get("c")
        if not isinstance(member, str) or not isinstance(tokens, int):
            continue
        cost = float(cost) if isinstance(cost, (int, float)) else 0.0
        tally.tokens += tokens
        tally.cost_usd += cost
        was = tally.members.get(member, Usage())
        tally.members[member] = Usage(tokens=was.tokens + tokens, cost_usd=was.cost_usd + cost)
    return tally


def _append(path: Path, entry: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, (json.dumps(entry, separators=(",", ":")) + "\n").encode())
    finally:
        os.close(fd)


def choose(path: Path, chosen: str) -> None:
    """Every candidate but ``chosen`` stops: its next call is refused."""
    _append(path, {"chosen": chosen})


@dataclass
class Pool:
    """One candidate's view of its task's pool."""

    path: Path
    member: str
    tokens: int | None
    cost_usd: float | None

    @classmethod
    def of(cls, home: Path, shared: SharedBudget) -> Pool:
        return cls(pool_file(home, shared.key), shared.member, shared.tokens, shared.cost_usd)

    def check(self) -> tuple[str, str]:
        """("", "") while this candidate may call its model; else (why, in the words a
        budget's refusal is recorded with; the message the agent is answered with)."""
        tally = read(self.path)
        if tally.chosen and tally.chosen != self.member:
            why = f"candidate {tally.chosen} was chosen"
            return why, f"{why}; candidate {self.member} stops"
        used = Usage(tokens=tally.tokens, cost_usd=tally.cost_usd)
        spent = budget.spent(used, self.tokens, self.cost_usd, None)
        if not spent:
            return "", ""
        if self.tokens is not None and tally.tokens >= self.tokens:
            words = f"{tally.tokens} tokens of {self.tokens}"
        else:
            words = f"${tally.cost_usd:.4f} of ${self.cost_usd or 0:.4f}"
        what = spent.removesuffix(" spent")
        return spent, f"this task's {what} is spent by its candidates ({words})"

    def add(self, tokens: int, cost_usd: float) -> None:
        _append(self.path, {"m": self.member, "t": tokens, "c": cost_usd})
