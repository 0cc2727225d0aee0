"""ping_host: a host says it is alive.

Each worker answers on its host's ping queue with slots of its own, so a task
whose step has waited past ``LOOP_HOST_LOST_AFTER`` for the host can tell a busy
host (it answers) from a lost one (nothing does) in a few seconds.
"""

from __future__ import annotations

import os

from temporalio import activity

from loop.contracts import PING, PingInput, PingResult
from loop.settings import Settings


class PingActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=PING.name)
    async def ping_host(self, inp: PingInput) -> PingResult:
        return PingResult(host=self.settings.host_id, pid=os.getpid())
