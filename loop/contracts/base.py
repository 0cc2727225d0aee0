"""Bases of every contract model, and the patterns ids follow.

Two strictness levels, on purpose: files people write refuse unknown keys (a typo in a
budget must not silently mean "no budget"), payloads ignore them (a hand-typed
``temporal workflow signal --input`` with an extra field still works).

The contract modules evaluate their annotations at import (no ``from __future__ import
annotations``): pydantic would compile each field's annotation string, a twentieth of a
worker's start. A model names a class defined later in quotes, a validator returns
``Self``. And each model builds its validator when first used (``defer_build``): a
worker builds those of the steps it runs, a ``loop`` command those of its files
(pydantic builds under a lock from 2.14, so a workflow thread and the event loop may
both be first).
"""

from pydantic import BaseModel, ConfigDict

TASK_ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
CANDIDATE_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,23}$"
CANDIDATE_MARK = "+"
"""Joins a task's id and a candidate's name into the candidate's own id (``fix+c2``): a
character no task id has, so no task is ever taken for another's candidate."""
SPEC_ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}(\+[a-z0-9][a-z0-9_-]{0,23})?$"
"""A task's id, or one of its candidates' (docs/concepts/candidates.md): what a task file
may name is ``TASK_ID_PATTERN``, which the loader holds it to."""
GATE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
MAX_GOAL_CHARS = 20_000
OUTPUT_TAIL_CHARS = 4_000


def workflow_id_for(task_id: str) -> str:
    """The one place that maps a task id to its workflow id (``task-<id>``)."""
    return f"task-{task_id}"


def branch_for(task_id: str) -> str:
    """``loop/<id>``; a candidate's is ``loop/<id>/<name>``."""
    return "loop/" + task_id.replace(CANDIDATE_MARK, "/")


def relative_globs(globs: list[str]) -> list[str]:
    """Globs of paths in the worktree: not empty, not absolute, never out of it."""
    for g in globs:
        if not g.strip():
            raise ValueError("globs must not be empty strings")
        if g.startswith("/") or ".." in g.split("/"):
            raise ValueError(f"glob {g!r} must be relative to the repository root")
    return globs


class _TaskFileModel(BaseModel):
    """Base of the task-file models: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", defer_build=True)


class _Payload(BaseModel):
    """Base of signal payloads: unknown keys are ignored."""

    model_config = ConfigDict(extra="ignore", defer_build=True)


class _Record(BaseModel):
    """Base of results and records produced by Loopwork itself."""

    model_config = ConfigDict(extra="ignore", defer_build=True)
