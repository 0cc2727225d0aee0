"""Which destinations the egress proxy lets a sandboxed command reach, and why not.

Pure rules, shared by the proxy plugin (``egress_plugin``) and the tests:

1. the destination ``host:port`` must match an entry of the task's ``allow_hosts``
   (plus the ``openai`` backend's endpoint): ``host`` means ports 80 and 443,
   ``host:port`` that port, ``*.domain`` any name below the domain (not the domain
   itself), ``ip:port`` that address literally;
2. the proxy resolves the name itself, and every address it would use that is not
   public (loopback, private, link-local, reserved, multicast, unspecified) must be
   listed as ``ip:port``: a public name that resolves to 127.0.0.1 gets nowhere;
3. a denied ``ip:port`` (the orchestrator's and the worker's own services: every port
   the Temporal server listens on, the review page, the codec server, the metrics
   endpoint) is refused even when listed; ``ip:0`` denies every port of ``ip`` (a
   Temporal server on another host).

The address the check accepted is the one the proxy connects to, so a name that
resolves differently a moment later (DNS rebinding) changes nothing.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

DEFAULT_PORTS = (80, 443)


@dataclass(frozen=True)
class Entry:
    host: str
    """A lowercase name, ``*.domain``, or an address (IPv6 without brackets)."""
    port: int | None


def parse(entry: str) -> Entry:
    """An ``allow_hosts`` entry as validated by the task file."""
    text = entry.strip().lower()
    if text.startswith("["):
        host, _, port = text[1:].partition("]:")
    else:
        host, _, port = text.partition(":")
    return Entry(host=host, port=int(port) if port else None)


def address_entry(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def is_public(ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return not (
        addr.is_loopback
        or addr.is_private
        or addr.is_link_local
        or addr.is_reserved
        or addr.is_multicast
        or addr.is_unspecified
    )


def _plain(ip: str) -> str:
    """An IPv4 address written as IPv6 (``::ffff:127.0.0.1``) as what it is."""
    addr = ipaddress.ip_address(ip)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(addr)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _name_matches(entry: Entry, host: str, port: int) -> bool:
    if entry.port is None:
        if port not in DEFAULT_PORTS or _is_address(entry.host):
            return False
    elif entry.port != port:
        return False
    if entry.host.startswith("*."):
        return host.endswith(entry.host[1:]) and host != entry.host[2:]
    return host == entry.host


def listed(host: str, port: int, allow: list[str]) -> bool:
    """Rule 1: the name (or literal address) and port are in the list."""
    host = host.lower().strip("[]").rstrip(".")
    return any(_name_matches(parse(e), host, port) for e in allow)


def choose(host: str, port: int, addresses: list[str], allow: list[str], deny: list[str]) -> str:
    """The address to connect to; raises ``Refused`` with the reason when there is none."""
    if not listed(host, port, allow):
        raise Refused(f"{host}:{port} is not in sandbox.allow_hosts")
    if not addresses:
        raise Refused(f"{host} does not resolve")
    explicit = {address_entry(parse(e).host, parse(e).port or 0) for e in allow}
    denied = set(deny)
    reasons: list[str] = []
    for ip in addresses:
        where = address_entry(_plain(ip), port)
        if where in denied or address_entry(_plain(ip), 0) in denied:
            reasons.append(f"{where} is the orchestrator's, never reachable from a sandbox")
        elif not is_public(ip) and where not in explicit:
            reasons.append(f"{host} resolves to {ip}, a non-public address not listed as {where}")
        else:
            return ip
    raise Refused("; ".join(dict.fromkeys(reasons)))


class Refused(Exception):
    """The destination is not allowed; ``str()`` says why, in one line."""
