"""A trial of the model gateway, for ``loop doctor``: does it start and answer here.

It starts this process's gateway, attaches a run with a throwaway grant on a loopback
listener and calls it twice, as an agent CLI would: the connectivity check a CLI makes
first, and a model call without the run's token, which must be refused before
anything leaves the host. Nothing is forwarded anywhere.
"""

from __future__ import annotations

import time

import httpx

from activities.host.gateway.grant import Grant
from activities.host.gateway.server import GATEWAY, host_listener


async def trial() -> str:
    """One line: whether the gateway runs here, and how fast it answered."""
    grant = Grant(task_id="doctor", attempt=0, api="openai", upstream="http://127.0.0.1:9", key="-")
    listener = host_listener()
    base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    started = time.monotonic()
    try:
        async with GATEWAY.serving(listener, grant):
            async with httpx.AsyncClient(base_url=base, timeout=5, trust_env=False) as client:
                await client.head("/")
                ms = (time.monotonic() - started) * 1000
                refused = await client.post("/v1/chat/completions", json={"model": "m"})
    except (OSError, httpx.HTTPError) as e:
        return f"does not run here: {type(e).__name__}: {e}"
    if refused.status_code != 401:
        return f"answers, but let a call without its token through ({refused.status_code})"
    return (
        f"runs here (started and answered in {ms:.0f} ms; a call without the run's token "
        "was refused)"
    )
