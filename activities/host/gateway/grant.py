"""One run's right to call its model: its token, its upstream, its limits, its calls.

A grant is made by the worker for one agent run, from the task file and the attempt's
reservation: nothing in it comes from the sandbox. The gateway reads and updates it
on its own event loop; the run's activity reads it only after the run has detached
(``serving`` returns), so the counters need no lock between threads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from opentelemetry.context import Context

from activities.host.pool import Pool
from loop.contracts import PROVIDER_VARIABLES, Provider, ProviderApi, Usage
from loop.errors import permanent
from loop.pricing import BUILTIN_PRICES
from loop.rules import budget

KEY_FILE_BYTES = 16 * 1024
MAX_RECORDED = 500
"""Calls and refusals kept per run; the counters go on past it."""
FINAL_REFUSALS = (401, 403, 404)
"""A provider's answers no retry changes: the key refused, the model not there."""


@dataclass
class Call:
    """One forwarded call, as the gateway measured it."""

    path: str
    model: str
    status: int
    tokens_in: int
    tokens_out: int
    cost_usd: float
    ms: float
    metered: bool
    """The provider's answer said its usage (else the call counts no tokens)."""
    said: str = ""
    """An error answer's message, in the provider's words (redacted, one line)."""


@dataclass
class Grant:
    task_id: str
    attempt: int
    api: ProviderApi
    upstream: str
    """The real endpoint, from the task file (``Provider.upstream``): never the request's."""
    key: str
    key_variable: str = ""
    """The worker's variable the key came from: left out of an unconfined run's
    environment, as is its ``_FILE`` twin."""
    model: str = ""
    """``agent.model``: prices a call whose answer names no model."""
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    prices: dict[str, dict[str, float]] = field(default_factory=lambda: dict(BUILTIN_PRICES))
    """The price table a call's usage is priced with (the worker's ``load_prices``)."""
    journal: Path | None = None
    """Where each forwarded call is appended as it ends (``calls.jsonl``, the worker's):
    a retried try of the attempt starts from what the earlier ones spent (``resume``)."""
    transcript_dir: Path | None = None
    """Where each call's request and answer go (``agent.transcript``); None: nowhere."""
    token: str = field(default_factory=lambda: f"loop-{secrets.token_urlsafe(24)}")
    calls: list[Call] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    tokens: int = 0
    cost_usd: float = 0.0
    count: int = 0
    unmetered: int = 0
    """Answered model calls whose usage could not be read: with a limit set, the next
    call is refused, for the budget could not be held."""
    spent_after: int | None = None
    """Calls made when the budget was first found spent (None: it never was)."""
    one_at_a_time: asyncio.Lock | None = None
    """Held around each call while a limit is set, so the overshoot is one call."""
    in_flight: int = 0
    """Bytes of request bodies the run's connections hold now, read and not yet answered
    (``server.MAX_IN_FLIGHT`` at most)."""
    trace_context: Context | None = None
    """The attempt's trace where the grant was made (its ``make`` activity's span): each
    call's span is its child, though the gateway runs on a thread of its own."""
    pool: Pool | None = None
    """The task's budget across its candidates, where the run is a candidate's: checked
    before each call, added to as each call ends."""
    stopped: str = ""
    """Why the pool refused a call (its budget spent, or another candidate chosen)."""

    @property
    def limited(self) -> bool:
        limits = (self.max_tokens, self.max_cost_usd)
        return self.pool is not None or any(x is not None for x in limits)

    def spent(self) -> str:
        """Which budget is spent ("token budget spent", ""): the rule the model loop of
        the ``openai`` backend applies before each of its calls."""
        used = Usage(tokens=self.tokens, cost_usd=self.cost_usd)
        return budget.spent(used, self.max_tokens, self.max_cost_usd, None)

    def shared(self) -> str:
        """Why the task's pool refuses this run's next call ("" when it does not), in the
        words the agent is answered with; ``stopped`` keeps the short reason."""
        if self.pool is None:
            return ""
        short, said = self.pool.check()
        if short:
            self.stopped = short
        return said

    def add(self, call: Call) -> None:
        self.count += 1
        self.tokens += call.tokens_in + call.tokens_out
        self.cost_usd += call.cost_usd
        if len(self.calls) < MAX_RECORDED:
            self.calls.append(call)

    def note(self, call: Call) -> None:
        """Count ``call`` and append it to the journal, so no try of the attempt forgets
        what it cost (a provider bills a call whose try was killed). The task's pool
        first: a crash between the two leaves the task's count high, never low."""
        if self.pool is not None:
            self.pool.add(call.tokens_in + call.tokens_out, call.cost_usd)
        self.add(call)
        if self.journal is not None:
            with self.journal.open("a") as f:
                f.write(json.dumps(dataclasses.asdict(call)) + "\n")

    def resume(self) -> None:
        """Count what earlier tries of the attempt spent, from the journal they left."""
        if self.journal is None:
            return
        try:
            lines = self.journal.read_text().splitlines()
        except FileNotFoundError:
            return
        for line in lines:
            try:
                self.add(Call(**json.loads(line)))
            except (ValueError, TypeError):
                continue  # a line cut by the crash that ended its try

    def provider_refused(self) -> str:
        """Why no call of the run could succeed, in the provider's words: every answer it
        gave was a refusal no retry changes (401 or 403: the key; 404: the model), "" when
        any call was answered otherwise (or none was made)."""
        answered = [c for c in self.calls if c.status]
        if not answered or any(c.status not in FINAL_REFUSALS for c in answered):
            return ""
        last = answered[-1]
        said = f": {last.said}" if last.said else ""
        return (
            f"agent.provider: {self.upstream} answered {last.status} to every model call "
            f"of the attempt ({len(answered)}){said}"
        )

    def refuse(self, why: str) -> None:
        if len(self.refused) < MAX_RECORDED and why not in self.refused:
            self.refused.append(why)

    def env(self, gateway_url: str) -> dict[str, str]:
        """What the run's CLI reads: its api's endpoint variables at the gateway, and the
        run's token where it expects a key."""
        urls, key_variable = PROVIDER_VARIABLES[self.api]
        base = f"{gateway_url}/v1" if self.api == "openai" else gateway_url
        return {**dict.fromkeys(urls, base), key_variable: self.token}


def provider_key(provider: Provider) -> str:
    """The real key, from the worker's variable or the file ``<key_env>_FILE`` names;
    a permanent error saying which to set when neither holds one."""
    name = provider.key_variable
    key = os.environ.get(name, "").strip()
    if key:
        return key
    file = os.environ.get(f"{name}_FILE", "")
    if file:
        try:
            with Path(file).open("rb") as f:
                key = f.read(KEY_FILE_BYTES).decode("utf-8", errors="replace").strip()
        except OSError as e:
            raise permanent(f"{name}_FILE names {file}, which the worker cannot read: {e}") from e
        if key:
            return key
    raise permanent(
        f"{name} is not set where the worker runs; set it there (or {name}_FILE to a file "
        "holding the key): agent.provider keeps the key in the worker, never in the sandbox"
    )
