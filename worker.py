"""The worker: the one composition root that wires workflows and activities to a client.

Run it as ``python worker.py`` or ``loop worker``. Settings follow the fast-recovery
rules of docs/architecture.md ("Temporal rules"): a short sticky schedule-to-start
timeout (its 10 s default alone adds ~9 s to every crash recovery) and a graceful
drain on Ctrl-C/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import hashlib
import resource
import signal
import sys
from collections.abc import Callable
from datetime import timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

import structlog
from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities.answers import AnswerActivities, AnswerChecks
from activities.budget import BudgetActivities
from activities.candidates import CandidateActivities
from activities.discover import DiscoverActivities
from activities.environment import EnvironmentActivities
from activities.escalate import EscalateActivities
from activities.evaluation import EvalActivities
from activities.explore import ExploreActivities
from activities.github_ci import GitHubCiActivities
from activities.github_hooks import GitHubHookActivities
from activities.host import sandbox
from activities.host.leases import Lease, fail_orphans
from activities.host.liveness import Liveness
from activities.host.proc import watch_children_by_pidfd
from activities.make import MakeActivities
from activities.mining import MiningActivities
from activities.model import ModelActivities
from activities.ping import PingActivities
from activities.pull_request import PullRequestActivities
from activities.reconcile import reconcile_worktrees, release_leases
from activities.review import ReviewActivities
from activities.slack import SlackActivities
from activities.summarize import SummarizeActivities
from activities.tools import ToolActivities
from activities.verify import VerifyActivities
from activities.workspace import WorkspaceActivities
from loop import logs, tracing
from loop.client import connect, ensure_search_attributes
from loop.contracts import SandboxLevel, ping_queue
from loop.devserver import ensure_running
from loop.errors import LoopError
from loop.settings import Settings
from workflows.agent import AgentWorkflow
from workflows.candidate import CandidateWorkflow
from workflows.eval import EvalWorkflow
from workflows.hooks import GitHubDeliveryWorkflow
from workflows.ledger import PeriodBudgetWorkflow
from workflows.mine import MineWorkflow
from workflows.slack_answer import SlackAnswerWorkflow
from workflows.task import TaskWorkflow
from workflows.tasks_hook import TaskHookWorkflow
from workflows.triage import TriageWorkflow

STICKY_TIMEOUT = timedelta(seconds=2)
DRAIN = timedelta(seconds=10)
BEAT_SENT_EVERY = timedelta(seconds=2)
"""How often a long step's latest heartbeat reaches the server (the SDK's throttle, by
default 80% of the 5 s heartbeat timeout): its details are the progress ``loop status``
and the review page show, so they move every 2 s, not every 4."""
ROOT = Path(__file__).resolve().parent


@functools.cache
def build_id() -> str:
    """What this worker's workflows are, for the history of each workflow task: the SDK's
    version and a digest of the workflow code and everything it imports of Loopwork's
    (``workflows`` and ``loop``). Given, not left to the SDK, whose default hashes the
    code of every loaded module at each start (~0.12 s of a worker's start)."""
    digest = hashlib.sha256(version("temporalio").encode())
    for package in ("workflows", "loop"):
        for path in sorted((ROOT / package).rglob("*.py")):
            digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0")
            digest.update(path.read_bytes())
    return f"loopwork-{digest.hexdigest()[:16]}"


def activities_for(settings: Settings) -> list[Callable]:
    """Every activity implementation, bound to the worker's settings."""
    ping = PingActivities(settings).ping_host
    return [*shared_activities(settings), *host_activities(settings), ping]


def shared_activities(settings: Settings) -> list[Callable]:
    """What any host may run: preparing a worktree (the host that does owns the task's
    worktree from then on), budgets, escalations, triage, eval results."""
    budget = BudgetActivities()
    discover = DiscoverActivities(settings)
    hooks = GitHubHookActivities(settings)
    slack = SlackActivities(settings)
    return [
        ExploreActivities(settings).prepare_and_explore,
        EscalateActivities(settings).escalate,
        AnswerActivities(settings).check_answer,
        budget.reserve_budget,
        budget.report_usage,
        budget.closed_holders,
        EvalActivities(settings).write_eval_results,
        discover.discover,
        discover.lookup_tasks,
        discover.hook_issue_item,
        hooks.github_hook_item,
        hooks.cancel_task,
        hooks.github_permission,
        hooks.github_comment,
        hooks.hook_answer,
        hooks.github_review_comments,
        hooks.github_pull_head,
        GitHubCiActivities().github_ci_item,
        slack.slack_post,
        slack.slack_close,
        hooks.github_status_comment,
        hooks.github_commit_status,
    ]


def host_activities(settings: Settings) -> list[Callable]:
    """What only the host holding a task's worktree (and its run folder) may run; and
    preparing a worktree, which any host may (a task's first) and a host must for a
    task whose candidates work there (the first one's)."""
    ws = WorkspaceActivities(settings)
    make = MakeActivities(settings)
    mining = MiningActivities(settings)
    candidates = CandidateActivities(settings)
    return [
        ws.prepare_workspace,
        ws.commit_branch,
        ws.merge,
        ws.remove_workspace,
        ExploreActivities(settings).explore,
        EnvironmentActivities(settings).build_environment,
        make.make,
        make.begin_attempt,
        make.end_attempt,
        VerifyActivities(settings).verify,
        SummarizeActivities(settings).summarize,
        ModelActivities(settings).model_step,
        ToolActivities(settings).tool_step,
        ReviewActivities(settings).review,
        PullRequestActivities(settings).open_pull_request,
        mining.list_fixes,
        mining.validate_fix,
        mining.write_mined,
        candidates.stop_candidates,
        candidates.close_candidate,
    ]


WORKFLOWS: list[type] = [
    TaskWorkflow,
    CandidateWorkflow,
    AgentWorkflow,
    PeriodBudgetWorkflow,
    EvalWorkflow,
    MineWorkflow,
    TriageWorkflow,
    GitHubDeliveryWorkflow,
    TaskHookWorkflow,
    SlackAnswerWorkflow,
]


class StartingSandbox(SandboxedWorkflowRunner):
    """The SDK's workflow sandbox, without the check it makes at each worker start that
    every workflow's module imports in it (~15 ms a workflow, on the critical path of a
    worker that replaces a dead one). Each run imports it there anyway, and
    tests/unit/test_worker.py makes the SDK's own check for every workflow here."""

    def prepare_workflow(self, defn: Any) -> None:
        return None


def protected_services(client: Client, settings: Settings) -> list[str]:
    """Where the orchestrator listens, which no sandbox may reach whatever a task lists:
    the Temporal frontend, its web UI (+1000) and HTTP API (+10, as ``loop dev`` pins it),
    the metrics; the sandbox adds every other port of the server's process and of
    Loopwork's servers (``activities.host.sandbox.services``)."""
    target = client.service_client.config.target_host
    host, _, port = target.rpartition(":")
    services = [target]
    if port.isdigit():
        services += [f"{host}:{int(port) + 1000}", f"{host}:{int(port) + 10}"]
    if settings.metrics_bind:
        services.append(settings.metrics_bind)
    return services


class HostWorkers:
    """One worker process's three Temporal workers, run and stopped together:

    - the shared queue (``LOOP_TASK_QUEUE``): every workflow, and every activity, so a
      task from before hosts (its steps on the shared queue) still runs;
    - this host's queue (``<queue>@<host id>``): the steps of the tasks whose worktree
      is here;
    - this host's ping queue, with slots of its own, so a busy host still answers.
    """

    def __init__(self, workers: list[Worker], lease: Lease) -> None:
        self.workers = workers
        self.lease = lease

    async def __aenter__(self) -> HostWorkers:
        async with contextlib.AsyncExitStack() as stack:
            for w in self.workers:
                await stack.enter_async_context(w)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()
        self.lease.close()
        await asyncio.to_thread(tracing.flush)  # the last attempts' spans leave with them

    @property
    def is_running(self) -> bool:
        return all(w.is_running for w in self.workers)


def build_worker(client: Client, settings: Settings, **overrides: object) -> HostWorkers:
    settings.home.mkdir(parents=True, exist_ok=True)
    settings.home.chmod(0o700)  # other users (and every task uid) see nothing in it
    sandbox.protect(protected_services(client, settings), settings.home)
    lease = Lease(settings.workers)
    traced = tracing.worker_interceptors(list(client.config()["interceptors"]))
    common: dict[str, object] = {
        "build_id": build_id(),
        "graceful_shutdown_timeout": DRAIN,
        "max_heartbeat_throttle_interval": BEAT_SENT_EVERY,
        "max_concurrent_activities": settings.max_activities,
        "interceptors": [*traced, Liveness(lease)],
    }
    shared: dict[str, object] = {
        **common,
        "task_queue": settings.task_queue,
        "workflows": WORKFLOWS,
        "workflow_runner": StartingSandbox(),
        # Answer updates' signatures are checked in their validators, before history.
        "interceptors": [*traced, Liveness(lease), AnswerChecks(settings)],
        "activities": activities_for(settings),
        "sticky_queue_schedule_to_start_timeout": STICKY_TIMEOUT,
        "max_cached_workflows": settings.workflow_cache,
    }
    shared.update(overrides)
    here = {**common, "task_queue": settings.host_queue, "activities": host_activities(settings)}
    ping = PingActivities(settings).ping_host
    answers = {
        "task_queue": ping_queue(settings.host_queue),
        "activities": [ping],
        "build_id": build_id(),
    }
    workers = [Worker(client, **shared), Worker(client, **here), Worker(client, **answers)]  # type: ignore[arg-type]  # kwargs dicts
    return HostWorkers(workers, lease)


def metrics_runtime(settings: Settings) -> Runtime | None:
    """A Temporal runtime exporting SDK metrics to Prometheus when LOOP_METRICS_BIND is set."""
    if not settings.metrics_bind:
        return None
    return Runtime(
        telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=settings.metrics_bind))
    )


async def serve(
    settings: Settings,
    *,
    address: str | None = None,
    namespace: str | None = None,
    dev: bool = False,
) -> None:
    """Serve the task queue until SIGINT/SIGTERM, then drain in-flight activities."""
    log = structlog.get_logger("loop.worker")
    watch_children_by_pidfd()
    # Every sandbox's connections through the egress proxy cost the worker descriptors:
    # take all the host allows (each run is capped at its share, egress.MAX_CONNECTIONS).
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    # Caught from the first moment: a signal during start-up (the metrics endpoint
    # already answers) lets the start finish and then drains, as at any later time.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await asyncio.to_thread(sandbox.check_credentials)  # before anything starts
    server = await ensure_running(settings, address, namespace) if dev else None
    try:
        client = await connect(address, namespace, runtime=metrics_runtime(settings))
        added = await ensure_search_attributes(client)
        if added:
            log.info("registered search attributes", names=added)
        worker = build_worker(client, settings)
        async with worker:
            # Polling first, then what dead workers of this host ran is failed: its
            # retries start now and find this worker waiting (docs: "Recovery").
            failed = await fail_orphans(client, settings.workers)
            if failed:
                log.info(
                    "failed what dead workers of this host ran, so it is retried now",
                    activities=[f"{o.workflow_id}:{o.activity}" for o in failed],
                )
            log.info(
                "worker ready",
                task_queue=settings.task_queue,
                host=settings.host_id,
                host_queue=settings.host_queue,
                address=client.service_client.config.target_host,
                loop_home=str(settings.home),
            )
            found = await reconcile_worktrees(client, settings)
            log.info(
                "worktrees reconciled",
                running=len(found.running),
                removed=found.removed,
                kept=len(found.kept),
            )
            released = await release_leases(client, settings)
            if released:
                log.info("task uids released", tasks=released)
            host = await asyncio.to_thread(sandbox.inspect_host)
            log.info("sandbox", **await asyncio.to_thread(sandbox.host_record))
            # The egress proxy before the first agent needs it, off the event loop.
            warming = (
                asyncio.ensure_future(asyncio.to_thread(sandbox.warm_egress))
                if host.level != SandboxLevel.OFF
                else None
            )
            await stop.wait()
            if warming is not None and not warming.done():
                warming.cancel()
            log.info("draining: waiting for running activities", seconds=DRAIN.total_seconds())
    finally:
        await asyncio.to_thread(tracing.shutdown)
        if server is not None:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="worker.py", description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="Temporal address (default: TEMPORAL_ADDRESS or config)")
    parser.add_argument(
        "--dev", action="store_true", help="start the embedded dev server when none answers"
    )
    args = parser.parse_args(argv)
    logs.configure()
    try:
        asyncio.run(serve(Settings.from_env(), address=args.address, dev=args.dev))
    except LoopError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
