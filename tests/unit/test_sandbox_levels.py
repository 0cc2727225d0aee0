"""Every sandbox level has all its parts, and what a run may do is worked out in one place.

A level is an entry of ``SandboxLevel``; what it gives is ``capabilities``; what it
promises is ``GUARANTEES`` (``loop doctor``) and the table on the trust-boundary page;
the e2e suites run each confining level (``LEVELS``). A level added to the enum and
forgotten in one of these fails here.
"""

from __future__ import annotations

import itertools
from typing import get_args

import pytest

from activities.host.sandbox import GUARANTEES, HostSupport
from activities.host.sandbox.capabilities import _CONFINEMENT, Capabilities, Kind
from loop.contracts import SandboxLevel, SandboxPolicy
from tests.support.host import LEVELS
from tests.support.repos import ROOT


@pytest.mark.parametrize("level", list(SandboxLevel))
def test_each_level_has_every_part(level: SandboxLevel) -> None:
    assert level in _CONFINEMENT, "no confinement for the level"
    assert GUARANTEES.get(level), "loop doctor cannot say what the level promises"
    table = (ROOT / "docs" / "concepts" / "trust-boundary.md").read_text()
    header = next(line for line in table.splitlines() if line.startswith("| | `"))
    assert f"`{level.value}`" in header, "the trust-boundary table lacks the level"
    if _CONFINEMENT[level].own_uid:
        assert level.value in [p.id for p in LEVELS], "the e2e suites never run the level"


def test_a_host_without_root_says_why_for_every_confining_level() -> None:
    host = HostSupport(
        level=SandboxLevel.OFF, root=False, bwrap="", bwrap_version="", bwrap_error="",
        basic_trial="", setpriv="", userns="", cgroup="", seccomp=True,
    )  # fmt: skip
    for level in SandboxLevel:
        why = host.unavailable(level)
        assert bool(why) == _CONFINEMENT[level].own_uid, level
        if why:
            assert level.value in why and "root" in why


@pytest.mark.parametrize(("level", "kind"), list(itertools.product(SandboxLevel, get_args(Kind))))
def test_what_a_run_may_do_follows_its_level_and_kind(level: SandboxLevel, kind: Kind) -> None:
    policy = SandboxPolicy(mode=level, network="none", gate_network="proxy", allow_unsafe_off=True)
    can = Capabilities.of(policy, kind)
    assert can.confined == (level != SandboxLevel.OFF)
    assert can.namespaces == (level == SandboxLevel.STRICT)
    # Only a gate reads a checkout; only the model's tool call names nothing into view.
    assert can.writes_tree == (kind != "gate") == can.keeps_home
    assert can.trusts_argv == (kind != "tool")
    assert can.own_site == (kind == "gate")
    assert can.network == ("proxy" if kind == "gate" else "none")


def test_no_sandbox_branch_asks_the_level_or_the_kind_again() -> None:
    """The run's branches read its capabilities: a comparison of the mode or the kind
    with a string in the sandbox's run module would be a second answer to one question."""
    source = (ROOT / "activities" / "host" / "sandbox" / "run.py").read_text()
    for asked in ('.mode == "', '.mode != "', 'kind == "', 'kind != "', "policy.mode"):
        assert asked not in source, asked
