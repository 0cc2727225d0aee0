"""The model gateway: agents' model calls with the worker's key, metered and capped."""

from activities.host.gateway.grant import Call, Grant, provider_key
from activities.host.gateway.server import GATEWAY, GATEWAY_PORT, GATEWAY_URL, host_listener

__all__ = ["GATEWAY", "GATEWAY_PORT", "GATEWAY_URL", "Call", "Grant", "host_listener",
           "provider_key"]  # fmt: skip
