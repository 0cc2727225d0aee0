"""The Temporal floor's worker: ``bench/floor_workflow.py`` with activities that do only
what ``bench/floor.sh`` does, through Loopwork's own sandbox.

    TEMPORAL_ADDRESS=... LOOP_HOME=... LOOP_TASK_QUEUE=... python bench/floor_worker.py

The steps: a branch worktree of the repository's ``main``; the agent's command through
``run_sandboxed`` (kind ``agent``, the task's sandbox level and default policy, as a
Loopwork task's agent runs), then ``git add -A`` and ``git commit``; a detached worktree
of that commit and each gate's command through ``run_sandboxed`` (kind ``gate``, under
bash, as a Loopwork ``run`` gate); both worktrees and the branch removed and the task's
uid given back. git runs through Loopwork's hardened runner. No task file, no run folder
files, no explore, no reporting, no trace: what is left is Temporal and the isolation,
which is what ``bench/temporal_floor.py`` measures Loopwork against. The worker is set
up as ``worker.py`` sets its own up where it matters to CPU (children seen by pidfd,
the services the sandbox refuses, the egress proxy warmed once it serves); the rest are
the SDK's defaults (eager activity dispatch among them).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from floor_workflow import HOST_QUEUE, FloorInput, FloorTask, Made, Tree
from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from activities.gates import gate_extra_env  # noqa: E402
from activities.host import sandbox  # noqa: E402
from activities.host.git import git  # noqa: E402
from activities.host.proc import began, watch_children_by_pidfd  # noqa: E402
from loop.contracts import SandboxPolicy  # noqa: E402
from loop.settings import Settings  # noqa: E402

AGENT_S = 120
GATE_S = 60


class FloorActivities:
    def __init__(self, home: Path) -> None:
        self.home = home

    def _run(
        self, inp: FloorInput, argv: list[str], kind: str, tree: str, name: str
    ) -> sandbox.SandboxRun:
        policy = SandboxPolicy.model_validate({"mode": inp.mode})
        return sandbox.SandboxRun(
            argv=argv,
            kind=kind,  # type: ignore[arg-type]  # "agent" or "gate"
            policy=policy,
            task_id=inp.task_id,
            home=self.home,
            tree=Path(tree),
            state_dir=self.home / "runs" / inp.task_id,
            name=name,
            limit_s=AGENT_S if kind == "agent" else GATE_S,
            env=gate_extra_env(policy) if kind == "gate" else {},
        )

    @activity.defn(name="floor_prepare")
    async def prepare(self, inp: FloorInput) -> Tree:
        began()
        branch, path = f"floor/{inp.task_id}", f"{inp.work}/{inp.task_id}"
        await git(["worktree", "add", "-q", "-b", branch, path, "main"], inp.repo)
        return Tree(path=path, branch=branch)

    @activity.defn(name="floor_reserve")
    async def reserve(self, inp: FloorInput) -> None:
        """Loopwork's local activity (the period ledger's reservation) does no more for a
        task without a period budget; with ``ledger`` it asks for the ledger as Loopwork
        does, and finds none."""
        if "ledger" in inp.extras:
            handle = activity.client().get_workflow_handle(f"floor-ledger-{inp.task_id}")
            try:
                await handle.execute_update("reserve", inp.task_id)
            except RPCError as e:
                if e.status != RPCStatusCode.NOT_FOUND:
                    raise

    @activity.defn(name="floor_make")
    async def make(self, inp: FloorInput, tree: Tree) -> Made:
        began()
        ran = await sandbox.run_sandboxed(self._run(inp, inp.agent, "agent", tree.path, "agent"))
        if ran.exit_code != 0:
            raise RuntimeError(f"the agent exited {ran.exit_code}: {ran.output_tail[-300:]}")
        await git(["add", "-A"], tree.path)
        await git(["commit", "-q", "-m", "floor: the agent's work"], tree.path)
        return Made(tree=tree, commit=await git(["rev-parse", "HEAD"], tree.path))

    @activity.defn(name="floor_verify")
    async def verify(self, inp: FloorInput, made: Made) -> bool:
        began()
        checkout = f"{made.tree.path}.check"
        await git(["worktree", "add", "-q", "--detach", checkout, made.commit], inp.repo)
        passed = True
        for n, command in enumerate(inp.gates):
            argv = ["bash", "-c", command]
            ran = await sandbox.run_sandboxed(self._run(inp, argv, "gate", checkout, f"gate-{n}"))
            passed = passed and ran.exit_code == 0
        return passed

    @activity.defn(name="floor_finish")
    async def finish(self, inp: FloorInput, made: Made) -> None:
        began()
        for path in (f"{made.tree.path}.check", made.tree.path):
            await git(["worktree", "remove", "--force", path], inp.repo)
        await git(["branch", "-q", "-D", made.tree.branch], inp.repo)
        await asyncio.to_thread(sandbox.release, self.home, inp.task_id)


async def serve() -> None:
    settings = Settings.from_env()
    watch_children_by_pidfd()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    client = await Client.connect(os.environ["TEMPORAL_ADDRESS"])
    settings.home.mkdir(parents=True, exist_ok=True)
    settings.home.chmod(0o700)
    sandbox.protect([client.service_client.config.target_host], settings.home)
    acts = FloorActivities(settings.home)
    steps = [acts.prepare, acts.reserve, acts.make, acts.verify, acts.finish]
    shared = Worker(client, task_queue=settings.task_queue, workflows=[FloorTask], activities=steps)
    # The second queue of the ``host-queue`` variant: its steps, in the same process.
    host = Worker(client, task_queue=HOST_QUEUE.format(settings.task_queue), activities=steps)
    async with shared, host:
        print("worker ready", flush=True)
        warming = asyncio.ensure_future(asyncio.to_thread(sandbox.warm_egress))
        await stop.wait()
        warming.cancel()


if __name__ == "__main__":
    asyncio.run(serve())
