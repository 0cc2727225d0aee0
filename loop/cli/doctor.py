"""``loop doctor``: what this host can confine, what each level guarantees, and why.

Prints the strongest sandbox level the host supports (``strict``, ``basic`` or
``off``; README, "Sandbox") with the guarantees a task gets at that level, and
the facts it rests on: bubblewrap and its version (and whether a trial sandbox
starts), the worker's uid, whether a task uid gets network and mount namespaces
of its own, setpriv, user namespaces, the seccomp filter and cgroups. A task
that asks for more than the host gives ends BLOCKED with the reason; nothing
degrades silently.
"""

from __future__ import annotations


def print_doctor() -> None:
    """Print the sandbox level this host supports (strict, basic or off) and why."""
    from activities.host.sandbox import GUARANTEES, inspect_host  # the probe runs trial sandboxes

    host = inspect_host()
    print(f"sandbox level: {host.level}")
    for level in ("strict", "basic"):
        missing = host.unavailable(level)
        if missing:
            print(f"  {missing}")
    for level in ("strict", "basic", "off"):
        if level == "off" or not host.unavailable(level):
            print(f"what {level} guarantees here:")
            for line in GUARANTEES[level]:
                print(f"  - {line}")
    print("host:")
    for line in host.lines():
        print(f"  {line}")
