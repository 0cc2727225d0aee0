"""Verdicts on real projects' test suites, from the package registry (sdists no one here
wrote), run by a virtualenv the test makes: a bug injected, a scripted agent applying the
true fix, the tests gate judging by test id against base.

- toolz 1.0.0 (180 tests), with three failures at base the fix has nothing to do with: a
  test that needs the network, one that writes into the (read-only) checkout, and one
  that flips (a coin served over HTTP, heads and tails in turn). The true fix ends
  DONE_WITH_EVIDENCE under ``fail_to_pass: auto``, each of the three listed as
  pre-existing or flaky, the test of the bug seen passing again by the witness.
- click 8.1.8 (650 tests, parametrized ids with spaces and empty parts, a src layout run
  as ``PYTHONPATH=src python -m pytest -q``): the reporter reports, and the ids Loopwork
  requires and keeps match a SWE-bench-style computation made outside Loopwork from
  pytest's own ``-rA`` output at base and at the fix.
- ``regression_test`` on toolz: a comment above the bug's existing test, and a new test
  that passes at base, both refused, with the true fix in place.

Skipped with one line where the registry cannot be reached.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from temporalio.client import Client

from loop.contracts import TaskResult, TaskState
from loop.hardened import tar as hardened_tar
from loop.settings import Settings
from tests.e2e.test_verdicts import gate, run_all, writes
from tests.support.agents import write_agent
from tests.support.host import LEVELS
from tests.support.repos import git
from tests.support.tasks import task

pytestmark = pytest.mark.timeout(600)

PYTEST = "pytest==8.3.4"
"""The pytest these releases were tested with (click 8.1.8's suite errors on pytest 9's
new deprecations, which its ``filterwarnings = error`` turns into failures)."""
SDISTS = {"toolz": "toolz==1.0.0", "click": "click==8.1.8"}


@dataclass
class Suites:
    python: Path
    sources: dict[str, Path]


@pytest.fixture(scope="session")
def suites(tmp_path_factory: pytest.TempPathFactory) -> Suites:
    """The releases unpacked, and a virtualenv with the pytest they were tested with."""
    root = tmp_path_factory.mktemp("real-suites")
    download = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
         "-d", str(root / "sdists"), *SDISTS.values()],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    if download.returncode != 0:
        pytest.skip(f"the package registry cannot be reached: {download.stderr.strip()[-200:]}")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", PYTEST],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    if installed.returncode != 0:
        pytest.skip(f"the package registry cannot be reached: {installed.stderr.strip()[-200:]}")
    sources = {}
    for name, spec in SDISTS.items():
        version = spec.split("==")[1]
        archive = next((root / "sdists").glob(f"{name}-{version}.tar.gz"))
        with tarfile.open(archive) as tar:
            hardened_tar.unpack(tar, root / "src")
        sources[name] = root / "src" / f"{name}-{version}"
    return Suites(python=venv / "bin" / "python", sources=sources)


def repo_of(source: Path, where: Path, edits: dict[str, tuple[str, str]],
            added: dict[str, str] | None = None) -> tuple[Path, dict[str, str]]:  # fmt: skip
    """The release as a repository whose base has ``edits`` applied (path -> (old, new)
    text) and ``added`` files; returns it and the true files (the release's own)."""
    repo = where / source.name
    shutil.copytree(source, repo)
    true: dict[str, str] = {}
    for path, (old, new) in edits.items():
        text = (repo / path).read_text()
        assert old in text, (path, old)
        true[path] = text
        (repo / path).write_text(text.replace(old, new, 1))
    for path, text in (added or {}).items():
        (repo / path).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo, true


# --------------------------------------------------------------------------- toolz

TOOLZ_BUG = {"toolz/itertoolz.py": ("yield prev[:len(seq) % n]", "yield prev[:len(seq) % n + 1]")}
TOOLZ_BUG_TEST = "toolz/tests/test_itertoolz.py::test_partition_all"


class Coin(BaseHTTPRequestHandler):
    """Tails, heads, tails, ...: a flaky dependency, deterministic enough to test."""

    tosses = 0

    def do_GET(self) -> None:
        Coin.tosses += 1
        heads = Coin.tosses % 2 == 0
        self.send_response(200 if heads else 503)
        self.end_headers()
        self.wfile.write(b"heads" if heads else b"tails")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def coin() -> str:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Coin)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Coin.tosses = 0
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def environment_tests(coin: str) -> str:
    return f"""\
import socket
import urllib.request
from pathlib import Path


def test_needs_the_network():
    socket.create_connection(("pypi.org", 443), timeout=3).close()


def test_writes_beside_itself():
    Path(__file__).with_name("written.txt").write_text("cache")


def test_a_coin_toss():
    with urllib.request.urlopen("http://{coin}/", timeout=5) as answer:
        assert answer.read() == b"heads"
"""


ENVIRONMENT_IDS = {
    "toolz/tests/test_environment.py::test_needs_the_network": "pre-existing at base (network)",
    "toolz/tests/test_environment.py::test_writes_beside_itself": (
        "pre-existing at base (read-only file system)"
    ),
    "toolz/tests/test_environment.py::test_a_coin_toss": "flaky at base",
}


def toolz_task(repo: Path, agent: list[str], python: Path, mode: str, **extra: object) -> dict:
    return task(
        repo,
        agent,
        goal="partition_all(3, range(5)) must return [(0, 1, 2), (3, 4)] again",
        verify=[
            {"name": "tests", "run": f"{python} -m pytest -q toolz/tests", "timeout": 240},
            {"name": "scope", "diff_scope": {"allow": ["toolz/**"]}},
            *extra.pop("gates", []),  # type: ignore[misc]
        ],
        sandbox={"mode": mode, **extra.pop("sandbox", {})},  # type: ignore[dict-item]
        budget={"max_attempts": 1},
        autonomy="unattended",
        approval_timeout=1,
        **extra,
    )


@pytest.mark.parametrize("mode", LEVELS)
async def test_the_true_fix_passes_beside_failures_of_its_environment_and_a_flaky_test(
    client: Client, settings: Settings, tmp_path: Path, suites: Suites, coin: str, mode: str
) -> None:
    repo, true = repo_of(
        suites.sources["toolz"], tmp_path, TOOLZ_BUG,
        {"toolz/tests/test_environment.py": environment_tests(coin)},
    )  # fmt: skip
    spec = toolz_task(
        repo, write_agent(tmp_path, writes(true)), suites.python, mode,
        sandbox={"gate_network": "proxy", "allow_hosts": [coin]},
    )  # fmt: skip
    result = (await run_all(client, settings, {"toolz": spec}))["toolz"]
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    tests = gate(result, "tests")
    summary = tests.evidence.tests
    assert summary is not None and summary.runner == "pytest"
    assert summary.fixed == [TOOLZ_BUG_TEST], summary
    aside = {c.id: c.message for c in summary.set_aside}
    for case_id, why in ENVIRONMENT_IDS.items():
        assert aside.get(case_id, "").startswith(why), (case_id, aside)
    assert "1 seen passing again outside the runner" in tests.evidence.detail
    explored = Path(result.explore_brief).read_text()
    assert "test_needs_the_network" in explored


async def test_regression_test_wants_a_test_the_attempt_really_added(
    client: Client, settings: Settings, tmp_path: Path, suites: Suites
) -> None:
    specs = {}
    test_file = "toolz/tests/test_itertoolz.py"
    for name in ("comment", "passes-at-base"):
        repo, true = repo_of(suites.sources["toolz"], tmp_path / name, TOOLZ_BUG)
        tests = (repo / test_file).read_text()
        if name == "comment":
            files = dict(true, **{test_file: tests.replace(
                "def test_partition_all():", "# the fix\ndef test_partition_all():"
            )})  # fmt: skip
        else:
            files = dict(true, **{test_file: tests + (
                "\n\ndef test_partition_all_pairs():\n"
                "    assert list(partition_all(2, [1, 2, 3, 4])) == [(1, 2), (3, 4)]\n"
            )})  # fmt: skip
        specs[name] = toolz_task(
            repo, write_agent(tmp_path, writes(files)), suites.python, "basic",
            gates=[{"name": "new-test", "regression_test": True}],
        )  # fmt: skip
    results = await run_all(client, settings, specs)
    for name, result in results.items():
        assert result.state != TaskState.DONE_WITH_EVIDENCE, (name, result.reason)
        assert gate(result, "tests").passed, (name, gate(result, "tests").evidence.detail)
        new_test = gate(result, "new-test")
        assert not new_test.passed
        detail = new_test.evidence.detail
        if name == "comment":
            assert "the attempt added no test and changed no test's body" in detail, detail
        else:
            assert "pass on base's code too" in detail and "test_partition_all_pairs" in detail


# --------------------------------------------------------------------------- click

CLICK_BUG = {"src/click/utils.py": ('if word[-1] == ".":', 'if word[-1] == "!":')}
CLICK_COMMAND = "PYTHONPATH=src {python} -m pytest -q tests"


def outcomes_outside(repo: Path, python: Path) -> dict[str, str]:
    """Each test's outcome by id, from pytest's own ``-rA`` summary, outside Loopwork
    (SWE-bench's harness reads its logs the same way)."""
    done = subprocess.run(
        ["bash", "-c", CLICK_COMMAND.format(python=python) + " -rA --tb=no -p no:cacheprovider"],
        cwd=repo, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    found: dict[str, str] = {}
    for line in done.stdout.splitlines():
        m = re.match(r"^(PASSED|FAILED|ERROR) (.+?)(?: - .*)?$", line)
        if m:
            found[m.group(2)] = m.group(1).lower()
    assert found, done.stdout[-2000:]
    return found


async def test_a_src_layout_suite_reports_and_its_ids_match_a_computation_outside(
    client: Client, settings: Settings, tmp_path: Path, suites: Suites
) -> None:
    repo, true = repo_of(suites.sources["click"], tmp_path, CLICK_BUG)
    spec = task(
        repo,
        write_agent(tmp_path, writes(true)),
        verify=[{"name": "tests", "run": CLICK_COMMAND.format(python=suites.python)}],
        sandbox={"mode": "basic"},
        budget={"max_attempts": 1},
        approval_timeout=1,
    )
    result: TaskResult = (await run_all(client, settings, {"click": spec}))["click"]
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    tests = gate(result, "tests")
    summary = tests.evidence.tests
    assert summary is not None and summary.runner == "pytest"

    # The same two commits, judged outside Loopwork, SWE-bench's way.
    at_base = outcomes_outside(repo, suites.python)
    fixed = tmp_path / "fixed"
    shutil.copytree(repo, fixed)
    for path, text in true.items():
        (fixed / path).write_text(text)
    at_fix = outcomes_outside(fixed, suites.python)
    passing = [i for i, o in at_fix.items() if o == "passed"]
    fail_to_pass = sorted(i for i in passing if at_base.get(i) != "passed")
    pass_to_pass = [i for i in passing if at_base.get(i) == "passed"]
    assert fail_to_pass and any("[-sentence < max]" in i for i in fail_to_pass), fail_to_pass
    assert summary.fixed == fail_to_pass
    kept = re.search(r"against base: (\d+) passing still pass", tests.evidence.detail)
    assert kept is not None and int(kept.group(1)) == len(pass_to_pass), tests.evidence.detail
