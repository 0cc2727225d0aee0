"""The worker: the one composition root that wires workflows and activities to a client.

Run it as ``python worker.py`` or ``loop worker``. Settings follow the fast-recovery
rules of docs/architecture.md ("Temporal rules"): a short sticky schedule-to-start
timeout (its 10 s default alone adds ~9 s to every crash recovery) and a graceful
drain on Ctrl-C/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import signal
import sys
from collections.abc import Callable
from datetime import timedelta

import structlog
from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker

from activities.budget import BudgetActivities
from activities.discover import DiscoverActivities
from activities.escalate import EscalateActivities
from activities.evaluation import EvalActivities
from activities.explore import ExploreActivities
from activities.host import sandbox
from activities.host.liveness import Liveness
from activities.make import MakeActivities
from activities.model import ModelActivities
from activities.reconcile import reconcile_worktrees, release_leases
from activities.review import ReviewActivities
from activities.summarize import SummarizeActivities
from activities.tools import ToolActivities
from activities.verify import VerifyActivities
from activities.workspace import WorkspaceActivities
from loop import logs
from loop.client import connect, ensure_search_attributes
from loop.devserver import ensure_running
from loop.errors import LoopError
from loop.settings import Settings
from workflows.agent import AgentWorkflow
from workflows.eval import EvalWorkflow
from workflows.ledger import PeriodBudgetWorkflow
from workflows.task import TaskWorkflow
from workflows.triage import TriageWorkflow

STICKY_TIMEOUT = timedelta(seconds=2)
DRAIN = timedelta(seconds=10)


def activities_for(settings: Settings) -> list[Callable]:
    """Every activity implementation, bound to the worker's settings."""
    ws = WorkspaceActivities(settings)
    budget = BudgetActivities()
    make = MakeActivities(settings)
    discover = DiscoverActivities(settings)
    return [
        ws.prepare_workspace,
        ws.commit_branch,
        ws.merge,
        ws.remove_workspace,
        ExploreActivities(settings).explore,
        make.make,
        make.begin_attempt,
        make.end_attempt,
        VerifyActivities(settings).verify,
        SummarizeActivities(settings).summarize,
        EscalateActivities(settings).escalate,
        budget.reserve_budget,
        budget.report_usage,
        budget.closed_holders,
        ModelActivities(settings).model_step,
        ToolActivities(settings).tool_step,
        ReviewActivities(settings).review,
        EvalActivities(settings).write_eval_results,
        discover.discover,
        discover.lookup_tasks,
    ]


WORKFLOWS: list[type] = [
    TaskWorkflow,
    AgentWorkflow,
    PeriodBudgetWorkflow,
    EvalWorkflow,
    TriageWorkflow,
]


def protected_services(client: Client, settings: Settings) -> list[str]:
    """The worker's own network services, which no sandbox may reach whatever a task lists:
    the Temporal frontend, its web UI (the frontend's port + 1000) and the metrics."""
    target = client.service_client.config.target_host
    host, _, port = target.rpartition(":")
    services = [target]
    if port.isdigit():
        services.append(f"{host}:{int(port) + 1000}")
    if settings.metrics_bind:
        services.append(settings.metrics_bind)
    return services


def build_worker(client: Client, settings: Settings, **overrides: object) -> Worker:
    settings.home.mkdir(parents=True, exist_ok=True)
    settings.home.chmod(0o700)  # other users (and every task uid) see nothing in it
    sandbox.protect(protected_services(client, settings))
    options: dict[str, object] = {
        "task_queue": settings.task_queue,
        "workflows": WORKFLOWS,
        "activities": activities_for(settings),
        "sticky_queue_schedule_to_start_timeout": STICKY_TIMEOUT,
        "graceful_shutdown_timeout": DRAIN,
        "max_concurrent_activities": settings.max_activities,
        "max_cached_workflows": settings.workflow_cache,
        "interceptors": [Liveness()],
    }
    options.update(overrides)
    return Worker(client, **options)  # type: ignore[arg-type]


def metrics_runtime(settings: Settings) -> Runtime | None:
    """A Temporal runtime exporting SDK metrics to Prometheus when LOOP_METRICS_BIND is set."""
    if not settings.metrics_bind:
        return None
    return Runtime(
        telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=settings.metrics_bind))
    )


async def serve(settings: Settings, *, address: str | None = None, dev: bool = False) -> None:
    """Serve the task queue until SIGINT/SIGTERM, then drain in-flight activities."""
    log = structlog.get_logger("loop.worker")
    # Every sandbox's connections through the egress proxy cost the worker descriptors:
    # take all the host allows (each run is capped at its share, egress.MAX_CONNECTIONS).
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    server = await ensure_running(settings, address) if dev else None
    try:
        client = await connect(address, runtime=metrics_runtime(settings))
        added = await ensure_search_attributes(client)
        if added:
            log.info("registered search attributes", names=added)
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
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        log.info("sandbox", **await asyncio.to_thread(sandbox.host_record))
        worker = build_worker(client, settings)
        async with worker:
            log.info(
                "worker ready",
                task_queue=settings.task_queue,
                address=client.service_client.config.target_host,
                loop_home=str(settings.home),
            )
            await stop.wait()
            log.info("draining: waiting for running activities", seconds=DRAIN.total_seconds())
    finally:
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
