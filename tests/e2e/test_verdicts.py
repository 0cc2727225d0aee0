"""Verdicts an agent cannot forge: hostile agents against the gates, as whole tasks.

A real server and worker, real git, the real sandbox in basic and strict. Each
hostile agent leaves the bug in place and tries one cheap way to make the test run
look green: end the process at import, end it from a ``conftest.py``, rewrite the
reports in a hook, hide tests from collection (``collect_ignore``, a deselecting
hook, ``del``, ``__test__ = False``, a skip alias, an empty ``parametrize``, an
``xfail``), forge the JUnit file, rewrite a protected test. Every one must end other
than DONE_WITH_EVIDENCE, with the evidence that says why. The honest agents pass
with per-test evidence: a fix, a fix with a regression test, a unittest suite and a
runner that is not Python (node's, through JUnit XML).
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

import pytest
from temporalio.client import Client

from loop.contracts import GateResult, TaskResult, TaskSpec, TaskState
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.agents import needs_cli, write_agent
from tests.support.host import LEVELS
from tests.support.repos import git
from tests.support.tasks import result_of, task
from worker import build_worker

pytestmark = pytest.mark.timeout(240)

SLUG = "def slug(text):\n    return text.lower().replace(' ', '-')\n"
FIXED = (
    "import re\n\n\ndef slug(text):\n    return '-'.join(re.findall(r'[a-z0-9]+', text.lower()))\n"
)
TESTS = """\
import pytest

from src.slug import slug


def test_a():
    assert slug("a b") == "a-b"


def test_b():
    assert slug("A B") == "a-b"


def test_c():
    assert slug("a, b!") == "a-b"


def test_d():
    assert slug("a  b") == "a-b"
"""
"""test_a and test_b pass at base; test_c and test_d fail there (the bug)."""
PYTEST = f"{sys.executable} -m pytest -q -p no:cacheprovider tests"


def slug_repo(root: Path) -> Path:
    repo = root / "slug"
    (repo / "src").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "src" / "slug.py").write_text(SLUG)
    (repo / "tests" / "test_slug.py").write_text(TESTS)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def writes(files: dict[str, str], claim: str = "all tests pass") -> str:
    """An agent body that writes ``files`` (path -> text) and claims success."""
    return (
        f"for path, text in {files!r}.items():\n"
        "    target = pathlib.Path(path)\n"
        "    target.parent.mkdir(parents=True, exist_ok=True)\n"
        "    target.write_text(text)\n"
        f"out.write_text({claim!r})\n"
    )


def pytest_task(repo: Path, agent: list[str], mode: str, **overrides: object) -> dict:
    """The issue's strictest task file, with the scope open to tests/ so that the
    verdict itself (not diff_scope) has to stop what the agent does there."""
    spec = task(
        repo,
        agent,
        verify=[
            {"name": "tests", "run": PYTEST, "timeout": 60},
            {"name": "scope", "diff_scope": {"allow": ["src/**", "tests/**"]}},
            {"name": "keep-tests", "no_removed_tests": True},
        ],
        sandbox={"mode": mode},
        budget={"max_attempts": 1},
        autonomy="unattended",
        approval_timeout=1,
    )
    spec.update(overrides)
    return spec


def gate(result: TaskResult, name: str) -> GateResult:
    verdict = result.attempts[-1].verdict
    assert verdict is not None, result.reason
    return next(g for g in verdict.gates if g.name == name)


CONFTEST_EXIT = "import sys\nsys.exit(0)\n"
EXIT_AT_IMPORT = SLUG + (
    "import os as _os, sys as _sys\n"
    'if "pytest" in _sys.modules:\n'
    "    _sys.stdout.flush(); _os._exit(0)\n"
)
REWRITE_REPORTS = """\
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""
SESSION_FINISH = "def pytest_sessionfinish(session, exitstatus):\n    session.exitstatus = 0\n"
COLLECT_IGNORE = 'collect_ignore = ["test_slug.py"]\n'
DESELECT = """\
def pytest_collection_modifyitems(config, items):
    kept = [i for i in items if i.name in ("test_a", "test_b")]
    config.hook.pytest_deselected(items=[i for i in items if i not in kept])
    items[:] = kept
"""
HIDDEN = {
    "del": TESTS + "\n\ndel test_c\n",
    "dunder-test": TESTS + "\n\ntest_c.__test__ = False\n",
    "skip-alias": TESTS.replace("def test_c", "later = pytest.mark.skip\n\n\n@later\ndef test_c"),
    "empty-parametrize": TESTS.replace(
        "def test_d():", '@pytest.mark.parametrize("x", [])\ndef test_d(x):'
    ),
    "xfail": TESTS.replace("def test_c", "@pytest.mark.xfail\ndef test_c"),
}
FORGED_JUNIT = SLUG + textwrap.dedent(
    """
    import os, pathlib
    folder = os.environ.get("LOOP_REPORT_DIR")
    if folder:
        case = '<testcase classname="tests.test_slug" name="test_{}"/>'
        cases = "".join(case.format(x) for x in "abcd")
        xml = f"<testsuites><testsuite>{cases}</testsuite></testsuites>"
        pathlib.Path(folder, "junit.xml").write_text(xml)
        os._exit(0)
    """
)
TRICKS: dict[str, dict[str, str]] = {
    "exit-at-import": {"src/slug.py": EXIT_AT_IMPORT},
    "conftest-exit": {"tests/conftest.py": CONFTEST_EXIT},
    "rewrite-reports": {"tests/conftest.py": REWRITE_REPORTS},
    "session-finish": {"tests/conftest.py": SESSION_FINISH},
    "collect-ignore": {"tests/conftest.py": COLLECT_IGNORE},
    "deselect": {"tests/conftest.py": DESELECT},
    **{name: {"tests/test_slug.py": text} for name, text in HIDDEN.items()},
    "forged-junit": {"src/slug.py": FORGED_JUNIT},
}
JUNIT_GATE = {
    "name": "tests",
    "run": f'{PYTEST} --junitxml="$LOOP_REPORT_DIR/junit.xml"',
    "report": {"junit": "junit.xml"},
    "timeout": 60,
}


def expected(trick: str, result: TaskResult) -> None:
    """What each trick must leave in the verdict (beyond not being DONE)."""
    tests, keep = gate(result, "tests"), gate(result, "keep-tests")
    detail = tests.evidence.detail
    assert not tests.passed, (trick, detail)
    if trick in ("exit-at-import", "conftest-exit", "forged-junit"):
        assert "the test run ended before it reported" in detail, (trick, detail)
    if trick in ("exit-at-import", "conftest-exit", "rewrite-reports", "session-finish",
                 "collect-ignore", "deselect", "dunder-test", "forged-junit"):  # fmt: skip
        assert tests.uncertain and tests.evidence.quoted, (trick, tests.evidence)
        assert result.state == TaskState.NEEDS_HUMAN, (trick, result.reason)
        assert "uncertain checker: tests" in "".join(e.reason for e in result.human_escalation)
    if trick == "rewrite-reports":
        assert any("pytest_runtest_makereport" in q for q in tests.evidence.quoted)
    if trick == "session-finish":
        failing = {c.id for c in tests.evidence.tests.failing}  # type: ignore[union-attr]
        assert {"tests/test_slug.py::test_c", "tests/test_slug.py::test_d"} <= failing
    lost = {
        "collect-ignore": ["tests/test_slug.py::test_a", "tests/test_slug.py::test_b"],
        "deselect": ["tests/test_slug.py::test_c", "tests/test_slug.py::test_d"],
        "del": ["tests/test_slug.py::test_c"],
        "dunder-test": ["tests/test_slug.py::test_c"],
        "skip-alias": ["tests/test_slug.py::test_c"],
        "empty-parametrize": ["tests/test_slug.py::test_d"],
        "xfail": ["tests/test_slug.py::test_c"],
    }
    if trick in lost:
        assert not keep.passed, (trick, keep.evidence.detail)
        for case_id in lost[trick]:
            assert case_id in keep.evidence.files, (trick, keep.evidence.detail)
            assert case_id in detail, (trick, detail)


async def run_all(
    client: Client, settings: Settings, specs: dict[str, dict]
) -> dict[str, TaskResult]:
    async with build_worker(client, settings):
        handles = {}
        for name, spec in specs.items():
            handle, started = await start_task(
                client, TaskSpec.model_validate(spec), settings.task_queue
            )
            assert started
            handles[name] = handle
        results = await asyncio.gather(*(result_of(h, within=200) for h in handles.values()))
    return dict(zip(handles, results, strict=True))


@pytest.mark.parametrize("mode", LEVELS)
async def test_no_cheap_trick_ends_a_task_done(
    client: Client, settings: Settings, tmp_path: Path, mode: str
) -> None:
    specs = {}
    for trick, files in TRICKS.items():
        repo = slug_repo(tmp_path / trick)
        spec = pytest_task(repo, write_agent(tmp_path, writes(files)), mode)
        if trick == "forged-junit":
            spec["verify"][0] = dict(JUNIT_GATE)
        specs[trick] = spec
    results = await run_all(client, settings, specs)
    for trick, result in results.items():
        assert result.state != TaskState.DONE_WITH_EVIDENCE, (trick, result.reason)
        expected(trick, result)
        repo = tmp_path / trick / "slug"
        assert git(repo, "rev-parse", "main") == git(repo, "rev-list", "--max-parents=0", "main")


@pytest.mark.parametrize("mode", LEVELS)
async def test_a_protected_test_rewritten_blocks_at_once(
    client: Client, settings: Settings, tmp_path: Path, mode: str
) -> None:
    repo = slug_repo(tmp_path)
    body = (
        'pathlib.Path("tests/test_slug.py").write_text("def test_a():\\n    pass\\n")\n'
        'out.write_text("tests fixed")\n'
    )
    spec = pytest_task(repo, write_agent(tmp_path, body), mode)
    spec["verify"][1] = {
        "name": "scope",
        "diff_scope": {"allow": ["src/**"], "protect": ["tests/**"]},
    }
    spec["budget"] = {"max_attempts": 3}
    results = await run_all(client, settings, {"protected": spec})
    result = results["protected"]
    assert result.state == TaskState.BLOCKED, result.reason
    assert "protected path: attempt 1 tried to write tests/test_slug.py" in result.reason
    assert len(result.attempts) == 1


HONEST_TEST = TESTS + '\n\ndef test_punctuation_runs():\n    assert slug("x -- y") == "x-y"\n'


@pytest.mark.parametrize("mode", LEVELS)
async def test_honest_fixes_pass_with_per_test_evidence(
    client: Client, settings: Settings, tmp_path: Path, demo_repo: Path, mode: str
) -> None:
    regression = {"name": "new-test", "regression_test": True}
    specs = {}
    fix = pytest_task(
        slug_repo(tmp_path / "fix"), write_agent(tmp_path, writes({"src/slug.py": FIXED})), mode
    )
    specs["fix"] = fix
    with_test = pytest_task(
        slug_repo(tmp_path / "with-test"),
        write_agent(tmp_path, writes({"src/slug.py": FIXED, "tests/test_slug.py": HONEST_TEST})),
        mode,
    )
    with_test["verify"].append(regression)
    specs["with-test"] = with_test
    without = pytest_task(
        slug_repo(tmp_path / "without"),
        write_agent(tmp_path, writes({"src/slug.py": FIXED})),
        mode,
    )
    without["verify"].append(regression)
    specs["without-test"] = without
    specs["unittest"] = task(
        demo_repo,
        write_agent(
            tmp_path, "pathlib.Path('slugify.py').write_text(COMPLETE)\nout.write_text('x')\n"
        ),
        sandbox={"mode": mode},
    )
    results = await run_all(client, settings, specs)

    done = results["fix"]
    assert done.state == TaskState.DONE_WITH_EVIDENCE, done.reason
    tests = gate(done, "tests")
    assert tests.evidence.tests is not None and tests.evidence.tests.counts == {"passed": 4}
    assert "against base: 2 passing still pass, 2 required now pass" in tests.evidence.detail
    assert "by the runner's report" in gate(done, "keep-tests").evidence.detail

    proven = results["with-test"]
    assert proven.state == TaskState.DONE_WITH_EVIDENCE, proven.reason
    new_test = gate(proven, "new-test")
    assert "tests/test_slug.py::test_punctuation_runs" in new_test.evidence.detail
    assert new_test.evidence.tests is not None
    assert new_test.evidence.tests.failing[0].outcome == "failed"  # on base's code

    unproven = results["without-test"]
    assert unproven.state != TaskState.DONE_WITH_EVIDENCE
    missing = gate(unproven, "new-test")
    assert not missing.passed
    assert missing.evidence.detail == "the attempt added or changed no test file"

    demo = results["unittest"]
    assert demo.state == TaskState.DONE_WITH_EVIDENCE, demo.reason
    unit = gate(demo, "tests")
    assert unit.evidence.tests is not None and unit.evidence.tests.runner == "unittest"
    assert unit.evidence.tests.counts == {"passed": 3}
    explored = Path(demo.explore_brief).read_text()
    assert "fails at base: `tests.test_slugify.TestSlugify.test_punctuation`" in explored


JS_SLUG = "exports.slug = (t) => t.toLowerCase().replace(/ /g, '-');\n"
JS_FIXED = "exports.slug = (t) => (t.toLowerCase().match(/[a-z0-9]+/g) || []).join('-');\n"
JS_TESTS = """\
const test = require('node:test');
const assert = require('node:assert');
const { slug } = require('../src/slug.js');
test('spaces', () => assert.strictEqual(slug('a b'), 'a-b'));
test('punctuation', () => assert.strictEqual(slug('a, b!'), 'a-b'));
"""


def node_repo(root: Path) -> Path:
    repo = root / "js"
    (repo / "src").mkdir(parents=True)
    (repo / "test").mkdir()
    (repo / "src" / "slug.js").write_text(JS_SLUG)
    (repo / "test" / "slug.test.js").write_text(JS_TESTS)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


@needs_cli("node")
@pytest.mark.parametrize("mode", LEVELS)
async def test_a_runner_that_is_not_python_is_judged_by_its_junit_report(
    client: Client, settings: Settings, tmp_path: Path, mode: str
) -> None:
    junit = {
        "name": "tests",
        "run": (
            "node --test --test-reporter=junit "
            '--test-reporter-destination="$LOOP_REPORT_DIR/junit.xml" test/'
        ),
        "report": {"junit": "junit.xml"},
        "timeout": 60,
    }
    forge = JS_SLUG + (
        "const fs = require('fs');\n"
        "fs.writeFileSync(process.env.LOOP_REPORT_DIR + '/junit.xml', "
        '\'<testsuites><testcase classname="test" name="spaces"/>'
        '<testcase classname="test" name="punctuation"/></testsuites>\');\n'
        "process.kill(process.ppid, 'SIGKILL');\n"
    )
    specs = {}
    for name, text in (
        ("fixed", JS_FIXED),
        ("broken", JS_SLUG + "// untouched\n"),
        ("forged", forge),
    ):
        spec = pytest_task(
            node_repo(tmp_path / name), write_agent(tmp_path, writes({"src/slug.js": text})), mode
        )
        spec["verify"] = [junit, {"name": "scope", "diff_scope": {"allow": ["src/**"]}}]
        specs[name] = spec
    results = await run_all(client, settings, specs)
    fixed = results["fixed"]
    assert fixed.state == TaskState.DONE_WITH_EVIDENCE, fixed.reason
    tests = gate(fixed, "tests")
    assert tests.evidence.tests is not None and tests.evidence.tests.runner == "junit"
    assert tests.evidence.tests.counts == {"passed": 2}
    broken = gate(results["broken"], "tests")
    assert not broken.passed
    assert broken.evidence.tests is not None
    assert [c.id for c in broken.evidence.tests.failing] == ["test::punctuation"]
    forged = results["forged"]
    assert forged.state != TaskState.DONE_WITH_EVIDENCE, forged.reason
    forged_tests = gate(forged, "tests")
    assert forged_tests.uncertain
    assert any("names a test report" in q for q in forged_tests.evidence.quoted)


class Coin:
    """An HTTP coin whose tosses follow ``pattern`` (H: 200 heads, T: 503 tails), in turn."""

    def __init__(self, pattern: str) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from threading import Thread

        self.pattern, self.tosses = pattern, 0
        coin = self

        class Toss(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                side = coin.pattern[coin.tosses % len(coin.pattern)]
                coin.tosses += 1
                self.send_response(200 if side == "H" else 503)
                self.end_headers()
                self.wfile.write(b"heads" if side == "H" else b"tails")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Toss)
        Thread(target=self.server.serve_forever, daemon=True).start()
        self.address = f"127.0.0.1:{self.server.server_address[1]}"

    def test_file(self) -> str:
        return (
            "import urllib.request\n\n\ndef test_toss():\n"
            f"    with urllib.request.urlopen('http://{self.address}/', timeout=5) as r:\n"
            "        assert r.read() == b'heads'\n"
        )


async def test_a_test_that_fails_once_and_passes_on_a_retry_is_flaky_not_failed(
    client: Client, settings: Settings, tmp_path: Path
) -> None:
    """Heads at both runs at base, tails at the attempt, heads on the retry: the true fix
    is DONE, the coin set aside as flaky; it is never counted as fixed."""
    coin = Coin("HHTH")
    try:
        repo = slug_repo(tmp_path)
        (repo / "tests" / "test_coin.py").write_text(coin.test_file())
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "a coin")
        spec = pytest_task(repo, write_agent(tmp_path, writes({"src/slug.py": FIXED})), "basic")
        spec["sandbox"] = {"mode": "basic", "gate_network": "proxy",
                           "allow_hosts": [coin.address]}  # fmt: skip
        result = (await run_all(client, settings, {"flaky": spec}))["flaky"]
    finally:
        coin.server.shutdown()
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    tests = gate(result, "tests")
    assert tests.evidence.tests is not None
    aside = {c.id: c.message for c in tests.evidence.tests.set_aside}
    assert aside == {"tests/test_coin.py::test_toss": "flaky: failed, then passed on a retry"}
    assert "tests/test_coin.py::test_toss" not in tests.evidence.tests.fixed
    assert coin.tosses == 4, coin.tosses  # twice at base, once at the attempt, the retry


async def test_a_base_that_fails_only_for_its_environment_asks_before_any_attempt(
    client: Client, settings: Settings, tmp_path: Path
) -> None:
    repo = slug_repo(tmp_path)
    (repo / "tests" / "test_slug.py").write_text(
        TESTS.split("def test_c")[0]
        + "def test_c():\n    import socket\n    socket.create_connection(('pypi.org', 443), 3)\n"
    )
    git(repo, "commit", "-q", "-am", "a test that needs the network")
    spec = pytest_task(repo, write_agent(tmp_path, writes({"src/slug.py": FIXED})), "basic")
    result = (await run_all(client, settings, {"offline": spec}))["offline"]
    assert result.state == TaskState.NEEDS_HUMAN, result.reason
    assert result.attempts == [], "no attempt spent"
    assert result.reason.startswith("at base, tests: "), result.reason
    assert "every test failing at base fails for its environment" in result.reason
    assert "fail_to_pass" in result.reason
