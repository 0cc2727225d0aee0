"""A real project from the package registry, its test suite as the gate: python-slugify's
sdist, whose import needs text-unidecode, installed by the task's environment from PyPI.

The setup reaches PyPI through the egress proxy, to the two hosts pip contacts there
(``pypi.org`` for the index, ``files.pythonhosted.org`` for the files), with the host's
pip configuration left out (``PIP_CONFIG_FILE=/dev/null``), so what it installs comes from
the registry. Where the registry cannot be reached these tests skip, saying so; the sdist
is downloaded once per session (pip's own cache keeps it between sessions).
"""

from __future__ import annotations

import ipaddress
import os
import shlex
import socket
import ssl
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.host import environments
from loop.contracts import TaskResult, TaskState
from loop.hardened import tar as hardened_tar
from loop.settings import Settings
from tests.support.agents import write_agent
from tests.support.host import LEVELS
from tests.support.repos import git
from tests.support.tasks import result_of, start, task
from worker import build_worker

pytestmark = pytest.mark.timeout(420)

PROJECT = "python-slugify==9.2.0"
INDEX = "https://pypi.org/simple"
HOSTS = ["pypi.org", "files.pythonhosted.org"]
"""What pip contacts on PyPI: the index, and the host its files are served from."""
PIP = f"PIP_CONFIG_FILE=/dev/null .venv/bin/python -m pip install -q --index-url {INDEX}"
GATE = ".venv/bin/python -m pytest -q -p no:cacheprovider tests"
LOWERED = "        text = text.lower()\n"
BUG = "        text = text  # not lowered\n"
"""The bug the test puts in: ``slugify`` forgets to lower the text."""
FIX = f"""
legacy = pathlib.Path("slugify/_legacy.py")
legacy.write_text(legacy.read_text().replace({BUG!r}, {LOWERED!r}))
out.write_text("slugify lowers the text again")
"""


def trusted() -> str:
    """``PIP_CERT=…``: the CA bundle this machine trusts (its system store), not pip's own
    (certifi), which a machine that reaches the registry through a proxy of its own does
    not have; the setup leaves the rest of the host's pip configuration out."""
    cafile = ssl.get_default_verify_paths().cafile
    return f"PIP_CERT={shlex.quote(cafile)} " if cafile and Path(cafile).is_file() else ""


def setup() -> list[str]:
    """The environment's setup: a virtualenv, the project editable with pytest, from PyPI."""
    return ["python3 -m venv .venv", f"{trusted()}{PIP} -e . pytest"]


@pytest.fixture(scope="session")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """python-slugify's source distribution, from PyPI (once per session)."""
    folder = tmp_path_factory.mktemp("pypi")
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    env.pop("PIP_FIND_LINKS", None)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
         "--index-url", INDEX, "--timeout", "20", "--retries", "1", "-d", str(folder), PROJECT],
        capture_output=True, text=True, env=env, timeout=180,
    )  # fmt: skip
    found = sorted(folder.glob("*.tar.gz"))
    if done.returncode != 0 or not found:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"the package registry ({INDEX}) cannot be reached: {last}")
    return found[0]


def allowed(hosts: list[str]) -> list[str]:
    """``hosts``, and the address of each as ``ip:443`` where it resolves to one that is not
    public (a machine whose resolver sends the registry to a mirror of its own): the egress
    proxy reaches those only when listed that way."""
    entries = list(hosts)
    for host in hosts:
        for info in socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM):
            ip = ipaddress.ip_address(info[4][0])
            entry = f"[{ip}]:443" if ip.version == 6 else f"{ip}:443"
            if not ip.is_global and entry not in entries:
                entries.append(entry)
    return entries


def slugify_repo(sdist: Path, repo: Path) -> Path:
    """The sdist as a repository, with the bug committed as base."""
    with tarfile.open(sdist) as tar:
        hardened_tar.unpack(tar, repo.parent)
    (repo.parent / sdist.name.removesuffix(".tar.gz")).rename(repo)
    legacy = repo / "slugify" / "_legacy.py"
    assert LOWERED in legacy.read_text(), "the sdist's slugify changed: pick the bug again"
    legacy.write_text(legacy.read_text().replace(LOWERED, BUG))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "python-slugify with a bug")
    return repo


def slugify_task(repo: Path, agent: list[str], level: str) -> dict:
    return task(
        repo,
        agent,
        goal="slugify() must lower the text again (tests/test_legacy.py says how).",
        verify=[{"name": "tests", "run": GATE, "timeout": 120}],
        environment={"setup": setup(), "allow_hosts": allowed(HOSTS)},
        sandbox={"mode": level},
    )


def environment_said(result: TaskResult) -> str:
    [said] = [e.detail for e in result.events if e.kind == "environment"]
    return said


@pytest.mark.parametrize("level", LEVELS)
async def test_a_real_project_from_the_registry_reaches_done(
    client: Client, settings: Settings, tmp_path: Path, sdist: Path, level: str
) -> None:
    """Its dependency installed by the setup from PyPI, the fix judged by test id; a second
    task on the same base and lockfile runs no setup."""
    repo = slugify_repo(sdist, tmp_path / "python-slugify")
    agent = write_agent(tmp_path, FIX)
    first = slugify_task(repo, agent, level)
    again = slugify_task(repo, agent, level)
    async with build_worker(client, settings):
        result = await result_of(await start(client, settings, first), within=360)
        second = await result_of(await start(client, settings, again), within=120)
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert ": built in " in environment_said(result)
    # slugify's dependency came from the registry into the environment, nowhere else.
    [kept] = environments.listing(settings.home)
    site = environments.envs(settings.home) / kept.key / "tree" / ".venv" / "lib"
    [installed] = site.glob("python3*/site-packages/text_unidecode-*.dist-info")
    assert (installed / "INSTALLER").read_text().strip() == "pip"
    brief = Path(result.explore_brief).read_text()
    assert "fails at base: `tests/test_legacy.py::TestSlugify::" in brief, brief
    verdict = result.attempts[-1].verdict
    assert verdict is not None
    [tests] = verdict.gates
    assert tests.passed and tests.evidence.tests is not None
    assert tests.evidence.tests.runner == "pytest", tests.evidence
    assert "required now pass" in tests.evidence.detail, tests.evidence.detail

    assert second.state == TaskState.DONE_WITH_EVIDENCE, second.reason
    assert ": cache hit " in environment_said(second)
    assert not (settings.runs / again["id"] / "environment").exists(), "the setup ran again"
