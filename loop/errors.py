"""Loopwork's error tree, in one place.

    LoopError                      base of everything Loopwork raises on purpose
    ├── BadInput                   the user's input is wrong: CLI exits 2, nothing started
    │   ├── TaskFileError          a task file that does not validate (names the field)
    │   ├── UnknownTask            no workflow for that task id
    │   └── Sealed                 payloads encrypted, and no key here (or another one)
    ├── ServerUnavailable          no Temporal server answers at the address
    └── DevServerError             the embedded server cannot start (busy port, no binary)

Inside activities, failures are Temporal's ``ApplicationError``: ``permanent()``
builds the non-retryable kind (a policy violation, a repository that vanished),
while anything else raised is retried by the activity's retry policy. A triage
source that a person must fix first (a token not set or refused) fails with
``kind=SOURCE_MISCONFIGURED``, so ``loop triage`` exits 2 as for bad input.
"""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from loop.contracts.names import PERMANENT


class LoopError(Exception):
    """Base of the errors Loopwork raises on purpose; the message is one line for a person."""


class BadInput(LoopError):
    """Input a person can fix; the CLI prints it and exits 2."""


class TaskFileError(BadInput):
    pass


class UnknownTask(BadInput):
    pass


class Sealed(BadInput):
    """Encrypted payloads that this process cannot open: it has no codec key, or another
    one; the message names LOOP_CODEC_KEY_FILE."""


class ServerUnavailable(LoopError):
    pass


class DevServerError(LoopError):
    pass


def permanent(message: str, *, kind: str = PERMANENT) -> ApplicationError:
    """A non-retryable activity failure: retrying cannot change the outcome."""
    return ApplicationError(message, type=kind, non_retryable=True)
