"""``loop doctor``: what this host can confine, and why.

Prints the strongest sandbox level the host supports (``strict``, ``basic`` or
``off``, see docs/sandbox.md) and the facts it rests on: bubblewrap and its
version (and whether a trial sandbox starts), the worker's uid, setpriv,
prlimit, user namespaces, the seccomp filter and the cgroup filesystem.
A task that asks for more than the host gives (``mode: strict`` where only
``basic`` is available) ends BLOCKED with the reason; nothing degrades silently.
"""

from __future__ import annotations


def doctor() -> None:
    """Print the sandbox level this host supports (strict, basic or off) and why."""
    from activities.sandbox import inspect_host  # the probe runs a trial sandbox

    host = inspect_host()
    print(f"sandbox level: {host.level}")
    if host.level != "strict":
        print(f"  strict is not available: {host.strict_error}")
    for line in host.lines():
        print(f"  {line}")
