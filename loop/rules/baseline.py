"""Which of base's failures a fix is not asked to fix: pre-existing and flaky tests.

A real suite fails at base for reasons the task has nothing to do with: a test that needs
the network (gates have none), one that writes into the checkout (gates see it
read-only), one that needs a module the environment lacks, a coin flip. Under
``fail_to_pass: auto`` each of those used to become *required*, so a true fix could never
pass. Base runs twice; a test is set aside, with the reason, when

- its outcome differs between the two runs at base (flaky);
- the gate names it in ``flaky``;
- it fails at base by an error of its environment (network, a read-only or missing file,
  permission, a missing module), not by an assertion or an error of the code under
  test, and the goal does not name it.

What stays required: tests failing at base by assertion (or by an error raised from the
repository's own code), and tests the goal names. A set-aside test neither blocks the
gate nor counts as fixed. Pure: the activity runs base and gives both reports.
"""

from __future__ import annotations

import fnmatch
import re

from loop.contracts import FAILURES, CaseResult, RunGate, SuiteReport
from loop.rules.verdicts import headline, raised_type

NETWORK = (
    "socket.gaierror", "socket.herror", "socket.timeout", "ConnectionError",
    "ConnectionRefusedError", "ConnectionResetError", "ConnectionAbortedError",
    "BrokenPipeError", "TimeoutError", "urllib.error.URLError", "http.client.RemoteDisconnected",
    "requests.exceptions.ConnectionError", "requests.exceptions.Timeout",
    "httpx.ConnectError", "httpx.ConnectTimeout", "urllib3.exceptions.NewConnectionError",
    "urllib3.exceptions.MaxRetryError", "aiohttp.client_exceptions.ClientConnectorError",
)  # fmt: skip
"""Exception types (their qualified names, or their last part) that mean no network."""
NETWORK_WORDS = (
    "Network is unreachable", "Temporary failure in name resolution",
    "Name or service not known", "nodename nor servname provided", "Connection refused",
    "No route to host", "getaddrinfo failed", "Failed to establish a new connection",
)  # fmt: skip
READ_ONLY_WORDS = ("Read-only file system", "[Errno 30]")
PERMISSION_WORDS = ("Permission denied", "[Errno 13]", "Operation not permitted", "[Errno 1]")
MISSING_FILE = ("FileNotFoundError",)


def _kind(case: CaseResult) -> str:
    """The exception's type, from the runner's record or the message's last raise."""
    return case.exception or raised_type(case.message)


def _named(kind: str, names: tuple[str, ...]) -> bool:
    short = kind.rsplit(".", 1)[-1]
    return kind in names or short in {n.rsplit(".", 1)[-1] for n in names}


def environment_error(case: CaseResult, own_code: set[str] | None = None) -> str:
    """What of the environment ``case`` failed on ("" : not the environment's fault).

    ``own_code``: the repository's files that are not tests; an error raised there is the
    code's (a missing file the code should have made is the bug, not the environment)."""
    if case.outcome not in FAILURES:
        return ""
    kind, text = _kind(case), case.message
    raised_in_code = bool(own_code) and case.raised_at in (own_code or set())
    if _named(kind, NETWORK) or any(w in text for w in NETWORK_WORDS):
        return "network"
    if any(w in text for w in READ_ONLY_WORDS):
        return "read-only file system"
    if _named(kind, ("PermissionError",)) or (
        _named(kind, ("OSError",)) and any(w in text for w in PERMISSION_WORDS)
    ):
        return "permission"
    if _named(kind, ("ModuleNotFoundError",)) or (
        _named(kind, ("ImportError",)) and "No module named" in text
    ):
        return "missing module"
    if _named(kind, MISSING_FILE) and not raised_in_code:
        return "missing file"
    return ""


def named_by(goal: str, case_id: str) -> bool:
    """Whether the goal names the test: its id, or its function's name as a word."""
    if not goal:
        return False
    if case_id in goal:
        return True
    name = case_id.rsplit("::", 1)[-1].rsplit(".", 1)[-1].split("[", 1)[0]
    return len(name) > 3 and re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", goal) is not None


def set_aside(
    gate: RunGate,
    first: SuiteReport | None,
    second: SuiteReport | None,
    goal: str,
    own_code: set[str] | None = None,
) -> dict[str, str]:
    """Test id -> why it is set aside (see the module docstring)."""
    aside: dict[str, str] = {}
    if first is None:
        return aside
    for case_id in first.tests:
        if any(fnmatch.fnmatchcase(case_id, glob) for glob in gate.flaky):
            aside[case_id] = "named flaky in the gate"
    if second is not None:
        for case_id, case in first.tests.items():
            again = second.tests.get(case_id)
            if again is None or case_id in aside:
                continue
            if (case.outcome in FAILURES) != (again.outcome in FAILURES):
                aside[case_id] = f"flaky at base: {case.outcome}, then {again.outcome}"
    for case_id, case in first.tests.items():
        if case_id in aside or case.outcome not in FAILURES or named_by(goal, case_id):
            continue
        cause = environment_error(case, own_code)
        if cause:
            aside[case_id] = f"pre-existing at base ({cause}): {_headline(case)}"
    return aside


def _headline(case: CaseResult) -> str:
    return headline(case.message, 120) or case.outcome


def only_environment(gate: RunGate, first: SuiteReport | None, aside: dict[str, str]) -> bool:
    """Whether every test failing at base was set aside as pre-existing (none is left for
    ``fail_to_pass: auto`` to require): nothing an attempt could show fixed."""
    if first is None or gate.fail_to_pass != "auto":
        return False
    failing = [i for i, c in first.tests.items() if c.outcome in FAILURES]
    return bool(failing) and all(aside.get(i, "").startswith("pre-existing") for i in failing)
