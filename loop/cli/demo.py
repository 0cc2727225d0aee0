"""``loop demo``: the whole loop, offline, in under a minute.

A real bug in a small repository made under ``LOOP_HOME/demo``, a scripted
(clearly labelled, not an AI) agent that gets it wrong on attempt 1 and right
on attempt 2 after reading the feedback file, real gates, a real Temporal
server and worker: started here unless they already run.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sys
import time
from pathlib import Path

import yaml
from rich.console import Console

from loop.cli.render import event_line, print_result
from loop.client import connect, ensure_search_attributes, ui_url
from loop.contracts import SandboxLevel, TaskState
from loop.devserver import ensure_running
from loop.errors import LoopError
from loop.hardened import answers, git
from loop.loaders import load_task
from loop.settings import Settings
from loop.tasks import follow, has_worker, start_task

TASK_ID = "demo-slugify"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "demo"


def demo_task(repo: Path, agent: Path, sandbox: dict[str, object]) -> dict[str, object]:
    python = sys.executable
    return {
        "id": TASK_ID,
        "goal": 'slugify("Hello, World!") must return "hello-world", and runs of spaces or '
        "punctuation must become a single hyphen; the existing tests must pass.",
        "repo": str(repo),
        "base": "main",
        "agent": {"backend": "command", "command": [python, str(agent)], "timeout": 60},
        "verify": [
            {"name": "tests", "run": f"{python} -m unittest discover -s tests -t .", "timeout": 60},
            {
                "name": "scope",
                "diff_scope": {
                    "allow": ["slugify.py", "tests/**"],
                    "protect": ["tests/test_slugify.py"],
                },
            },
            {"name": "keep-tests", "no_removed_tests": True},
        ],
        "budget": {"max_attempts": 3, "max_seconds": 300},
        "autonomy": "report",
        "sandbox": sandbox,
    }


def demo_sandbox() -> tuple[dict[str, object], str]:
    """The default sandbox, or, on a host that cannot give it (a worker that is not root),
    mode off with the reason: the demo's agent is a script of ours, not an AI."""
    from activities.host.sandbox import inspect_host  # the probe runs a trial sandbox

    missing = inspect_host().unavailable(SandboxLevel.BASIC)
    if missing:
        return {"mode": SandboxLevel.OFF.value}, missing.split(";")[0]
    return {"mode": SandboxLevel.BASIC.value}, ""


def make_repo(home: Path, sandbox: dict[str, object]) -> Path:
    """A fresh demo repository each run, so the demo always starts from the bug."""
    if not (EXAMPLES / "repo").is_dir():
        raise LoopError(f"demo files not found at {EXAMPLES}; run the demo from a source checkout")
    folder = home / "demo"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(home / "worktrees" / TASK_ID, ignore_errors=True)
    shutil.rmtree(home / "runs" / TASK_ID, ignore_errors=True)
    repo = folder / "repo"
    shutil.copytree(EXAMPLES / "repo", repo)
    identity = ("-c", "user.name=Loopwork demo", "-c", "user.email=demo@localhost")
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["commit", "-q", "-m", "slugify with a bug"],
    ):
        done = git.run_sync(args, repo, config=identity)
        if done.code != 0:
            raise LoopError(f"git {args[0]} in {repo} failed: {done.err.strip()}")
    task_file = folder / "task.yaml"
    task = demo_task(repo, EXAMPLES / "agent.py", sandbox)
    task_file.write_text(yaml.safe_dump(task, sort_keys=False))
    return task_file


def review_page(home: Path, task_id: str) -> str:
    """Where the review page shows the task: at the address a running ``loop ui`` of this
    LOOP_HOME bound (it registers it), else how to start one."""
    from loop.services import registered
    from loop.ui.config import Bind

    pages = sorted(s.address for s in registered(home) if s.kind == "ui")
    if pages:
        host, _, port = pages[0].rpartition(":")
        return f"Review page: {Bind(host, int(port)).url()}tasks/{task_id}"
    return (
        "Review page: start `loop ui` (same LOOP_HOME and Temporal address) and open "
        f"/tasks/{task_id} at the address it prints"
    )


async def run_demo(
    settings: Settings,
    address: str | None,
    out: Console,
    *,
    keep: bool = False,
    namespace: str | None = None,
) -> int:
    import worker as worker_module  # the composition root; imported only when needed
    from activities.host.sandbox import check_credentials

    started_at = time.monotonic()
    check_credentials()  # its worker's sandboxes must keep them out, as any worker's
    if settings.answer_key_file is None and answers.create_key(settings.home / answers.KEY_NAME):
        out.print(f"answer key made: {settings.home / answers.KEY_NAME}", markup=False)
    sandbox, why = demo_sandbox()
    task_file = make_repo(settings.home, sandbox)
    spec = load_task(task_file)
    out.print(f"demo repository: {spec.repo} (task file {task_file})", markup=False)
    if why:
        out.print(f"{why}: the demo's scripted agent runs unconfined (sandbox: off)", markup=False)
    server = await ensure_running(settings, address, namespace)
    if server is not None:
        out.print(f"started the embedded Temporal server at {server.address}")
    try:
        client = await connect(server.address if server else address, namespace)
        await ensure_search_attributes(client)
        async with contextlib.AsyncExitStack() as stack:
            own = not await has_worker(client, settings.task_queue)
            if own:
                await stack.enter_async_context(worker_module.build_worker(client, settings))
                out.print("started an in-process worker")
            # Its own worker shares the client: the first workflow task comes with the start.
            handle, fresh = await start_task(
                client, spec, settings.task_queue, rerun=True, eager=own
            )
            if not fresh:
                await handle.terminate("a new demo run replaces it")
                handle, _ = await start_task(
                    client, spec, settings.task_queue, rerun=True, eager=own
                )
            out.print(f"started {handle.id}; the agent is a SCRIPTED stand-in, not an AI\n")
            result, _ = await follow(
                handle, lambda ev: out.print(event_line(spec.id, ev), markup=False)
            )
        print_result(out, result)
        out.print(f"\nTemporal UI: {ui_url(client, handle.id)}", markup=False)
        out.print(
            f"{review_page(settings.home, spec.id)} (the attempts, each gate's evidence, "
            "the diff; it answers waiting tasks)",
            markup=False,
        )
        out.print(f"demo took {time.monotonic() - started_at:.1f} s")
        example = EXAMPLES.parent / "claude-code.yaml"
        out.print(
            f"a real agent on the same bug: loop start {example} --repo {spec.repo} --wait "
            "(the other examples beside it: aider, codex, openai)",
            markup=False,
        )
        if server is not None and keep:
            out.print(f"the server at {server.address} keeps running; Ctrl-C stops it")
            await _until_interrupted()
        elif server is not None:
            out.print(
                "the demo's server stops now; its history stays in "
                f"{settings.db}: run `loop dev` (same LOOP_HOME) to open the link above, "
                "or `loop demo --keep` next time",
                markup=False,
            )
        return 0 if result.state == TaskState.DONE_WITH_EVIDENCE else 1
    finally:
        if server is not None:
            server.stop()


async def _until_interrupted() -> None:
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
