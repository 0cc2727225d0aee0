"""Every activity heartbeats while it runs, so a killed worker is noticed in seconds.

Without a heartbeat the server learns that a worker died only when the
activity's start-to-close timeout expires: two minutes of a task standing
still for a merge or a summary that took milliseconds. This interceptor beats
once a second around every activity from its first second on (long ones also beat
themselves; one that ends sooner sends none, sparing the server a request), and the
workflows give every activity a heartbeat timeout of a few seconds. It also
keeps the worker's lease file (``activities.host.leases``), so the host's next
worker fails what this one ran the moment it starts, without waiting for that.
"""

from __future__ import annotations

from typing import Any

from temporalio import activity
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from activities.host.leases import Lease
from activities.host.proc import began, heartbeating


class Liveness(Interceptor):
    def __init__(self, lease: Lease | None = None) -> None:
        self.lease = lease

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Beating(next, self.lease)


class _Beating(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, lease: Lease | None) -> None:
        super().__init__(next)
        self.lease = lease

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        if info.is_local:
            # Bookkeeping in the workflow's own worker: a dead worker's workflow task
            # times out and its next worker runs it again, no heartbeat or lease needed.
            return await super().execute_activity(input)
        began()
        if self.lease is None:
            return await heartbeating(super().execute_activity(input))
        key = self.lease.begin(
            info.task_token, info.workflow_id, info.workflow_run_id, info.activity_type
        )
        try:
            return await heartbeating(super().execute_activity(input))
        finally:
            self.lease.end(key)
