"""JSON from outside (a webhook, an agent's model call, a file an agent wrote), parsed
within bounds.

``json.loads`` builds whatever the text describes: sixteen megabytes of ``{},{},…``
become five million dicts (hundreds of megabytes), and ten thousand ``[`` end in a
``RecursionError`` that no ``except ValueError`` catches. ``loads`` measures the text
first, without building anything: its strings are cut out (one regular expression),
what is left is counted (objects, arrays, ``,`` and ``:``: about as many as the values
it would build) and its nesting measured (a running sum, all in C). Past ``max_depth`` or
``max_items`` it raises ``Refused``, a ``ValueError`` with one line saying which bound,
before ``json.loads`` is called; the measuring costs about two copies of the text.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

MAX_DEPTH = 64
"""Nesting a webhook's or a file's JSON may have; GitHub's and Slack's payloads have under 15."""
MAX_ITEMS = 100_000
"""Values a webhook's or a file's JSON may hold; a GitHub delivery holds a few hundred."""

STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.DOTALL)
"""A JSON string, escapes included: its brackets and commas are text, not structure. One
left open runs to the end of the text (``json.loads`` refuses it there), so a match from
a quote never fails: a failed one would be tried again from every later quote, and
``"\\"\\"…`` would take time growing as its square."""
NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b"[]{},:")))
STEP = [0] * 256
STEP[ord("[")] = STEP[ord("{")] = 1
STEP[ord("]")] = STEP[ord("}")] = -1


class Refused(ValueError):
    """The text is past a bound; ``str()`` says which, in words that follow "the body"."""

    def __init__(self, message: str, *, too_big: bool) -> None:
        super().__init__(message)
        self.too_big = too_big
        """True past ``max_items`` (the answer is 413), False past ``max_depth`` (400)."""


def check(data: bytes | str, *, max_depth: int = MAX_DEPTH, max_items: int = MAX_ITEMS) -> None:
    """``Refused`` when ``data`` holds more than ``max_items`` items or nests deeper than
    ``max_depth``. Its items are its objects, arrays, ``,`` and ``:`` outside strings:
    as many as the values and keys it holds but the first, and one more for each empty
    object or array, so a bound on them is a bound on what ``json.loads`` builds. Text
    that is not JSON is measured all the same (``json.loads`` refuses it after)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    # Each string is a value or a key: too many quotes is too many values, said before
    # the strings are cut out (one match each: the costly part).
    if (raw.count(b'"') - raw.count(b'\\"')) // 2 > max_items:
        raise Refused(f"holds more than {max_items:,} JSON values", too_big=True)
    shape = STRING.sub(b"", raw).translate(None, NOT_STRUCTURE)
    closers = shape.count(b"]") + shape.count(b"}")
    if len(shape) - closers > max_items:
        raise Refused(f"holds more than {max_items:,} JSON values", too_big=True)
    brackets = shape.translate(None, b",:")
    if max(accumulate(map(STEP.__getitem__, brackets)), default=0) > max_depth:
        raise Refused(f"nests deeper than {max_depth} levels", too_big=False)


def loads(data: bytes | str, *, max_depth: int = MAX_DEPTH, max_items: int = MAX_ITEMS) -> Any:
    """``json.loads(data)`` once ``check`` lets it by; ``ValueError`` when it is not JSON."""
    check(data, max_depth=max_depth, max_items=max_items)
    return json.loads(data)
