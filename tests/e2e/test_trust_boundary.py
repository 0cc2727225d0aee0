"""Hostile agents against the trust boundary, as whole tasks on a real server and worker.

One agent per way in, each in basic and strict: it tries to reach the orchestrator,
to make the worker act on files it planted, to freeze the worker, to fool the gates,
to read other tasks, to fill the disk. Every test asserts the task's end state and
that nothing outside the task's own places changed or was read, on planted canaries:
a root-only file, a root-owned folder, a process, a key in the worker's environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.host import sandbox
from activities.host.sandbox import egress_rules, services
from loop.contracts import QUERY_STATUS, TaskResult, TaskSpec, TaskState, TaskStatus
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.agents import agent_calls, agent_file, write_agent
from tests.support.host import DEFAULT_SANDBOX, LEVELS
from tests.support.repos import git
from tests.support.tasks import result_of, task
from worker import build_worker

pytestmark = pytest.mark.timeout(180)
PYTEST = f"{sys.executable} -m pytest -q -p no:cacheprovider tests"


@dataclass
class Canaries:
    """What must be neither read nor changed: the test checks them afterwards."""

    secret: Path
    """A root-only file holding ``word``."""
    folder: Path
    """A root-owned folder, 0755."""
    process: asyncio.subprocess.Process
    """A root process that must stay alive."""
    word: str

    def intact(self) -> None:
        st = self.folder.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o755), "the canary folder changed"
        assert list(self.folder.iterdir()) == [], "something was written to the canary folder"
        assert self.process.returncode is None, "the canary process was killed"
        assert (
            self.secret.read_text() == self.word
            and stat.S_IMODE(self.secret.stat().st_mode) == 0o600
        )

    def unseen(self, *texts: str) -> None:
        for text in texts:
            assert self.word not in text, "a canary reached the task's record"


@pytest.fixture
async def canaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Canaries]:
    word = f"CANARY-{uuid.uuid4().hex}"
    secret = tmp_path / "canary.secret"
    secret.write_text(word)
    secret.chmod(0o600)
    folder = tmp_path / "canary-folder"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    monkeypatch.setenv("LOOP_TEST_PLANTED_KEY", word)
    process = await asyncio.create_subprocess_exec("sleep", "600", start_new_session=True)
    yield Canaries(secret, folder, process, word)
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    await process.wait()


async def run(client: Client, settings: Settings, spec: dict) -> TaskResult:
    handle, started = await start_task(client, TaskSpec.model_validate(spec), settings.task_queue)
    assert started
    return await result_of(handle, within=150)


def record_of(result: TaskResult) -> str:
    return result.model_dump_json() + Path(result.trace_path).read_text()


def hostile(repo: Path, agent: list[str], mode: str, **overrides: object) -> dict:
    """A task for a hostile agent: one attempt, and no waiting on a person."""
    spec = task(repo, agent, sandbox={"mode": mode}, budget={"max_attempts": 1})
    spec["approval_timeout"] = 1
    spec.update(overrides)
    return spec


# --------------------------------------------------------------------------- 1. the orchestrator


REACH_TEMPORAL = """
import asyncio, socket
host, port = {address!r}.rsplit(":", 1)
tried = {{}}
try:
    socket.create_connection((host, int(port)), timeout=3)
    tried["tcp"] = "connected"
except OSError as e:
    tried["tcp"] = f"refused: {{e}}"
import urllib.error, urllib.request
try:
    tried["proxy"] = str(urllib.request.urlopen("http://127.0.0.1:" + port + "/", timeout=5).status)
except urllib.error.HTTPError as e:
    tried["proxy"] = str(e.code)
except Exception as e:
    tried["proxy"] = f"failed: {{e}}"
async def approve():
    from temporalio.client import Client
    client = await asyncio.wait_for(Client.connect({address!r}), 10)
    await client.get_workflow_handle("task-{victim}").signal("approve", {{"note": "me"}})
try:
    asyncio.run(approve())
    tried["sdk"] = "approved"
except BaseException as e:
    tried["sdk"] = f"failed: {{type(e).__name__}}"
out.write_text(json.dumps(tried))
"""

FIX = """
pathlib.Path("slugify.py").write_text(COMPLETE)
out.write_text("fixed")
"""


@pytest.mark.parametrize("mode", LEVELS)
async def test_an_agent_cannot_reach_the_orchestrator(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, mode: str, canaries
) -> None:
    """The Temporal frontend is on the worker's loopback: neither a socket, nor the proxy,
    nor the Temporal SDK reaches it, so a waiting task cannot be approved from a sandbox."""
    address = client.service_client.config.target_host
    victim = task(demo_repo, write_agent(tmp_path, FIX), autonomy="assisted")
    base = git(demo_repo, "rev-parse", "main")
    async with build_worker(client, settings):
        vh, _ = await start_task(client, TaskSpec.model_validate(victim), settings.task_queue)
        deadline = time.monotonic() + 60
        while (await vh.query(QUERY_STATUS, result_type=TaskStatus)).state != "AWAITING_APPROVAL":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        body = REACH_TEMPORAL.format(address=address, victim=victim["id"])
        attacker = hostile(demo_repo, write_agent(tmp_path, body), mode)
        attacker["sandbox"]["allow_hosts"] = [address.replace("localhost", "127.0.0.1")]
        result = await run(client, settings, attacker)
        status = await vh.query(QUERY_STATUS, result_type=TaskStatus)
        await vh.cancel()
    tried = json.loads(result.attempts[0].make.claim)
    assert tried["tcp"].startswith("refused"), tried
    assert tried["proxy"] == "403", tried
    assert tried["sdk"].startswith("failed"), tried
    refused = " ".join(result.attempts[0].make.network_refused)
    assert "is the orchestrator's, never reachable from a sandbox" in refused
    assert status.state == "AWAITING_APPROVAL"  # nobody approved it
    assert git(demo_repo, "rev-parse", "main") == base  # nothing merged
    canaries.intact()


FORMS = ["127.0.0.1", "localhost", "localhost.", "0x7f000001", "2130706433", "127.1",
         "[::1]", "[::ffff:127.0.0.1]", "0.0.0.0"]  # fmt: skip
"""Every way of writing this host's loopback that a resolver or a proxy may accept."""
KNOCK = """
import urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler())
results = {{}}
for port in {ports!r}:
    for form in {forms!r}:
        url = f"http://{{form}}:{{port}}/"
        try:
            results[url] = str(opener.open(url, timeout=5).status)
        except urllib.error.HTTPError as e:
            results[url] = str(e.code)
        except Exception as e:
            results[url] = f"failed: {{type(e).__name__}}"
out.write_text(json.dumps(results))
"""


@pytest.mark.parametrize("mode", LEVELS)
async def test_every_port_the_server_listens_on_is_closed(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, mode: str
) -> None:
    """Not only the frontend: every port the Temporal server process listens on (its HTTP
    API, history, matching, worker services), found by the kernel's socket table, is
    refused through the proxy at every spelling of loopback, even when the task lists
    each one."""
    frontend = int(client.service_client.config.target_host.rpartition(":")[2])
    table = services.listening()
    owner = services.owners({i for i, (_, p) in table.items() if p == frontend})
    held = set().union(*(services.sockets_of(pid) for pid in owner))
    ports = sorted({table[i][1] for i in held if i in table})
    assert frontend in ports and len(ports) >= 4, ports  # frontend, HTTP API, history, ...
    attacker = hostile(
        demo_repo, write_agent(tmp_path, KNOCK.format(ports=ports, forms=FORMS)), mode
    )
    listed = ("127.0.0.1", "localhost", "0x7f000001", "2130706433", "[::1]", "0.0.0.0")
    attacker["sandbox"]["allow_hosts"] = [f"{f}:{p}" for p in ports for f in listed]
    async with build_worker(client, settings):
        result = await run(client, settings, attacker)
    tried = json.loads(result.attempts[0].make.claim)
    assert len(tried) == len(ports) * len(FORMS)
    reached = {url: code for url, code in tried.items() if code not in ("403", "failed: URLError")}
    assert reached == {}, reached
    refused = " ".join(result.attempts[0].make.network_refused)
    assert "never reachable from a sandbox" in refused


def test_a_server_elsewhere_is_closed_at_every_port() -> None:
    """A frontend on another host: every port of every address it resolves to."""
    protected = services.Protected(seeds=["192.0.2.10:7233"], local={"127.0.0.1"})
    deny = protected.entries()
    assert "192.0.2.10:0" in deny
    with pytest.raises(egress_rules.Refused, match="orchestrator"):
        egress_rules.choose("192.0.2.10", 443, ["192.0.2.10"], ["192.0.2.10:443"], deny)


# --------------------------------------------------------------------------- 2. planted files


PLANT = """
import subprocess
attempt_dir = own.parent
# Its output a link to a root-only file, in the hope the worker reads it back.
out.symlink_to({secret!r})
# The worker's own files beside it: a pid file, a sandbox state file, a gate log link,
# the result a retry of this make would take as its own and the lock it would wait on.
for name, text in [("agent.pid", json.dumps({{"pid": {pid}, "start": "0"}})),
                   ("agent.sandbox.json", json.dumps({{"uid": 0, "cgroups": ["/sys/fs/cgroup/pids"],
                    "lent": [{{"path": {folder!r}, "mode": 511, "uid": 0, "gid": 0}}]}})),
                   ("made.json", json.dumps({{"run_id": os.environ.get("LOOP_TASK_ID", ""),
                    "activity_id": "1", "made": {{"attempt": 1, "commit": "f" * 40}}}})),
                   ("owner.lock", "")]:
    try:
        (attempt_dir / name).write_text(text)
    except OSError as e:
        print("refused:", name, e)
try:
    (attempt_dir / "gate-tests.log").symlink_to({folder!r} + "/written-by-root")
except OSError as e:
    print("refused: gate log", e)
try:
    print(open({secret!r}).read())
except OSError as e:
    print("refused: secret", e)
print("env has canary:", any({word!r} in v for v in os.environ.values()))
"""


def agent_log(settings: Settings, result: TaskResult) -> str:
    """The first attempt's whole output, as the agent printed it (its run folder's log)."""
    return (settings.runs / result.task_id / "attempt-1" / "agent.log").read_text()


@pytest.mark.parametrize("mode", LEVELS)
async def test_the_worker_trusts_nothing_the_agent_wrote(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, mode: str, canaries
) -> None:
    body = PLANT.format(
        secret=str(canaries.secret),
        folder=str(canaries.folder),
        pid=canaries.process.pid,
        word=canaries.word,
    )
    async with build_worker(client, settings):
        result = await run(client, settings, hostile(demo_repo, write_agent(tmp_path, body), mode))
    made = result.attempts[0].make
    said = agent_log(settings, result)  # the whole output: the trace keeps its tail
    assert said.count("refused:") == 6, said
    assert "env has canary: False" in said
    assert "symbolic link; not followed" in made.claim
    # Trying to write beside its own folder is trying to leave the worktree.
    assert result.state == TaskState.BLOCKED, result.reason
    attempt_dir = settings.runs / result.task_id / "attempt-1"
    assert f"refused by the sandbox: {attempt_dir}/agent.pid (Read-only" in result.reason
    assert f"{attempt_dir}/gate-tests.log (Read-only" in result.reason
    # The result a retry would return is the worker's record of this try, not a forgery.
    kept = json.loads((attempt_dir / "made.json").read_text())["made"]
    assert kept["commit"] == made.commit != "f" * 40
    canaries.intact()
    canaries.unseen(record_of(result), (settings.home / "notes.md").read_text())


# --------------------------------------------------------------------------- 3. a FIFO


JAM = """
os.mkfifo(out)
pathlib.Path("notes").mkdir()
os.mkfifo("notes/pipe")
pathlib.Path("slugify.py").write_text(COMPLETE)
"""


@pytest.mark.parametrize("mode", LEVELS)
async def test_a_fifo_freezes_nothing(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, mode: str
) -> None:
    """A FIFO as the output file (and one in the worktree) blocks no read of the worker's;
    a task running beside it takes its normal time."""
    fixer = task(demo_repo, write_agent(tmp_path, FIX), sandbox={"mode": mode})
    alone = await _timed(client, settings, fixer)
    jam = hostile(demo_repo, write_agent(tmp_path, JAM), mode)
    beside = task(demo_repo, write_agent(tmp_path, FIX), sandbox={"mode": mode})
    async with build_worker(client, settings):
        jammed = asyncio.ensure_future(run(client, settings, jam))
        started = time.monotonic()
        other = await run(client, settings, beside)
        took = time.monotonic() - started
        result = await jammed
    assert other.state == TaskState.DONE_WITH_EVIDENCE
    assert took < 3 * alone + 5, f"the task beside the FIFO took {took:.1f} s (alone {alone:.1f})"
    made = result.attempts[0].make
    assert "not a regular file" in made.claim
    assert "notes/pipe" not in made.changed_files  # removed before the commit
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason


async def _timed(client: Client, settings: Settings, spec: dict) -> float:
    started = time.monotonic()
    async with build_worker(client, settings):
        result = await run(client, settings, spec)
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    return time.monotonic() - started


# --------------------------------------------------------------------------- 4. the gates


FOOL_THE_GATES = """
import site
# A conftest that ends pytest "green", kept out of the commit by a .gitignore that
# ignores itself; a usercustomize in its HOME and a pytest.ini in /tmp for good measure.
pathlib.Path(".gitignore").write_text(".gitignore\\nconftest.py\\n")
pathlib.Path("conftest.py").write_text("import os\\nos._exit(0)\\n")
user_site = pathlib.Path(os.environ["HOME"], ".local/lib",
                         f"python{{sys.version_info[0]}}.{{sys.version_info[1]}}", "site-packages")
user_site.mkdir(parents=True, exist_ok=True)
(user_site / "usercustomize.py").write_text("import os\\nos._exit(0)\\n")
pathlib.Path("/tmp/pytest.ini").write_text("[pytest]\\naddopts = --co\\n")
out.write_text("all tests pass")
"""


@pytest.mark.parametrize("mode", LEVELS)
async def test_gates_judge_the_commit_not_the_worktree(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, mode: str
) -> None:
    spec = hostile(demo_repo, write_agent(tmp_path, FOOL_THE_GATES), mode)
    spec["verify"][0]["run"] = PYTEST
    async with build_worker(client, settings):
        result = await run(client, settings, spec)
    verdict = result.attempts[0].verdict
    assert verdict is not None and not verdict.passed
    tests = next(g for g in verdict.gates if g.name == "tests")
    assert not tests.passed and "failed" in tests.evidence.output_tail, tests.evidence
    assert {".gitignore", "conftest.py"} <= set(verdict.ignored_files), verdict.ignored_files
    assert result.state == TaskState.BUDGET_EXCEEDED, result.reason
    assert "findall" not in git(Path(result.worktree), "show", f"{result.commit}:slugify.py")


# --------------------------------------------------------------------------- 5. each other


SNOOP = """
home = {home!r}
victim = {victim!r}
for path in [f"{{home}}/runs/{{victim}}/attempt-1/prompt.md", f"{{home}}/runs/{{victim}}/brief.md",
             f"{{home}}/worktrees/{{victim}}/slugify.py", f"{{home}}/temporal.db",
             f"{{home}}/runs/{{victim}}/attempt-1/agent/output.md"]:
    try:
        print("READ", path, open(path).read()[:40])
    except OSError as e:
        print("refused:", path, e.strerror)
"""


@pytest.mark.parametrize("mode", LEVELS)
async def test_tasks_cannot_read_each_other(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, mode: str
) -> None:
    victim = task(demo_repo, write_agent(tmp_path, FIX), sandbox={"mode": mode})
    (settings.home).mkdir(parents=True, exist_ok=True)
    (settings.home / "temporal.db").write_text("every payload of every task")
    body = SNOOP.format(home=str(settings.home), victim=victim["id"])
    async with build_worker(client, settings):
        done = await run(client, settings, victim)
        assert done.state == TaskState.DONE_WITH_EVIDENCE
        result = await run(client, settings, hostile(demo_repo, write_agent(tmp_path, body), mode))
    said = agent_log(settings, result)
    assert "READ" not in said and said.count("refused:") == 5, said
    assert stat.S_IMODE(settings.home.stat().st_mode) == 0o700


WORKING = """
word = {word!r}
if attempt == 1:
    pathlib.Path("slugify.py").write_text("def slugify(t):\\n    return t  # " + word + "\\n")
    out.write_text("not yet")
else:  # the second attempt waits while the other task looks for the first one's work
    for _ in range(600):
        if (own / "go").exists():
            break
        time.sleep(0.1)
    pathlib.Path("slugify.py").write_text(COMPLETE + "# " + word + "\\n")
    out.write_text("done")
"""

LOOK_ROUND = """
import subprocess
word, wip, repo = {drow!r}[::-1], {wip!r}, {repo!r}  # the word itself is in no file of B's
other = {other!r}[::-1]
def run(*argv, cwd="."):
    done = subprocess.run(argv, cwd=cwd, capture_output=True)
    return done.returncode, (done.stdout + done.stderr).decode("utf-8", "replace")
found = {{}}
found["refs"] = run("git", "for-each-ref", "--format=%(refname)")[1]
found["wip"] = run("git", "cat-file", "-t", wip)[0]
code, objects = run("git", "cat-file", "--batch-all-objects", "--batch")
found["objects"] = [code, word in objects, len(objects)]
found["repo"] = [run("git", "-C", repo, "for-each-ref")[0],
                 os.listdir(repo) if os.path.isdir(repo) else []]
seen = []
places = ["/tmp", os.path.dirname(repo), os.environ["HOME"], os.getcwd()]
for top, dirs, files in (step for place in places for step in os.walk(place)):
    for name in files:
        path = os.path.join(top, name)
        try:
            with open(path, "rb") as f:
                if word.encode() in f.read(1 << 20):
                    seen.append(path)
        except OSError:
            pass
found["files"] = seen
found["metadata"] = [  # .git/worktrees/*, gitdir files: nothing names the other task
    os.path.join(top, name) for top, _, files in os.walk(".git") for name in files
    if other.encode() in open(os.path.join(top, name), "rb").read()
] + [d for d in os.listdir(".git") if d == "worktrees"]
(own / "found.json").write_text(json.dumps(found))
"""


@pytest.mark.parametrize("mode", LEVELS)
async def test_tasks_on_one_repository_see_nothing_of_each_other(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, mode: str
) -> None:
    """A's first attempt is a commit in A's clone only, its reviewable one in the
    repository; B, on the same repository meanwhile, finds neither: not by ref, not by
    hash, not among all objects its git can read, not in any file where the two tasks'
    files are on the host."""
    word = f"WORK-OF-A-{uuid.uuid4().hex}"
    victim = task(demo_repo, write_agent(tmp_path, WORKING.format(word=word)),
                  sandbox={"mode": mode}, autonomy="assisted", approval_timeout=1)  # fmt: skip
    async with build_worker(client, settings):
        handle, _ = await start_task(client, TaskSpec.model_validate(victim), settings.task_queue)
        go = agent_file(settings, victim["id"], 2, "go")
        for _ in range(600):
            if any(c["attempt"] == 2 for c in agent_calls(settings, victim["id"])):
                break
            await asyncio.sleep(0.1)
        clone_of_a = settings.worktrees.resolve() / victim["id"]
        wip = git(clone_of_a, "rev-parse", f"loop/{victim['id']}")
        assert word in git(clone_of_a, "show", f"{wip}:slugify.py")
        body = LOOK_ROUND.format(
            drow=word[::-1], other=victim["id"][::-1], wip=wip, repo=str(demo_repo.resolve())
        )
        snoop = hostile(demo_repo, write_agent(tmp_path, body), mode)
        looked = await run(client, settings, snoop)
        go.write_text("")
        done = await result_of(handle, within=150)
    assert done.state == TaskState.DONE_WITH_EVIDENCE, done.reason
    assert word in git(demo_repo, "show", f"loop/{victim['id']}:slugify.py")  # handed over
    found = json.loads(agent_file(settings, snoop["id"], 1, "found.json").read_text())
    assert found["refs"].split() == [f"refs/heads/loop/{snoop['id']}"], found["refs"]
    assert found["wip"] != 0, "A's attempt commit is readable by hash"
    code, has_word, size = found["objects"]
    assert code == 0 and size > 1000 and not has_word, found["objects"]  # base is there
    assert found["repo"][0] != 0 and found["repo"][1] == [], found["repo"]
    assert found["files"] == [] and found["metadata"] == [], found
    assert looked.attempts, looked.reason


# --------------------------------------------------------------------------- 6. the disk


FILL = """
pathlib.Path("notes").mkdir()
for i in range(3):
    pathlib.Path(f"notes/big-{i}.bin").write_bytes(os.urandom(6 << 20))
pathlib.Path("slugify.py").write_text(COMPLETE)
"""


@pytest.mark.parametrize("mode", LEVELS)
async def test_a_worktree_past_its_disk_limit_reaches_no_git(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, mode: str
) -> None:
    spec = hostile(demo_repo, write_agent(tmp_path, FILL), mode)
    spec["sandbox"]["limits"] = {"disk_mb": 10}
    objects = demo_repo / ".git" / "objects"
    before = sum(f.stat().st_size for f in objects.rglob("*") if f.is_file())
    async with build_worker(client, settings):
        result = await run(client, settings, spec)
    after = sum(f.stat().st_size for f in objects.rglob("*") if f.is_file())
    assert after - before < 1 << 20, f"the object store grew by {after - before} bytes"
    made = result.attempts[0].make
    assert made.disk_exceeded.startswith("the worktree grew by 18 MB in this attempt, over")
    assert "notes/big-" in made.disk_exceeded
    disk = result.attempts[0].verdict.gates[0]
    assert (disk.name, disk.passed) == ("disk", False)
    assert result.state == TaskState.BUDGET_EXCEEDED, result.reason
    assert not (Path(result.worktree) / "notes").exists()  # the growth is gone


# --------------------------------------------------------------------------- 7. its own uid


WHO = """
out.write_text(json.dumps({"uid": os.getuid(), "euid": os.geteuid(), "groups": os.getgroups()}))
pathlib.Path("slugify.py").write_text(COMPLETE)
"""


@pytest.mark.parametrize("mode", LEVELS)
async def test_every_task_runs_as_a_uid_of_its_own(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, mode: str
) -> None:
    """Never root, never the worker, never another live task's uid; given back at the end."""
    agent = write_agent(tmp_path, WHO)
    specs = [task(demo_repo, agent, sandbox={"mode": mode}) for _ in range(3)]
    async with build_worker(client, settings):
        results = await asyncio.gather(*(run(client, settings, s) for s in specs))
    seen = [json.loads(r.attempts[0].make.claim) for r in results]
    uids = {s["uid"] for s in seen}
    assert len(uids) == 3 and not uids & {0, os.getuid()}, seen
    assert all(s["uid"] == s["euid"] and s["groups"] in ([], [s["uid"]]) for s in seen), seen
    assert all(r.state == TaskState.DONE_WITH_EVIDENCE for r in results)
    assert not sandbox.holders(settings.home)  # each lease went back when its task ended


# --------------------------------------------------------------------------- 8. a repository inside


NESTED = """
import subprocess
pathlib.Path("slugify.py").write_text(COMPLETE)
sub = pathlib.Path("notes/sub")
sub.mkdir(parents=True)
(sub / "f").write_text("y\\n")
G = ["git", "-c", "user.name=a", "-c", "user.email=a@a"]
subprocess.run(G + ["init", "-q"], cwd=sub, check=True)
subprocess.run(G + ["add", "f"], cwd=sub, check=True)
subprocess.run(G + ["commit", "-qm", "s"], cwd=sub, check=True)
# A command for the worker's git to run, as root, when it looks into this repository.
subprocess.run(G + ["config", "core.fsmonitor", "id > {mark}; false"], cwd=sub, check=True)
out.write_text("fixed")
"""


@pytest.mark.parametrize("mode", LEVELS)
async def test_a_repository_the_agent_made_runs_nothing_as_the_worker(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, mode: str
) -> None:
    """A nested repository's config is the agent's: it is removed before the commit, and the
    worker's git never reads such a config anyway (tests/unit/test_workspace.py checks that
    alone)."""
    mark = tmp_path / "ran-as-root"
    spec = task(
        demo_repo,
        write_agent(tmp_path, NESTED.format(mark=mark)),
        sandbox={"mode": mode},
        autonomy="unattended",
    )
    spec["verify"][1]["diff_scope"]["allow"].append("notes/**")
    async with build_worker(client, settings):
        result = await run(client, settings, spec)
    assert not mark.exists(), mark.read_text()
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert "notes/sub/.git" in result.attempts[0].make.removed
    tree = git(demo_repo, "ls-tree", "-r", "main")
    assert "160000" not in tree and "notes/sub/f" in tree  # its files, never a gitlink


# --------------------------------------------------------------------------- 9. its own folders


HOARD = """
home = pathlib.Path(os.environ["HOME"])
for i in range(3):
    (home / f"cache-{i}.bin").write_bytes(os.urandom(6 << 20))
pathlib.Path("slugify.py").write_text(COMPLETE)
"""


@pytest.mark.parametrize("mode", LEVELS)
async def test_its_own_folders_count_against_the_disk_limit(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, mode: str
) -> None:
    spec = hostile(demo_repo, write_agent(tmp_path, HOARD), mode)
    spec["sandbox"]["limits"] = {"disk_mb": 10}
    async with build_worker(client, settings):
        result = await run(client, settings, spec)
    made = result.attempts[0].make
    assert "the agent's own folders (its HOME and output folder) hold 18 MB" in made.disk_exceeded
    assert result.attempts[0].verdict.gates[0].name == "disk"
    home = settings.runs / result.task_id / "home"
    assert not home.exists() or not list(home.iterdir())


# --------------------------------------------------------------------------- 10. shapes of a tree


MANY_LINKS = """
pathlib.Path("notes").mkdir()
for i in range(20000):
    os.symlink("x" * 200 + str(i), f"notes/link-{i}")
pathlib.Path("slugify.py").write_text(COMPLETE)
"""

DEEP = """
base = os.getcwd()
os.makedirs("notes", exist_ok=True)
os.chdir("notes")
for _ in range(1500):
    os.mkdir("d")
    os.chdir("d")
pathlib.Path("evil").write_text("x")
os.chmod("evil", 0o6755)
os.chdir(base)
pathlib.Path("slugify.py").write_text(COMPLETE)
"""


@pytest.mark.parametrize("mode", LEVELS)
async def test_links_and_empty_files_count_against_the_disk_limit(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, mode: str
) -> None:
    spec = hostile(demo_repo, write_agent(tmp_path, MANY_LINKS), mode)
    spec["sandbox"]["limits"] = {"disk_mb": 10}
    async with build_worker(client, settings):
        result = await run(client, settings, spec)
    made = result.attempts[0].make
    assert made.disk_exceeded.startswith("the worktree grew by 78 MB"), made.disk_exceeded
    assert not (Path(result.worktree) / "notes").exists()


@pytest.mark.parametrize("mode", LEVELS)
async def test_a_tree_too_deep_to_walk_is_taken_away(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, mode: str
) -> None:
    """1,500 nested folders: every folder above the limit is taken back, the rest removed;
    the task goes on to its verdict."""
    spec = task(demo_repo, write_agent(tmp_path, DEEP), sandbox={"mode": mode})
    spec["verify"][1]["diff_scope"]["allow"].append("notes/**")
    async with build_worker(client, settings):
        result = await run(client, settings, spec)
    made = result.attempts[0].make
    assert any(r.endswith("(too deep)") for r in made.removed), made.removed
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    wt = Path(result.worktree)
    owners = {os.lstat(p).st_uid for p in wt.rglob("*") if ".git" not in p.parts}
    assert owners == {0}
    assert not list(wt.rglob("evil"))


ENCODING = """
pathlib.Path(".gitattributes").write_text("*.py working-tree-encoding=NO-SUCH-ENC\\n")
pathlib.Path("slugify.py").write_text(COMPLETE)
"""

ATTRIBUTES = """
pathlib.Path(".gitattributes").write_text("tests/*.py eol=crlf\\n")
pathlib.Path("slugify.py").write_text(COMPLETE)
"""


async def test_what_git_refuses_to_commit_is_the_attempts_failure(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    spec = hostile(demo_repo, write_agent(tmp_path, ENCODING), DEFAULT_SANDBOX["mode"])
    spec["verify"][1]["diff_scope"]["allow"].append(".gitattributes")
    async with build_worker(client, settings):
        result = await run(client, settings, spec)
        tries = [
            ev.activity_task_started_event_attributes.attempt
            async for ev in client.get_workflow_handle(
                f"task-{result.task_id}"
            ).fetch_history_events()
            if ev.HasField("activity_task_started_event_attributes")
        ]
    made = result.attempts[0].make
    assert made.not_committed.startswith("git could not commit the attempt: "), made
    gate = result.attempts[0].verdict.gates[0]
    assert (gate.name, gate.passed) == ("commit", False)
    assert max(tries) == 1  # no step was retried: the agent ran once
    assert result.state == TaskState.BUDGET_EXCEEDED, result.reason


async def test_an_attempt_may_not_change_git_attributes(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    """Attributes change what a checkout holds: the gates would judge other bytes."""
    spec = hostile(demo_repo, write_agent(tmp_path, ATTRIBUTES), DEFAULT_SANDBOX["mode"])
    spec["verify"][1]["diff_scope"]["allow"].append(".gitattributes")
    async with build_worker(client, settings):
        result = await run(client, settings, spec)
    gate = result.attempts[0].verdict.gates[0]
    assert (gate.name, gate.passed) == ("attributes", False)
    assert gate.evidence.detail == "the attempt changes .gitattributes"
