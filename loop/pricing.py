"""What a model call costs: USD per 1M input and output tokens.

The built-in table holds list prices as published by the providers, checked
2025-08 (standard tier, no batch or cached-input discounts, so a cost here is
an upper bound). Prices change: every figure is overridable, and models not
listed can be added, in ``LOOP_HOME/prices.json``::

    {"my-local-model": {"input": 0, "output": 0}, "gpt-4o": {"input": 2.5, "output": 10}}

A versioned name (``gpt-4o-mini-2024-07-18``) is priced as its family by the
longest listed prefix that ends at a ``-``, ``:`` or ``@`` boundary; a
gateway-qualified name (``openai/gpt-4o``) is tried without its provider part.
An unknown model costs 0 and is warned about once per model per process.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import structlog

from loop.errors import BadInput

PRICES_FILE = "prices.json"

# USD per 1M tokens, checked 2025-08; override in LOOP_HOME/prices.json.
BUILTIN_PRICES: dict[str, dict[str, float]] = {
    # OpenAI
    "gpt-4o": {"input": 2.50, "output": 10.00},
    "gpt-4o-mini": {"input": 0.15, "output": 0.60},
    "gpt-4.1": {"input": 2.00, "output": 8.00},
    "gpt-4.1-mini": {"input": 0.40, "output": 1.60},
    "gpt-4.1-nano": {"input": 0.10, "output": 0.40},
    "gpt-4-turbo": {"input": 10.00, "output": 30.00},
    "gpt-3.5-turbo": {"input": 0.50, "output": 1.50},
    "gpt-5": {"input": 1.25, "output": 10.00},
    "gpt-5-mini": {"input": 0.25, "output": 2.00},
    "gpt-5-nano": {"input": 0.05, "output": 0.40},
    "o1": {"input": 15.00, "output": 60.00},
    "o1-mini": {"input": 1.10, "output": 4.40},
    "o3": {"input": 2.00, "output": 8.00},
    "o3-mini": {"input": 1.10, "output": 4.40},
    "o4-mini": {"input": 1.10, "output": 4.40},
    # Anthropic (both spellings of the 3.x names)
    "claude-opus-4": {"input": 15.00, "output": 75.00},
    "claude-opus-4-5": {"input": 5.00, "output": 25.00},
    "claude-haiku-4": {"input": 1.00, "output": 5.00},
    "claude-sonnet-4": {"input": 3.00, "output": 15.00},
    "claude-3-7-sonnet": {"input": 3.00, "output": 15.00},
    "claude-3.7-sonnet": {"input": 3.00, "output": 15.00},
    "claude-3-5-sonnet": {"input": 3.00, "output": 15.00},
    "claude-3.5-sonnet": {"input": 3.00, "output": 15.00},
    "claude-3-5-haiku": {"input": 0.80, "output": 4.00},
    "claude-3.5-haiku": {"input": 0.80, "output": 4.00},
}

_BOUNDARY = "-:@"
_SAME_PRICE = re.compile(r"v?\d[\w.@:-]*|latest|preview|low|medium|high|minimal")
"""What may follow a family's name and keep its price: a version or date
(``-2024-07-18``, ``-4-5-20250929``, ``-v2``), ``latest``, a reasoning effort. Not a tier:
``o1-pro`` or ``gpt-5-pro`` cost several times their family, and a model the agent
names is priced only as what it is."""
_warned: set[str] = set()


def load_prices(home: Path) -> dict[str, dict[str, float]]:
    """The built-in table merged with ``home/prices.json`` (its entries win).

    Raises ``BadInput`` naming the file and what is wrong when the file is not
    ``{"model": {"input": x, "output": y}}`` with non-negative numbers.
    """
    prices = {k: dict(v) for k, v in BUILTIN_PRICES.items()}
    path = Path(home) / PRICES_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return prices
    except OSError as e:
        raise BadInput(f"{path}: cannot read the prices file: {e.strerror or e}") from None
    expected = 'expected {"model": {"input": x, "output": y}} in USD per 1M tokens'
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadInput(f"{path}: invalid JSON at line {e.lineno}: {e.msg}; {expected}") from None
    if not isinstance(data, dict):
        raise BadInput(f"{path}: the top level is {type(data).__name__}; {expected}")
    for model, entry in data.items():
        if not isinstance(entry, dict) or set(entry) != {"input", "output"}:
            raise BadInput(f"{path}: model {model!r}: {entry!r} is not valid; {expected}")
        for side in ("input", "output"):
            value = entry[side]
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            if not ok or not math.isfinite(value) or value < 0:
                raise BadInput(
                    f"{path}: model {model!r}: {side} {value!r} is not a non-negative number;"
                    f" {expected}"
                )
        prices[model.lower()] = {"input": float(entry["input"]), "output": float(entry["output"])}
    return prices


def lookup(model: str, prices: dict) -> dict[str, float] | None:
    """The price entry for ``model``: exact, else its family by longest prefix, else None."""
    name = model.strip().lower()
    candidates = [name]
    if "/" in name:
        candidates.append(name.rsplit("/", 1)[1])
    table = {k.lower(): v for k, v in prices.items()}
    for candidate in candidates:
        if candidate in table:
            return table[candidate]
        best = ""
        for key in table:
            if (
                len(key) > len(best)
                and candidate.startswith(key)
                and candidate[len(key)] in _BOUNDARY
                and _SAME_PRICE.fullmatch(candidate[len(key) + 1 :])
            ):
                best = key
        if best:
            return table[best]
    return None


def cost(model: str, tokens_in: int, tokens_out: int, prices: dict) -> float:
    """USD for one call; an unknown model costs 0 (warned once per model per process)."""
    entry = lookup(model, prices)
    if entry is None:
        if model not in _warned:
            _warned.add(model)
            structlog.get_logger("loop").warning(
                f"no price for model {model}; cost counted as 0; add it to LOOP_HOME/prices.json",
                model=model,
            )
        return 0.0
    usd = (tokens_in * entry["input"] + tokens_out * entry["output"]) / 1_000_000
    return round(usd, 10)


def call_cost(
    answered: str, configured: str, tokens_in: int, tokens_out: int, prices: dict
) -> float:
    """One model call's cost: priced as the model its answer names when the table knows
    it, else as the task's configured model (a local alias the provider renames)."""
    model = answered if answered and lookup(answered, prices) else configured or answered
    return cost(model, tokens_in, tokens_out, prices) if model else 0.0
