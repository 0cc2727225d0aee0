"""The allowlist inside the egress proxy (proxy.py), one decision per connection.

The worker relays each connection a sandbox opens to the proxy's unix socket and
writes a PROXY protocol line first whose "source address" is the run's ticket:
a random name the sandbox never sees, so it cannot claim another run's
allowlist. The ticket file (written by the worker, in a folder only the worker
can read) says whose run it is and what it may reach; ``egress_rules`` decides.
A refusal answers 403 with the reason, and is appended to ``<ticket>.refused``
for the run's record and logged with the task and the destination.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from proxy.common.utils import text_
from proxy.http.exception import HttpRequestRejected
from proxy.http.parser import HttpParser
from proxy.http.proxy import HttpProxyBasePlugin

from activities.host.sandbox.egress_rules import Refused, choose

TICKETS = Path(os.environ.get("LOOP_EGRESS_DIR", "/nonexistent"))


def _ticket(name: str) -> dict[str, Any] | None:
    if not name or not name.isalnum():
        return None
    try:
        data = json.loads((TICKETS / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _addresses(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except OSError:
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class Allowlist(HttpProxyBasePlugin):
    """Refuses every destination its run's ticket does not allow."""

    chosen: str | None = None

    def before_upstream_connection(self, request: HttpParser) -> HttpParser | None:
        source = request.protocol.source if request.protocol else None
        name = text_(source[0]) if source else ""
        host = text_(request.host or b"")
        port = int(request.port or 0)
        ticket = _ticket(name)
        try:
            if ticket is None:
                raise Refused("no such run: the sandbox's connection was not made by Loopwork")
            self.chosen = choose(
                host, port, _addresses(host, port), ticket.get("allow", []), ticket.get("deny", [])
            )
        except Refused as e:
            self._record(name, ticket, host, port, str(e))
            raise HttpRequestRejected(
                status_code=403,
                reason=b"Forbidden",
                body=f"refused by Loopwork's egress proxy: {e}\n".encode(),
            ) from None
        return request

    def resolve_dns(self, host: str, port: int) -> tuple[str | None, Any]:
        return self.chosen, None

    def _record(self, name: str, ticket: dict[str, Any] | None, host: str, port: int, why: str):
        task = (ticket or {}).get("task", "?")
        line = {"task": task, "host": f"{host}:{port}", "reason": why}
        print(f"refused task={task} host={host}:{port}: {why}", file=sys.stderr, flush=True)
        if ticket is not None:
            with (TICKETS / f"{name}.refused").open("a") as f:
                f.write(json.dumps(line) + "\n")
