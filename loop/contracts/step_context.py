"""The step input every step of a task on one host shares, kept on that host.

The task file and the workspace are most of what the workflow would send to each
attempt's steps; the first step on a host saves them in the task's run folder, later
steps send the file's path and the activity reads them back (docs/architecture.md,
"What history holds"). The workflow names the file for the digest of what it holds,
so a changed task file or workspace is a new file, never a stale one; the run folder is
the worker's own, out of every sandbox's reach.
"""

import hashlib
import json
import os
from typing import Any, TypeVar

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    field_serializer,
    model_serializer,
    model_validator,
)
from temporalio.exceptions import ApplicationError

from loop.contracts.base import _Record
from loop.contracts.names import INPUT_GONE

SHARED = frozenset({"task", "workspace"})

Step = TypeVar("Step", bound=BaseModel)


class _StepInput(_Record):
    """An activity's input that the workflow sends once per attempt: the models it holds
    go without their defaults (the task file's sandbox limits, tool policy, empty lists),
    which the activity fills in again when it reads them. Only inputs: history is read
    back on replay for results, never for what an activity was given, so a default that
    changes between releases cannot change a replayed decision.

    The task file and the workspace, the same in every step of a task on one host, go
    once: the first step there saves them at ``context`` (a file in the host's run
    folder, named with their digest), later ones send only that path and the activity
    reads them back (docs/architecture.md, "What history holds")."""

    context: str = ""
    """The host's copy of ``SHARED``: where a step given them saves them, or, without
    them in the payload, where it reads them."""
    by_reference: bool = Field(default=False, exclude=True)
    """The workflow's choice, never sent: a step on this host has saved ``context``."""

    @field_serializer("*", mode="wrap", when_used="json")
    def _without_defaults(self, value: Any, handler: SerializerFunctionWrapHandler) -> Any:
        if isinstance(value, BaseModel):
            return value.model_dump(mode="json", exclude_defaults=True)
        return handler(value)

    @model_serializer(mode="wrap", when_used="json")
    def _shared_once(self, handler: SerializerFunctionWrapHandler) -> Any:
        sent = handler(self)
        if self.by_reference and self.context:
            for key in SHARED:
                sent.pop(key, None)
        return sent

    @model_validator(mode="before")
    @classmethod
    def _read_shared(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("context") and not SHARED & data.keys():
            return {**data, **read_context(data["context"])}
        return data


def _body(shared: dict[str, Any]) -> str:
    return json.dumps(shared, sort_keys=True, separators=(",", ":"))


def context_path(run_dir: str, step: BaseModel) -> str:
    """Where the host keeps ``step``'s shared part."""
    digest = hashlib.sha256(_body(_shared(step)).encode()).hexdigest()[:16]
    return f"{run_dir}/context-{digest}.json"


def sent_once(step: Step, run_dir: str, kept: str) -> Step:
    """``step`` as the workflow sends it: naming the host's copy of its shared part, and
    by that copy alone where a step there already ``kept`` it (the path it reported)."""
    path = context_path(run_dir, step)
    return step.model_copy(update={"context": path, "by_reference": path == kept})


def _shared(step: BaseModel) -> dict[str, Any]:
    shared: dict[str, Any] = step.model_dump(mode="json", include=set(SHARED))
    return shared


def shared_body(step: BaseModel) -> str:
    """What a host keeps of ``step``: its shared part, as the activity read it."""
    return _body(_shared(step))


def read_context(path: str) -> dict[str, Any]:
    """The shared step input a step on this host saved."""
    shared: dict[str, Any] = json.loads(_read(path, "saved step input"))
    return shared


def read_evidence(path: str) -> dict[str, Any]:
    """Each gate's evidence in the verdict verify kept at ``path``, by gate name."""
    verdict = json.loads(_read(path, "last verdict"))
    return {g["name"]: g["evidence"] for g in verdict.get("gates", [])}


MADE_FILE = "made.json"
"""Where a make keeps its result in the attempt folder: ``{"made": <MakeResult>, ...}``."""


def digest(text: str) -> str:
    """What names a text an input quotes from a kept file: the file must still say it."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def read_made(path: str, attempt: object, commit: object) -> dict[str, Any]:
    """The make result kept at ``path``, which must be the ``attempt``'s, of ``commit``."""
    made = _made(path)
    if made.get("attempt") != attempt or made.get("commit") != commit:
        raise input_gone(f"this task's attempt's result {path} is another attempt's")
    return made


def read_quote(path: str, sent: str, chars: int) -> str:
    """What the feedback quotes of the make result kept at ``path``: the end of its claim
    (else of its output), which must have the ``digest`` the workflow ``sent``."""
    made = _made(path)
    quote: str = (made.get("claim") or made.get("output_tail") or "")[-chars:]
    if digest(quote) != sent:
        raise input_gone(f"this task's last attempt's result {path} no longer says what was sent")
    return quote


def _made(path: str) -> dict[str, Any]:
    try:
        made: dict[str, Any] = json.loads(_read(path, "attempt's result"))["made"]
    except (ValueError, KeyError, TypeError):
        raise input_gone(f"this task's attempt's result {path} is not one") from None
    return made


def _read(path: str, what: str) -> str:
    """The worker's own file, never where a link in its place points; the text exactly as
    written (no newline translation)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, encoding="utf-8", newline="") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) else "not UTF-8"
        raise input_gone(f"this task's {what} {path} is unreadable on this host ({why})") from None


def input_gone(head: str) -> ApplicationError:
    """A kept input this host no longer holds: no retry brings it back; the task sends
    the step again whole where it can (docs/architecture.md, "What history holds")."""
    return ApplicationError(
        f"{head}: its run folder was removed, or another machine serves this host's queue "
        "(one LOOP_HOST_ID, two disks); where the task cannot send it again whole, start "
        "the task again with --rerun",
        type=INPUT_GONE,
        non_retryable=True,
    )
