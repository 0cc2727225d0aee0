"""The ``hidden_tests`` gate against the agents it is for: tests they never see.

A real server and worker, the real sandbox in basic and strict. The hidden test file
lives in a folder of the host the sandbox could otherwise read (under /var/lib), and
carries a marker. The true fix passes; an agent that deletes the visible tests, or writes
its own file under the hidden test's name, still fails; an agent that searches the
filesystem it can see (its worktree and ``.git`` included, and the hidden folder by its
path) finds no byte of the marker, and neither do its prompt or its feedback.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from loop.contracts import TaskState
from loop.settings import Settings
from tests.e2e.test_verdicts import FIXED, PYTEST, gate, run_all, slug_repo, writes
from tests.support.agents import agent_file, write_agent
from tests.support.host import LEVELS

pytestmark = pytest.mark.timeout(420)

KEPT = Path("/var/lib/loopwork-tests")
"""Outside /tmp (every sandbox has a /tmp of its own): a place a task's uid could read if
the sandbox did not cover it."""


@pytest.fixture
def hidden() -> Iterator[tuple[Path, str]]:
    marker = f"MARKER-{uuid.uuid4().hex}"
    folder = KEPT / uuid.uuid4().hex[:12]
    (folder / "tests").mkdir(parents=True)
    (folder / "tests" / "test_hidden.py").write_text(
        f"# {marker}\nfrom src.slug import slug\n\nNOTE = {marker!r}\n\n\n"
        "def test_hidden_punctuation():\n    assert slug('a, b!') == 'a-b'\n\n\n"
        "def test_hidden_spaces():\n    assert slug('x y') == 'x-y'\n"
    )
    for path in [KEPT, folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)  # readable by anyone, but for the cover
    try:
        yield folder, marker
    finally:
        shutil.rmtree(folder, ignore_errors=True)


SEEKER = """
import subprocess
wanted = MARKER.encode()
found = []
skip = {"/proc", "/sys", "/dev", "/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/boot"}
libraries = {"site-packages", "node_modules", ".venv", "__pycache__"}
for top, dirs, names in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(top, d) not in skip and d not in libraries]
    for name in names:
        path = os.path.join(top, name)
        try:
            if os.path.isfile(path) and os.path.getsize(path) < 262144:
                with open(path, "rb") as f:
                    if wanted in f.read():
                        found.append(path)
        except OSError:
            pass
for path in (HIDDEN + "/tests/test_hidden.py", HIDDEN):
    try:
        found.append("read " + path + ": " + str(len(open(path, "rb").read())))
    except OSError as e:
        found.append("refused " + path + ": " + type(e).__name__)
objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"],
                         capture_output=True).stdout
if wanted in objects:
    found.append("git objects")
for variable in ("LOOP_PROMPT_FILE", "LOOP_FEEDBACK_FILE"):
    path = os.environ.get(variable)
    if path and wanted in pathlib.Path(path).read_bytes():
        found.append(variable)
(own / f"found-{attempt}.json").write_text(json.dumps(found))
out.write_text("looked")
"""


def task_with_hidden(repo: Path, agent: list[str], folder: Path, mode: str) -> dict:
    from tests.e2e.test_verdicts import pytest_task

    spec = pytest_task(repo, agent, mode)
    laid = {"ref": str(folder), "files": ["tests/*.py"], "run": "tests"}
    spec["verify"] = [
        {"name": "tests", "run": PYTEST, "timeout": 60},
        {"name": "hidden", "hidden_tests": laid},
    ]
    spec["agent"]["timeout"] = 300  # the seeker reads every file it can see
    return spec


@pytest.mark.parametrize("mode", LEVELS)
async def test_tests_the_agent_never_sees(
    client: Client, settings: Settings, tmp_path: Path, hidden: tuple[Path, str], mode: str
) -> None:
    folder, marker = hidden
    visible = (slug_repo(tmp_path / "probe") / "tests" / "test_slug.py").read_text()
    agents = {
        "fix": writes({"src/slug.py": FIXED}),
        "delete-visible": "pathlib.Path('tests/test_slug.py').unlink()\nout.write_text('x')\n",
        "edit-visible": writes({"tests/test_slug.py": visible.replace("== 'a-b'", "!= 'no'")}),
        "impostor": writes({"tests/test_hidden.py": "def test_hidden_punctuation():\n    pass\n"}),
        # The marker in two pieces: the seeker's own script must not be what it finds.
        "seeker": f"MARKER = {marker[:9]!r} + {marker[9:]!r}\nHIDDEN = {str(folder)!r}\n" + SEEKER,
    }
    specs = {}
    for name, body in agents.items():
        spec = task_with_hidden(
            slug_repo(tmp_path / name), write_agent(tmp_path, body), folder, mode
        )
        if name == "seeker":
            spec["budget"] = {"max_attempts": 2}  # its second attempt reads its feedback
        specs[name] = spec
    results = await run_all(client, settings, specs)

    assert results["fix"].state == TaskState.DONE_WITH_EVIDENCE, results["fix"].reason
    passed = gate(results["fix"], "hidden")
    assert "hidden file(s)" in passed.evidence.detail
    assert passed.evidence.tests is not None
    assert "tests/test_hidden.py::test_hidden_punctuation" in passed.evidence.tests.fixed
    assert "tests/test_hidden.py::test_hidden_spaces" not in passed.evidence.tests.fixed
    for name in ("delete-visible", "edit-visible", "impostor", "seeker"):
        result = results[name]
        assert result.state != TaskState.DONE_WITH_EVIDENCE, (name, result.reason)
        failed = gate(result, "hidden")
        assert not failed.passed, (name, failed.evidence.detail)
        failing = {c.id: c.message for c in failed.evidence.tests.failing}  # type: ignore[union-attr]
        assert "tests/test_hidden.py::test_hidden_punctuation" in failing, (name, failing)
        # What the next attempt hears: the assertion, never the test's source.
        said = failing["tests/test_hidden.py::test_hidden_punctuation"]
        assert "assert" in said and "slug(" not in said and "where" not in said, said
        assert marker not in json.dumps(failed.model_dump(mode="json")), name
        assert failed.evidence.output_tail == ""

    # The marker is on this host, readable by any uid: only the sandbox's cover keeps it
    # from the seeker (the same walk, outside the sandbox, finds it).
    on_disk = [p for p in KEPT.rglob("*.py") if marker.encode() in p.read_bytes()]
    assert on_disk and all(p.stat().st_mode & 0o004 for p in on_disk)
    seeker = specs["seeker"]["id"]
    for attempt in (1, 2):
        kept = agent_file(settings, seeker, attempt, f"found-{attempt}.json")
        found = json.loads(kept.read_text())
        assert all(f.startswith("refused ") for f in found), found
    for readable in ("prompt.md", "feedback.json"):
        path = settings.runs / seeker / "attempt-2" / readable
        assert not path.exists() or marker not in path.read_text(), readable
