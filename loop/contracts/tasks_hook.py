"""``POST /hooks/tasks``: a tracker's or an alert's webhook starting work, as triage would.

The body is an issue in JSON, the fields an issue file's front matter may hold (goal-level
only: ``id``, ``title``, ``labels``, ``state``, ``goal``, ``budget``, ``autonomy``) plus its
text (``body``) and the ``source`` of ``loop ui --sources`` whose template and policy make
it a task: ``task-<source>-<id>``, so the same body twice is one task. Anything that would
configure the task (``agent``, ``sandbox``, ``verify``, ``repo``…) is refused.
"""

from typing import Any

from pydantic import Field

from loop.contracts.base import _Record
from loop.contracts.triage import ISSUE_META_KEYS, ISSUE_OVERRIDE_KEYS, Source, TriageSources

TASK_HOOK_WORKFLOW = "TaskHookWorkflow"
HOOK_BODY_KEYS = frozenset({"source", "body"}) | ISSUE_META_KEYS | ISSUE_OVERRIDE_KEYS
"""What a ``POST /hooks/tasks`` body may hold."""


def task_hook_workflow_id(request: str) -> str:
    return f"tasks-hook-{request}"


class TaskHook(_Record):
    sources: TriageSources
    """The sources file of the named source, with that source alone."""
    source: str
    fields: dict[str, Any] = Field(default_factory=dict)
    """The body's issue fields (``id``, ``title``, ``labels``…), ``source`` and ``body`` out."""
    body: str = ""
    """The issue's text. Untrusted."""


class TaskHookResult(_Record):
    did: str
    """``started <task id>: …`` or ``not started <task id>: <why>``."""


class HookIssueInput(_Record):
    source: Source
    fields: dict[str, Any] = Field(default_factory=dict)
    body: str = ""
