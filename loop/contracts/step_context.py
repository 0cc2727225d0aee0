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
from loop.contracts.names import PERMANENT

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
    """The shared step input a step on this host saved; one that is gone is an error no
    retry fixes."""
    shared: dict[str, Any] = json.loads(_read(path, "saved step input"))
    return shared


def read_evidence(path: str) -> dict[str, Any]:
    """Each gate's evidence in the verdict verify kept at ``path``, by gate name."""
    verdict = json.loads(_read(path, "last verdict"))
    return {g["name"]: g["evidence"] for g in verdict.get("gates", [])}


def _read(path: str, what: str) -> str:
    """The worker's own file, never where a link in its place points."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd) as f:
            return f.read()
    except OSError as e:
        raise ApplicationError(
            f"this task's {what} {path} is unreadable ({e.strerror}): its run folder was "
            "removed while the task ran; start the task again with --rerun",
            type=PERMANENT,
            non_retryable=True,
        ) from None
