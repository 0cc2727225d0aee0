"""Connecting to Temporal: the connection follows Temporal's own conventions.

The address, namespace, API key and TLS come from Temporal's client config, as
the ``temporal`` CLI reads them: ``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``,
``TEMPORAL_PROFILE`` and the profiles in the config file
(``TEMPORAL_CONFIG_FILE``, default ``~/.config/temporalio/temporal.toml``).
Explicit arguments (``--address``, ``--namespace``) override them; with nothing
configured the client goes to ``127.0.0.1:7233`` (where ``loop dev`` listens),
namespace ``default``.

Every client uses the pydantic data converter, so the contracts in
``loop.contracts`` travel as they are, and carries Temporal's tracing interceptor while
tracing is on (``loop.tracing``): a workflow gets spans only under a traced client's
start. Connecting fails fast with
:class:`~loop.errors.ServerUnavailable` when nothing answers, instead of
hanging in retries.

The search attributes Loopwork upserts (``contracts.SEARCH_ATTRIBUTES``) are
registered through the operator service by :func:`ensure_search_attributes`,
so any Temporal server works, not only the embedded one that registers them at
start.
"""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import timedelta
from typing import Any

import temporalio.api.enums.v1
import temporalio.api.operatorservice.v1
from temporalio.client import Client
from temporalio.envconfig import ClientConfig
from temporalio.runtime import Runtime
from temporalio.service import RPCError, RPCStatusCode

from loop import contracts, tracing
from loop.codec import data_converter
from loop.errors import ServerUnavailable

log = logging.getLogger(__name__)

DEFAULT_ADDRESS = "127.0.0.1:7233"
DEFAULT_NAMESPACE = "default"

CONNECT_TIMEOUT_S = 5.0
"""Bound on one connection attempt (TCP connect plus the first server call)."""

_UNREACHABLE = (
    RPCStatusCode.UNAVAILABLE,
    RPCStatusCode.DEADLINE_EXCEEDED,
    RPCStatusCode.CANCELLED,
)


def connect_config(address: str | None = None, namespace: str | None = None) -> dict[str, Any]:
    """Keyword arguments for ``Client.connect`` from Temporal's client config.

    Reads the environment (``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``,
    ``TEMPORAL_PROFILE``, TLS and API key variables) and the config file;
    ``address`` and ``namespace`` given here win over both.
    """
    config: dict[str, Any] = dict(ClientConfig.load_client_connect_config())
    if address:
        config["target_host"] = address
    if namespace:
        config["namespace"] = namespace
    config.setdefault("target_host", DEFAULT_ADDRESS)
    config.setdefault("namespace", DEFAULT_NAMESPACE)
    return config


def _unavailable(address: str) -> ServerUnavailable:
    return ServerUnavailable(
        f"no Temporal server at {address}: start one with `loop dev` (or `loop worker --dev`)"
    )


async def connect(
    address: str | None = None, namespace: str | None = None, *, runtime: Runtime | None = None
) -> Client:
    """A client with the pydantic data converter, or ``ServerUnavailable`` within seconds."""
    config = connect_config(address, namespace)
    if runtime is not None:
        config["runtime"] = runtime
    target = config["target_host"]
    try:
        return await asyncio.wait_for(
            Client.connect(
                **config,
                data_converter=data_converter(),
                interceptors=tracing.interceptors(),
                connect_timeout=timedelta(seconds=CONNECT_TIMEOUT_S),
            ),
            timeout=CONNECT_TIMEOUT_S,
        )
    except RPCError as e:
        if e.status in _UNREACHABLE:
            raise _unavailable(target) from e
        first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ServerUnavailable(
            f"the Temporal server at {target} refused the connection: {first_line}"
        ) from e
    except (TimeoutError, RuntimeError, OSError) as e:
        # RuntimeError("Failed client connect: ...") is how the SDK reports a
        # refused or failed transport; TimeoutError is our own bound.
        raise _unavailable(target) from e


async def ensure_search_attributes(client: Client) -> list[str]:
    """Register the missing ones of ``contracts.SEARCH_ATTRIBUTES`` in the client's namespace.

    Returns the names added (``[]`` when all were there). A server without the
    operator service (the time-skipping test server) is left alone: ``[]``.
    """
    ops = client.operator_service
    namespace = client.namespace
    try:
        listed = await ops.list_search_attributes(
            temporalio.api.operatorservice.v1.ListSearchAttributesRequest(namespace=namespace)
        )
    except RPCError as e:
        if e.status == RPCStatusCode.UNIMPLEMENTED:
            return []
        raise
    known = {**dict(listed.system_attributes), **dict(listed.custom_attributes)}
    missing: dict[str, temporalio.api.enums.v1.IndexedValueType.ValueType] = {}
    for key in contracts.SEARCH_ATTRIBUTES:
        wanted = temporalio.api.enums.v1.IndexedValueType.ValueType(int(key.indexed_value_type))
        have = known.get(key.name)
        if have is None:
            missing[key.name] = wanted
        elif have != wanted:
            log.warning(
                "search attribute %s is registered as %s, Loopwork expects %s",
                key.name,
                temporalio.api.enums.v1.IndexedValueType.Name(have),
                temporalio.api.enums.v1.IndexedValueType.Name(wanted),
            )
    if not missing:
        return []
    try:
        await ops.add_search_attributes(
            temporalio.api.operatorservice.v1.AddSearchAttributesRequest(
                search_attributes=missing, namespace=namespace
            )
        )
    except RPCError as e:
        # ALREADY_EXISTS: another worker registered them at the same moment.
        if e.status in (RPCStatusCode.UNIMPLEMENTED, RPCStatusCode.ALREADY_EXISTS):
            return []
        if e.status == RPCStatusCode.PERMISSION_DENIED:
            # Temporal Cloud: attributes are created in the namespace settings, not here.
            log.warning(
                "cannot register search attributes %s (%s); create them in the namespace, "
                "or tasks will fail to publish their state",
                ", ".join(missing),
                e.message,
            )
            return []
        raise
    return list(missing)


def ui_url(client: Client, workflow_id: str | None = None) -> str:
    """The Temporal UI for this connection: ``LOOP_UI_URL``, else the frontend's port + 1000
    on its host (``127.0.0.1`` for a local one: what ``loop dev`` binds, where ``localhost``
    may resolve to ``::1`` first)."""
    base = os.environ.get("LOOP_UI_URL")
    if not base:
        host, _, port = client.service_client.config.target_host.rpartition(":")
        host = "127.0.0.1" if host in ("localhost", "0.0.0.0", "") else host
        base = f"http://{host}:{int(port or 7233) + 1000}"
    url = f"{base.rstrip('/')}/namespaces/{client.namespace}/workflows"
    return f"{url}/{workflow_id}" if workflow_id else url
