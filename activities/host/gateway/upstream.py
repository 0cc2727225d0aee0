"""Which upstreams a task file may name for its agent's model calls.

The gateway calls the upstream from the worker, which reaches what no sandbox may: the
Temporal frontend and its other ports, the review page, the codec server. A task that
names one of those as its ``base_url`` is refused before its agent runs, with the same
deny list the egress proxy uses (``sandbox.services``).
"""

from __future__ import annotations

from activities.host.sandbox import egress
from activities.host.sandbox.egress_rules import address_entry


def upstream_refusal(url: str) -> str:
    """Why the worker will not call ``url`` for a sandbox ("" when it may): it is the
    orchestrator or one of the worker's own services (the egress proxy's deny list)."""
    import httpx  # here, not at the top: a new worker starts without it

    parts = httpx.URL(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    deny = set(egress.protected())
    named = address_entry(parts.host, port)
    for entry in [named, *egress.resolve(named)]:
        ip = entry.rpartition(":")[0]
        if entry in deny or address_entry(ip.strip("[]"), 0) in deny:
            return f"{url} is the orchestrator's or one of the worker's services"
    return ""
