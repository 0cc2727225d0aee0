"""``loop doctor``: what this host can confine, what each level guarantees, and why.

Prints the strongest sandbox level the host supports (``strict``, ``basic`` or
``off``; docs/concepts/trust-boundary.md) with the guarantees a task gets at that level, and
the facts it rests on: bubblewrap and its version (and whether a trial sandbox
starts), the worker's uid, whether a task uid gets network and mount namespaces
of its own, setpriv, user namespaces, the seccomp filter and cgroups. A task
that asks for more than the host gives ends BLOCKED with the reason; nothing
degrades silently.
"""

from __future__ import annotations

from loop.contracts import SandboxLevel


def print_doctor() -> None:
    """Print the sandbox level this host supports (strict, basic or off) and why."""
    from activities.host.sandbox import GUARANTEES, inspect_host  # the probe runs trial sandboxes

    host = inspect_host()
    print(f"sandbox level: {host.level}")
    for level in SandboxLevel:
        missing = host.unavailable(level)
        if missing:
            print(f"  {missing}")
    for level in SandboxLevel:
        if not host.unavailable(level):
            print(f"what {level} guarantees here:")
            for line in GUARANTEES[level]:
                print(f"  - {line}")
    print("host:")
    for line in host.lines():
        print(f"  {line}")
    print_protected()
    print_credentials()
    print_gateway()


def print_gateway() -> None:
    """Whether the model gateway (``agent.provider``; docs/concepts/gateway.md) starts
    here, and which providers' keys the worker would hold."""
    import asyncio
    import os

    from activities.host.gateway.trial import trial
    from loop.contracts import Provider
    from loop.logs import configure

    configure("ERROR")  # the trial's refusal is the point, not news
    print(f"model gateway (agent.provider): {asyncio.run(trial())}")
    for api in ("anthropic", "openai"):
        name = Provider(api=api).key_variable
        held = "set" if os.environ.get(name) or os.environ.get(f"{name}_FILE") else "not set"
        print(f"  {api}: the worker's {name} is {held}")


def print_credentials() -> None:
    """The worker's credential files that no sandbox shows (README, "Secrets"), and why
    the worker would refuse to start when one cannot be kept out."""
    import os

    from activities.host.sandbox import credential_files, credential_refusal

    print("credential files no sandbox shows (covered, or absent where the view is fresh):")
    found = [(what, path) for what, path in credential_files() if os.path.lexists(path)]
    for what, path in found:
        print(f"  {what}: {path}")
    if not found:
        print("  none here (LOOP_CODEC_KEY_FILE, LOOP_ANSWER_KEY_FILE, TEMPORAL_* TLS files)")
    refused = credential_refusal()
    if refused:
        print(f"  the worker refuses to start: {refused}")


def print_protected() -> None:
    """The ports no sandbox may reach here, whatever a task lists (docs/security.md, "The
    egress proxy"): every port of the Temporal server's process, Loopwork's own servers."""
    from activities.host.sandbox.egress import local_addresses
    from activities.host.sandbox.services import Protected
    from loop.cli import console
    from loop.client import connect_config
    from loop.settings import Settings

    settings = Settings.from_env()
    target = str(connect_config(console.connection.address)["target_host"])
    host, _, port = target.rpartition(":")
    seeds = [target]
    if port.isdigit():
        seeds += [f"{host}:{int(port) + 1000}", f"{host}:{int(port) + 10}"]
    if settings.metrics_bind:
        seeds.append(settings.metrics_bind)
    entries = Protected(seeds=seeds, home=settings.home, local=local_addresses()).entries()
    ports = sorted({e.rpartition(":")[2] for e in entries}, key=int)
    elsewhere = sorted({e.rpartition(":")[0] for e in entries if e.endswith(":0")})
    print(f"the egress proxy refuses, on every address of this host (Temporal at {target}):")
    print(f"  ports {', '.join(p for p in ports if p != '0')}")
    if elsewhere:
        print(f"  every port of {', '.join(elsewhere)}")
