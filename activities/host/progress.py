"""What a running attempt's agent has done so far, for its ``make`` step's heartbeat.

A person following a 20-minute attempt wants to see it move: its time, what it spent
(the gateway's figures as each call ends, else what the agent reported so far in
``LOOP_USAGE_FILE`` or its CLI's log) and its last line of output. Read once per
heartbeat from the worker's own files and the grant's counters, in a few kilobytes:
never the whole log. The line is redacted here, as the claim is, for it leaves the
worker (the server keeps it with the pending activity).
"""

from __future__ import annotations

import time
from pathlib import Path

from activities.host.gateway import Grant
from activities.host.proc import tail_of
from loop.contracts import Progress
from loop.hardened.files import read_untrusted
from loop.pricing import cost
from loop.redact import redact
from loop.rules import usage
from loop.rules.explain import last_line

TAIL_CHARS = 16 * 1024
"""Of the agent's log, what each beat reads: its last line, and a CLI's latest usage
report (aider prints one per message)."""
USAGE_FILE_BYTES = 64 * 1024


class AttemptProgress:
    """``Progress`` of one attempt's agent run, as of each call."""

    def __init__(
        self,
        attempt: int,
        log: Path,
        usage_file: Path,
        source: str,
        grant: Grant | None,
        model: str | None,
        prices: dict[str, dict[str, float]],
    ) -> None:
        self.attempt, self.log, self.usage_file = attempt, log, usage_file
        self.source, self.grant, self.model, self.prices = source, grant, model, prices
        self.started = time.monotonic()

    def __call__(self) -> Progress:
        said = tail_of(self.log, TAIL_CHARS)
        now = Progress(
            attempt=self.attempt,
            seconds=round(time.monotonic() - self.started, 1),
            last_line=redact(last_line(said)),
        )
        grant = self.grant
        if grant is not None:
            # Counted on the gateway's loop as each call ends: plain numbers, read as they are.
            return now.model_copy(
                update={"tokens": grant.tokens, "cost_usd": grant.cost_usd,
                        "calls": grant.count, "metered": True}
            )  # fmt: skip
        data, problem = read_untrusted(self.usage_file, USAGE_FILE_BYTES)
        spent = usage.read(self.source, said, None if problem else data)
        if not spent.found:
            return now
        priced = spent.cost_usd
        if priced is None:
            priced = (
                cost(self.model, spent.tokens_in, spent.tokens_out, self.prices)
                if self.model
                else 0.0
            )
        return now.model_copy(
            update={"tokens": spent.tokens_in + spent.tokens_out, "cost_usd": priced}
        )
