"""An agent that floods the model gateway: the worker's memory, and another task meanwhile.

The attack of the red team's report: an agent (a command agent with ``agent.provider``,
sandboxed) opens 32 connections to its gateway at once, each sending a 16 MiB body of
``{},{},…`` (five million dicts, were it parsed), round after round. The red team saw
the worker grow from 124 MB to 12.6 GB and stay there. Here a real worker
(``python worker.py``, a subprocess, on Loopwork's embedded server) runs:

1. a warm-up task that calls its model through the gateway (so the gateway, httpx and
   the meter are loaded), then rests: the **idle** RSS is the median of its VmRSS over
   two seconds;
2. for each way of sending the flood, an attacking task doing ``--rounds`` rounds of 32
   calls; once its first round is done, **another task** (the demo's fix, no model) is
   started on the same worker and runs to its end while the flood goes on (the rounds
   done when it ended are shown: fewer than all, or it did not run meanwhile). The
   worker's **peak** RSS is its VmHWM over the flood (reset first through
   ``/proc/<pid>/clear_refs``, which needs root; else the peak of VmRSS sampled every
   10 ms).

The ways (``--ways``): ``declared`` (a ``content-length`` of 16 MiB: refused on the
head), ``chunked`` (no length: read until it passes ``MAX_BODY`` or the run's bytes in
flight), ``under`` (just under ``MAX_BODY``, declared: read whole, refused for its
values before any is built, or for the bytes in flight), ``deep`` (just under
``MAX_BODY``: half ``[``, half ``]``). The worker's RSS once the flood is over
(``after``) says whether it keeps what it took. Target: peak ≤ idle + 200 MB, every call
refused (413 or 429, never an answer), the other task DONE_WITH_EVIDENCE.

    .venv/bin/python bench/gateway_flood.py [--rounds 5] [--level basic] [--ways ...] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import threading
import time
from pathlib import Path

from common import (
    connect,
    loopwork_server,
    make_demo_repo,
    print_machine,
    print_table,
    script_agent,
    spawn_worker,
    stop_process,
    task_spec,
    temp_home,
    wait_for_log,
)
from temporalio.client import Client

from loop.contracts import TaskSpec, TaskState
from loop.tasks import start_task
from tests.support.gateway import flooding_agent
from tests.support.model_server import ScriptedModel, reply

KEY = "sk-bench-flood-key"
WAYS = ("declared", "chunked", "under", "deep")

CALLING = """
import urllib.request
base, token = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
said = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]}
for _ in range(3):
    request = urllib.request.Request(base + "/chat/completions", data=json.dumps(said).encode(),
        headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=30).read()
pathlib.Path("slugify.py").write_text(FIX)
"""

FIX = """import re


def slugify(text: str) -> str:
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))
"""


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


class Peak:
    """The process's peak RSS from now on: VmHWM reset through ``clear_refs`` (root), and
    VmRSS sampled every 10 ms in a thread, whichever is higher."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.sampled = 0
        self.reset = False
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
            self.reset = True
        except OSError:
            pass
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.sampled = max(self.sampled, status_kib(self.pid, "VmRSS"))

    def kib(self) -> int:
        self._stop.set()
        self._thread.join()
        hwm = status_kib(self.pid, "VmHWM") if self.reset else 0
        return max(self.sampled, hwm)


def spec_for(
    repo: Path, folder: Path, body: str, level: str, url: str, **extra: object
) -> TaskSpec:
    spec = task_spec(repo, script_agent(folder, f"FIX = {FIX!r}\n" + body), **extra)
    spec["agent"] |= {"model": "gpt-4o-mini", "timeout": 600,
                      "provider": {"api": "openai", "base_url": url}}  # fmt: skip
    spec["sandbox"] = {"mode": level} if level != "off" else {"mode": "off",
                                                              "allow_unsafe_off": True}  # fmt: skip
    return TaskSpec.model_validate(spec)


async def rounds_done(path: Path, at_least: int, within: float = 600) -> list[list[object]]:
    deadline = time.monotonic() + within
    while True:
        try:
            rounds = json.loads(path.read_text())
        except (OSError, ValueError):
            rounds = []
        if len(rounds) >= at_least:
            return rounds
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path}: {len(rounds)} rounds after {within} s")
        await asyncio.sleep(0.05)


async def main(args: argparse.Namespace) -> None:
    print_machine("Model gateway under a flood: the worker's RSS, another task meanwhile")
    queue = "flood"
    rows = []
    with temp_home("loop-flood-") as home, ScriptedModel() as model:
        model.script([reply("ok", usage=(100, 10))] * 3)
        folder = home.parent
        repo = make_demo_repo(folder)
        log = folder / "worker.log"
        async with loopwork_server(home) as server:
            client = await connect(server.address)
            worker = spawn_worker(server.address, home, queue, log, OPENAI_API_KEY=KEY)
            try:
                await wait_for_log(log, "worker ready", worker)
                started_rss = status_kib(worker.pid, "VmRSS")
                warm = spec_for(repo, folder, CALLING, args.level, model.url)
                handle, _ = await start_task(client, warm, queue)
                warmed = await handle.result()
                assert warmed.state == TaskState.DONE_WITH_EVIDENCE, warmed.reason
                await asyncio.sleep(1)
                samples = []
                for _ in range(20):
                    samples.append(status_kib(worker.pid, "VmRSS"))
                    await asyncio.sleep(0.1)
                idle = int(statistics.median(samples))
                print(f"worker RSS: {started_rss / 1024:.0f} MB when ready, "
                      f"{idle / 1024:.0f} MB idle after a task through the gateway\n")  # fmt: skip
                for way in args.ways:
                    rows.append(await flood(client, queue, repo, home, model.url, worker.pid,
                                            way, idle, args))  # fmt: skip
            finally:
                stop_process(worker)
    print_table(
        ["way", "rounds x calls", "answers", "idle MB", "peak MB", "peak - idle MB",
         "after MB", "other task", "other task s", "rounds when it ended"], rows,
        title="The worker under the flood (32 connections a round)",
    )  # fmt: skip
    print(f"target: peak - idle <= 200 MB; every call refused; the other task done ({load()})")


async def flood(
    client: Client, queue: str, repo: Path, home: Path, url: str, pid: int, way: str,
    idle: int, args: argparse.Namespace,
) -> list[object]:  # fmt: skip
    """One way of flooding: its rounds, with another task started after the first."""
    folder = home.parent
    body = flooding_agent(way, args.rounds, FIX)
    attacker = spec_for(repo, folder, body, args.level, url, budget={"max_attempts": 1})
    peak = Peak(pid)
    attack, _ = await start_task(client, attacker, queue)
    out = home / "runs" / attacker.id / "attempt-1" / "agent" / "flood.json"
    await rounds_done(out, 1)
    fixing = script_agent(folder, f"pathlib.Path('slugify.py').write_text({FIX!r})\n")
    other = TaskSpec.model_validate(task_spec(repo, fixing))
    t0 = time.monotonic()
    handle, _ = await start_task(client, other, queue)
    done = await handle.result()
    other_s = time.monotonic() - t0
    meanwhile = len(await rounds_done(out, 1))  # rounds done when the other task ended
    rounds = await rounds_done(out, args.rounds)
    await attack.result()
    top = peak.kib()
    await asyncio.sleep(2)
    after = status_kib(pid, "VmRSS")
    answers = collections.Counter(str(s) for r in rounds for s in r)
    said = ", ".join(f"{n} x {s}" for s, n in sorted(answers.items()))
    return [way, f"{len(rounds)} x 32", said, round(idle / 1024), round(top / 1024),
            round((top - idle) / 1024), round(after / 1024), str(done.state),
            round(other_s, 1), f"{meanwhile} of {len(rounds)}"]  # fmt: skip


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of 32 calls per way")
    parser.add_argument("--level", default="basic", choices=["off", "basic", "strict"])
    parser.add_argument("--ways", nargs="+", default=list(WAYS), choices=WAYS)
    parser.add_argument("--quick", action="store_true", help="2 rounds, declared only")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.ways = 2, ["declared"]
    return args


if __name__ == "__main__":
    asyncio.run(main(parse()))
