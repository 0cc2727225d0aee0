"""Secrets stay secret on a real server: encrypted payloads in the history, read back
through the codec endpoint, and a planted secret that appears nowhere. The codec
endpoint's own rules and redaction are in tests/unit/test_secrets.py."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shlex
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from activities.host.sandbox import check_credentials
from loop.codec import KEY_ENV, EncryptionCodec, data_converter, load_key, make_server
from loop.contracts import TaskSpec, TaskState
from loop.devserver import port_busy, temporal_binary
from loop.errors import BadInput
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.agents import write_agent
from tests.support.host import LEVELS
from tests.support.net import free_port
from tests.support.repos import ROOT, make_demo_repo
from tests.support.tasks import result_of, task
from worker import build_worker

pytestmark = pytest.mark.timeout(120)
MARKER = "PLANTED-GOAL-MARKER-7d1f"
TOKEN = "codec-token-for-tests"


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "codec.key"
    path.write_text(os.urandom(32).hex())
    return path


async def temporal(client: Client, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        str(temporal_binary()),
        *args,
        "--address",
        client.service_client.config.target_host,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_history_is_ciphertext_and_the_codec_server_reads_it(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, key_file: Path
):
    sealed_client = await Client.connect(
        client.service_client.config.target_host,
        data_converter=data_converter({KEY_ENV: str(key_file)}),
    )
    agent = write_agent(tmp_path, 'pathlib.Path("slugify.py").write_text(COMPLETE)\n')
    good = TaskSpec.model_validate(task(demo_repo, agent, goal=f"fix slugify {MARKER}"))
    bad = TaskSpec.model_validate(task(tmp_path / "missing-repo", agent))
    async with build_worker(sealed_client, settings):
        handle, _ = await start_task(sealed_client, good, settings.task_queue)
        assert (await result_of(handle)).state == TaskState.DONE_WITH_EVIDENCE
        failing, _ = await start_task(sealed_client, bad, settings.task_queue)
        assert (await result_of(failing)).state == TaskState.BLOCKED

    shown = await temporal(
        client, "workflow", "show", "--workflow-id", handle.id, "--output", "json"
    )
    assert MARKER not in shown and "slugify" not in shown
    assert base64.b64encode(b"binary/encrypted").decode() in shown
    failed = await temporal(
        client, "workflow", "show", "--workflow-id", failing.id, "--output", "json"
    )
    assert "Encoded failure" in failed and "missing-repo" not in failed

    server = make_server(
        EncryptionCodec(load_key(key_file)),
        host="127.0.0.1",
        port=0,
        token=TOKEN,
        ui_origin="http://localhost:8233",
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        decoded = await temporal(
            client,
            "workflow",
            "show",
            "--workflow-id",
            handle.id,
            "--output",
            "json",
            "--codec-endpoint",
            endpoint,
            "--codec-auth",
            f"Bearer {TOKEN}",
        )
    finally:
        server.shutdown()
    assert MARKER in payload_text(decoded)
    assert MARKER not in payload_text(shown)


async def test_without_the_key_the_cli_says_so_in_one_line(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, key_file: Path
):
    """The worker has the key, the CLI does not: one line naming the variable, exit 2."""
    sealed = await Client.connect(
        client.service_client.config.target_host,
        data_converter=data_converter({KEY_ENV: str(key_file)}),
    )
    agent = write_agent(tmp_path, 'pathlib.Path("slugify.py").write_text(COMPLETE)\n')
    spec = TaskSpec.model_validate(task(demo_repo, agent))
    async with build_worker(sealed, settings):
        handle, _ = await start_task(sealed, spec, settings.task_queue)
        await result_of(handle)
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    env["TEMPORAL_ADDRESS"] = client.service_client.config.target_host
    loop = str(Path(sys.executable).parent / "loop")
    for command in (["status", spec.id], ["trace", spec.id]):
        proc = await asyncio.create_subprocess_exec(
            loop, *command, env=env, cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await proc.communicate()
        assert proc.returncode == 2, (command, out, err)
        assert err.decode() == (
            "error: the payloads are encrypted: set LOOP_CODEC_KEY_FILE to the key file "
            "the worker uses\n"
        ), command


def payload_text(shown: str) -> str:
    """Every payload's data in a `temporal workflow show --output json`, decoded from base64."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "data" and isinstance(v, str):
                    found.append(base64.b64decode(v).decode(errors="replace"))
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(json.loads(shown))
    return "\n".join(found)


LEAKY = """
print(dict(os.environ))
pathlib.Path(os.environ["LOOP_OUTPUT_FILE"]).write_text(
    "done " + os.environ.get("GITHUB_TOKEN", "") + " sk-abcdefghijklmnopqrstuv")
"""


async def test_a_planted_secret_appears_nowhere_even_when_the_agent_prints_it(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path, monkeypatch, capfd
):
    planted = "ghp_PLANTEDplantedPLANTED0123456789ab"
    monkeypatch.setenv("GITHUB_TOKEN", planted)
    agent = write_agent(tmp_path, LEAKY)
    spec = task(demo_repo, agent, budget={"max_attempts": 1}, approval_timeout=1)
    spec["sandbox"] = {"mode": "basic", "env": ["GITHUB_TOKEN"]}  # passed through on purpose
    async with build_worker(client, settings):
        handle, _ = await start_task(client, TaskSpec.model_validate(spec), settings.task_queue)
        result = await result_of(handle)
    assert result.state == TaskState.BUDGET_EXCEEDED
    assert "[redacted]" in result.attempts[0].make.claim  # the agent did print it
    assert planted not in result.model_dump_json()
    assert planted not in (await handle.fetch_history()).to_json()
    # Everything the worker wrote is redacted; the agent's own folders (its output folder
    # and HOME, where it put what it was given on purpose) are its own, never copied as-is.
    own = {"agent", "home"}
    for path in settings.home.rglob("*"):
        if path.is_file() and not own & set(path.relative_to(settings.home).parts[1:4]):
            assert planted not in path.read_text(errors="replace"), path
    claim = settings.runs / spec["id"] / "attempt-1" / "claim.md"
    assert "[redacted]" in claim.read_text() and planted not in claim.read_text()
    out, err = capfd.readouterr()
    assert planted not in out + err


READS_THE_KEYS = """
for name in ("codec.key", "answer.key"):
    try:
        print(name, open(os.path.join(KEYS, name)).read())
    except OSError as e:
        print(name, "unreadable:", e.strerror)
pathlib.Path("slugify.py").write_text(COMPLETE)
out.write_text("fixed")
"""


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A folder in /tmp that anyone may search (``mkdir /tmp/loop``), unlike pytest's 0700
    ones: under those the sandbox hides everything anyway, which hid the problem."""
    folder = Path(tempfile.mkdtemp(prefix="loop-user-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


KEY_PLACES = ("loop-home", "tmp", "home", "repo")
"""Where a person may keep the key files: in LOOP_HOME (hidden), in a folder of /tmp
(private in every run), under $HOME (hidden in strict, shown in basic), inside the
repository (hidden from a task's clone)."""


@pytest.fixture
def keys_in(open_tmp: Path) -> Iterator[Callable[[str], Path]]:
    """Makes a folder for the key files in a place (removed afterwards)."""
    made: list[Path] = []

    def make(place: str) -> Path:
        tops = {"loop-home": "home", "tmp": "", "repo": "repo"}
        top = Path.home() if place == "home" else open_tmp / tops[place]
        folder = top / f"loop-keys-{os.urandom(3).hex()}"
        folder.mkdir(parents=True, mode=0o755)
        folder.chmod(0o755)
        made.append(folder)
        return folder

    yield make
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("place", KEY_PLACES)
@pytest.mark.parametrize("mode", LEVELS)
async def test_a_new_users_setup_in_tmp_runs_and_shows_no_key(
    client: Client,
    open_tmp: Path,
    keys_in: Callable[[str], Path],
    mode: str,
    place: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LOOP_HOME under /tmp, the codec key and the answer key in each place a person may
    keep them, the agent a ``sh -c`` line passed ANTHROPIC_* with a loopback endpoint
    allowed (the README's Claude Code setup): every task once ended BLOCKED in explore's
    probe of the agent's programs (``cover /tmp/…/codec.key: No such file or
    directory``). Now it runs, encrypted, and the agent, reading the key files by name,
    finds nothing."""
    home = open_tmp / "home"
    repo = make_demo_repo(open_tmp / "repo")
    (repo / ".git" / "info" / "exclude").write_text("loop-keys-*\n")
    key_folder = keys_in(place)
    codec_key, answer_key = key_folder / "codec.key", key_folder / "answer.key"
    codec_key.write_text(os.urandom(32).hex())
    answer_key.write_text(os.urandom(32).hex())
    for key in (codec_key, answer_key):
        key.chmod(0o644)  # readable by anyone: only the sandbox keeps it out
    monkeypatch.setenv(KEY_ENV, str(codec_key))
    monkeypatch.setenv("LOOP_ANSWER_KEY_FILE", str(answer_key))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-not-a-real-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/")
    settings = Settings.from_env({"LOOP_HOME": str(home), KEY_ENV: str(codec_key)})
    settings.task_queue = f"keys-{mode}-{place}"
    agent = write_agent(open_tmp, f"KEYS = {str(key_folder)!r}\n{READS_THE_KEYS}")
    sandbox = {
        "mode": mode,
        "env": ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"],
        "allow_hosts": ["127.0.0.1:9"],
    }
    spec = task(repo, ["sh", "-c", shlex.join(agent)], sandbox=sandbox)
    sealed = await Client.connect(
        client.service_client.config.target_host, data_converter=data_converter()
    )
    async with build_worker(sealed, settings):
        handle, _ = await start_task(sealed, TaskSpec.model_validate(spec), settings.task_queue)
        result = await result_of(handle)
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    log = (settings.runs / spec["id"] / "attempt-1" / "agent.log").read_text()
    assert "codec.key unreadable" in log and "answer.key unreadable" in log, log
    for key in (codec_key, answer_key):
        assert key.read_text() not in log
    shown = await temporal(client, "workflow", "show", "--workflow-id", handle.id)
    assert "slugify" not in shown  # the worker sealed its payloads with that key


def hard_linked(folder: Path) -> Path:
    key = folder / "codec.key"
    key.write_text(os.urandom(32).hex())
    os.link(key, folder / "copy-of-codec.key")
    return key


LOOP = str(Path(sys.executable).parent / "loop")


@pytest.mark.parametrize(
    "command", [[sys.executable, "worker.py", "--dev"], [LOOP, "demo"]], ids=["worker", "demo"]
)
async def test_a_key_a_sandbox_cannot_keep_out_refuses_the_worker_start(
    open_tmp: Path, command: list[str]
) -> None:
    """A key file with a second name (a hard link) would show through that name; the
    worker (``loop worker``, ``worker.py``, the demo's own) refuses to start, in one line
    with the fix, before it starts a server or prepares anything."""
    key = hard_linked(open_tmp)
    port = free_port()
    env = {
        **os.environ,
        KEY_ENV: str(key),
        "LOOP_HOME": str(open_tmp / "home"),
        "TEMPORAL_ADDRESS": f"127.0.0.1:{port}",
    }
    proc = await asyncio.create_subprocess_exec(
        *command, env=env, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 2, (out, err)
    assert err.decode() == (
        f"error: {KEY_ENV} {key} has 2 names (hard links): a sandbox covers one path and "
        "another name would show it; keep it in a file of its own (copy it to a new file, "
        "use that one, remove the old names)\n"
    )
    assert not port_busy("127.0.0.1", port)
    assert not (open_tmp / "home" / "temporal.db").exists()
    assert not (open_tmp / "home" / "demo").exists()


def test_a_folder_named_as_a_key_is_refused(tmp_path: Path, monkeypatch) -> None:
    """A folder cannot be covered as a file: refused, naming the variable."""
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", str(tmp_path))
    with pytest.raises(BadInput, match=f"TEMPORAL_TLS_CLIENT_KEY_PATH {tmp_path} is a folder"):
        check_credentials()
