"""The one sandbox for everything untrusted Loopwork runs: agents, the ``run`` tool,
``run`` gates and the triage ``ci`` command.

``run_sandboxed(SandboxRun(...))`` is the only way such a command starts. The
levels (``strict``, ``basic``, ``off``), what each guarantees and what it does not,
are docs/concepts/trust-boundary.md ("The levels") and docs/architecture.md ("The
trust boundary"); ``probe`` finds which ones this host can give. The modules, one concern
each: ``paths`` (what a command needs to see), ``mounts`` (the view), ``launch``
and ``launcher`` (the first process of a run and how the worker talks to it), ``zygote``
(the worker's one long-lived launcher, which forks each run),
``egress*`` (the proxy), ``uids`` (leases), ``cgroups``, ``seccomp``,
``ownership`` (the worktree lent and taken back), ``refusals``, ``credentials`` (the
worker's secret files), ``laid`` (a repository's environment in the tree), ``run``.
"""

from activities.host.sandbox.capabilities import Capabilities
from activities.host.sandbox.credentials import check as check_credentials
from activities.host.sandbox.credentials import named_files as credential_files
from activities.host.sandbox.credentials import refusal as credential_refusal
from activities.host.sandbox.egress import endpoint_entries, protect
from activities.host.sandbox.egress import warm as warm_egress
from activities.host.sandbox.laid import Laid
from activities.host.sandbox.probe import GUARANTEES, HostSupport, host_record, inspect_host
from activities.host.sandbox.run import (
    SandboxRun,
    check_runnable,
    hidden_for,
    kill_leftovers,
    missing_programs,
    run_sandboxed,
)
from activities.host.sandbox.uids import holders, lease, release, uid_processes

__all__ = [
    "GUARANTEES",
    "Capabilities",
    "HostSupport",
    "Laid",
    "SandboxRun",
    "check_credentials",
    "check_runnable",
    "credential_files",
    "credential_refusal",
    "endpoint_entries",
    "hidden_for",
    "holders",
    "host_record",
    "inspect_host",
    "kill_leftovers",
    "lease",
    "missing_programs",
    "protect",
    "release",
    "run_sandboxed",
    "uid_processes",
    "warm_egress",
]
