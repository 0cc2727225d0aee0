"""Every activity heartbeats while it runs, so a killed worker is noticed in seconds.

Without a heartbeat the server learns that a worker died only when the
activity's start-to-close timeout expires: two minutes of a task standing
still for a merge or a summary that took milliseconds. This interceptor beats
once a second around every activity (long ones also beat themselves), and the
workflows give every activity a heartbeat timeout of a few seconds.
"""

from __future__ import annotations

from typing import Any

from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from activities.host.proc import heartbeating


class Liveness(Interceptor):
    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Beating(next)


class _Beating(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        return await heartbeating(super().execute_activity(input))
