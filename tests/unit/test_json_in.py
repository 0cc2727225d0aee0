"""JSON from outside, measured before it is built (``loop.hardened.json_in``): the bounds
hold for any JSON, and what hides structure in a string neither gets past them nor is
refused for it."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loop.hardened import json_in

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=40,
)


def depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    return 0


def count(value: Any) -> int:
    """Values and keys, containers included."""
    if isinstance(value, list):
        return 1 + sum(count(v) for v in value)
    if isinstance(value, dict):
        return 1 + sum(1 + count(v) for v in value.values())
    return 1


@settings(max_examples=300, deadline=None)
@given(values, st.booleans())
def test_the_depth_measured_is_the_depth_parsed(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    deepest = depth(value)
    assert json_in.loads(text, max_depth=deepest) == json.loads(text)
    if deepest:
        with pytest.raises(json_in.Refused, match=f"nests deeper than {deepest - 1} levels"):
            json_in.check(text, max_depth=deepest - 1)


@settings(max_examples=300, deadline=None)
@given(values)
def test_the_items_measured_bound_the_values_parsed(value: Any) -> None:
    text = json.dumps(value)
    json_in.check(text, max_items=2 * count(value))  # an empty [] or {} counts twice
    if count(value) > 2:  # never fewer items than the values and keys, less the root
        with pytest.raises(json_in.Refused, match="holds more than"):
            json_in.check(text, max_items=count(value) - 2)


def test_brackets_in_strings_are_text() -> None:
    """A string full of brackets, quotes escaped or not, is one value of depth 0: not
    refused, and a string cannot hide real nesting behind an escaped quote either."""
    text = json.dumps({"code": "[" * 500 + '\\"{{{' + "]" * 20 + '"', "x": "\\"})
    assert json_in.loads(text) == json.loads(text)
    hidden = '["\\\\"' + "[" * 100 + "]" * 100 + "]"  # the backslash escaped, not the quote
    with pytest.raises(json_in.Refused, match="nests deeper"):
        json_in.loads(hidden)
    unterminated = '["' + "[" * 5000
    with pytest.raises(ValueError):
        json_in.loads(unterminated)


def test_ten_thousand_deep_is_a_value_error_not_a_recursion_error() -> None:
    for text in ("[" * 10_000 + "]" * 10_000, '{"a":' * 10_000, "[" * 10_000):
        with pytest.raises(json_in.Refused, match="nests deeper than 64 levels") as refused:
            json_in.loads(text)
        assert not refused.value.too_big


def test_millions_of_objects_are_refused_before_any_is_built() -> None:
    """16 MiB of ``{},`` (five million dicts, hundreds of MiB once built): what the
    refusal allocated on the way is a copy or two of the text, never the objects."""
    body = b'{"x":[' + b"{}," * ((16 << 20) // 3) + b"{}]}"
    tracemalloc.start()
    try:
        with pytest.raises(json_in.Refused, match="holds more than 100,000 JSON") as refused:
            json_in.loads(body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert refused.value.too_big
    assert peak < 3 * len(body), f"{peak >> 20} MiB allocated for {len(body) >> 20} MiB of text"


@pytest.mark.timeout(20)
def test_strings_left_open_or_escaped_quotes_cost_one_pass() -> None:
    """A string left open runs to the end of the text, so cutting strings out never
    starts again from each later quote: ``"\\"\\"…`` (quadratic before: 40,000 pairs took
    20 s) and a trailing backslash are one pass; millions of ``""`` are refused by their
    quotes before any is matched."""
    for text in (b'["' + b'\\"' * 2_000_000, b'["' + b'\\"' * 2_000_000 + b"\\"):
        with pytest.raises(ValueError, match="Unterminated string"):
            json_in.loads(text)
    with pytest.raises(json_in.Refused, match="holds more than 100,000 JSON values"):
        json_in.loads(b"[" + b'"",' * 2_000_000 + b'""]')
