"""Which sandbox levels this host can give, and what tests do where one is missing."""

from __future__ import annotations

import os

import pytest

from activities.host.sandbox import inspect_host

HOST = inspect_host()
REQUIRED_LEVELS = {x for x in os.environ.get("LOOP_SANDBOX_REQUIRED", "").split(",") if x}
"""Sandbox levels this run must test (``.ci/run`` sets ``strict,basic``): where one is
unavailable its tests fail with the reason instead of being skipped."""


def needs(level: str) -> pytest.MarkDecorator:
    """Skip a test of ``level`` on a host that cannot give it, unless it is required."""
    missing = HOST.unavailable(level)
    return pytest.mark.skipif(
        bool(missing) and level not in REQUIRED_LEVELS, reason=missing or f"{level} available"
    )


LEVELS = [pytest.param(level, marks=needs(level), id=level) for level in ("basic", "strict")]
"""Parametrize a test over both confining levels."""
DEFAULT_SANDBOX = (
    {"mode": "basic"}
    if not HOST.unavailable("basic") or "basic" in REQUIRED_LEVELS
    else {"mode": "off", "allow_unsafe_off": True}
)
"""What ``task()`` uses: the product's default, or, on a host that cannot give it (a
non-root developer), mode off, so the tests of everything but the sandbox still run."""
