"""Every agent CLI Loopwork knows has all its parts, and the contracts agree with them.

A CLI is one module in ``loop.rules.clis``; the task file's ``usage`` names and the
default ``ignore`` list live in the contracts (which import no rules), so this is
where a CLI added to one place and not the other fails.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import get_args

import pytest

from loop.contracts import AgentSpec
from loop.contracts.task import AGENT_BYPRODUCTS, UsageSource
from loop.rules import usage
from loop.rules.clis import BY_NAME, CLIS, usage_source
from tests.support.repos import ROOT

NAMES = [cli.name for cli in CLIS]


def test_the_clis_agree_with_the_contracts() -> None:
    assert len(set(NAMES)) == len(NAMES)
    assert set(get_args(UsageSource)) == {"auto", "file", "none", *NAMES}
    assert set(AGENT_BYPRODUCTS) == {glob for cli in CLIS for glob in cli.byproducts}
    factory = AgentSpec.model_fields["ignore"].default_factory
    assert factory is not None and factory() == list(AGENT_BYPRODUCTS)  # type: ignore[call-arg]  # typed as maybe taking the data
    programs = [p for cli in CLIS for p in cli.programs]
    assert len(set(programs)) == len(programs), "two CLIs claim one program"


def test_every_cli_module_is_registered() -> None:
    """A module written and never added to ``CLIS`` would be dead: its CLI unknown."""
    folder = ROOT / "loop" / "rules" / "clis"
    modules = {p.stem for p in folder.glob("*.py")} - {"__init__", "base"}
    registered = {cli.read_usage.__module__.rpartition(".")[2] for cli in CLIS}
    assert modules == registered


@pytest.mark.parametrize("name", NAMES)
def test_each_cli_is_one_module_with_every_part(name: str) -> None:
    cli = BY_NAME[name]
    module = importlib.import_module(cli.read_usage.__module__)
    assert module.CLI is cli, f"{name}: its reader and its entry live in different modules"
    file = Path(module.__file__ or "")
    assert file.parent == ROOT / "loop" / "rules" / "clis"
    assert cli.programs and cli.byproducts
    assert cli.endpoint.url_variable and cli.endpoint.key_variable
    assert cli.endpoint.default_url.startswith("https://")


@pytest.mark.parametrize("name", NAMES)
def test_each_cli_is_found_by_its_program_and_reads_its_own_sample(name: str) -> None:
    cli = BY_NAME[name]
    for program in cli.programs:
        assert usage_source([program, "--flag"], "auto") == name
        assert usage_source(["sh", "-c", f"cd src && /usr/local/bin/{program} -x"], "auto") == name
    assert cli.read_claim(cli.sample) == "Fixed.", "its final message is its claim"
    assert cli.read_claim("") == ""
    got = usage.read(name, cli.sample, None)
    assert got.found and got.tokens_in > 0 and got.error == ""
    assert not usage.read(name, "", None).found, "a reader that finds usage in nothing"
