"""Triage policy: what of the discovered work is worth doing, as pure functions.

``TriageWorkflow`` calls :func:`plan` with what discovery found and what
Temporal knows of earlier tasks, so the decisions are workflow code (in
history, replayed, never re-decided); the discover activity uses
:func:`task_id_for` and :func:`merge` to build each item's task. Nothing here
performs I/O or reads a clock: ``now`` comes from ``workflow.now()``.

The models of the SOURCES.yaml file are in ``loop.contracts`` because the
workflow's input carries them; reading the file is ``loop.loaders.load_sources``.

The rules, in the order :func:`should_attempt` applies them:

1. an item discovery already ruled out (closed, no pattern match, invalid) is skipped;
2. the source's label filter: at least one ``include`` label, no ``exclude`` label;
3. an item whose task is open (running or waiting on a person) is skipped;
4. an item whose task ended less than ``cooldown`` seconds ago is skipped;
5. an item whose task ended ``DONE_WITH_EVIDENCE`` is skipped (unless ``retry_done``).

:func:`plan` then drops repeats of one task id and applies the caps: at most
``max_new`` starts per run, and no start that would bring the open tasks on the
queue above ``max_running``. Each started item's autonomy is capped at its source's.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from loop.contracts import (
    Autonomy,
    ExistingTask,
    LabelFilter,
    LookupResult,
    TaskSpec,
    TaskState,
    TriageDecision,
    TriageItem,
    TriagePolicy,
    TriageSources,
    is_valid_task_id,
)

_AUTONOMY_ORDER = (Autonomy.REPORT, Autonomy.ASSISTED, Autonomy.UNATTENDED)
_MAX_ID = 63


def task_id_for(source: str, key: str, repo: str = "") -> str:
    """``<source>-<key>``, lowercase and valid; hashed when it had to be changed or cut.
    With ``repo`` (``owner/name``: a source whose items are numbered per repository),
    ``<source>-<owner>-<name>-<key>``, so two sources named alike in two repositories
    never share a task (``gh-acme-app-42``, ``gh-acme-lib-42``).

    The hash keeps two keys that sanitise alike (``Fix Login``, ``fix-login``) apart,
    so one item always maps to one workflow id, ``task-<source>-<key>``.
    """
    named = re.sub(r"[^a-z0-9._-]+", "-", repo.lower()).strip("-._")
    wanted = f"{source}-{named}-{key}" if named else f"{source}-{key}"
    if len(wanted) <= _MAX_ID and is_valid_task_id(wanted):
        return wanted
    cleaned = re.sub(r"[^a-z0-9._-]+", "-", wanted.lower()).strip("-._") or source
    digest = hashlib.sha1(wanted.encode(), usedforsecurity=False).hexdigest()[:10]
    return f"{cleaned[: _MAX_ID - len(digest) - 1].rstrip('-._')}-{digest}"


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Task-file fields ``over`` a template: mappings merge key by key, lists and values replace."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def cap_autonomy(asked: Autonomy, allowed: Autonomy) -> Autonomy:
    """The lower of the two: an item never gets more autonomy than its source allows."""
    return min(asked, allowed, key=_AUTONOMY_ORDER.index)


def label_reason(labels: list[str], rule: LabelFilter) -> str:
    """Why the labels fail the filter, or "" when they pass (case-insensitive)."""
    have = {label.lower() for label in labels}
    excluded = sorted(have & {label.lower() for label in rule.exclude})
    if excluded:
        return f"label {excluded[0]!r} is excluded"
    if rule.include and not have & {label.lower() for label in rule.include}:
        return f"needs a label of: {', '.join(rule.include)}"
    return ""


def should_attempt(
    item: TriageItem,
    rule: LabelFilter,
    existing: ExistingTask | None,
    policy: TriagePolicy,
    now: datetime,
) -> tuple[bool, str]:
    """Whether the item is worth a task now, and why (the reason is shown either way)."""
    if item.skip_reason or item.spec is None:
        return False, item.skip_reason or "no task could be built"
    why_not = label_reason(item.labels, rule)
    if why_not:
        return False, why_not
    if existing is None:
        return True, "new item"
    if existing.status == "RUNNING":
        return False, f"task open ({existing.state or 'RUNNING'})"
    ended = existing.state if existing.status == "COMPLETED" and existing.state else existing.status
    age = (now - existing.closed_at).total_seconds() if existing.closed_at else None
    if age is not None and age < policy.cooldown:
        return False, (
            f"task ended {ended} {_duration(age)} ago; cool-down {_duration(policy.cooldown)}"
        )
    if ended == TaskState.DONE_WITH_EVIDENCE and not policy.retry_done:
        return False, f"already done ({ended})"
    since = f" {_duration(age)} ago" if age is not None else ""
    return True, f"task ended {ended}{since}; cool-down over"


@dataclass(frozen=True)
class Planned:
    """A decision, with what starting it needs."""

    decision: TriageDecision
    spec: TaskSpec | None = None
    rerun: bool = False
    """A workflow with this id ran before (so its id may be reused)."""


def plan(
    items: list[TriageItem],
    sources: TriageSources,
    lookup: LookupResult,
    now: datetime,
) -> list[Planned]:
    """Every item's decision, in discovery order, with the caps applied."""
    policy = sources.policy
    by_name = {s.name: s for s in sources.sources}
    planned: list[Planned] = []
    seen: set[str] = set()
    starts = 0
    for item in items:
        source = by_name[item.source]
        existing = lookup.tasks.get(item.task_id)
        attempt, reason = should_attempt(item, source.labels, existing, policy, now)
        if attempt and item.task_id in seen:
            attempt, reason = False, "same task as an item above"
        if attempt and starts >= policy.max_new:
            attempt, reason = False, f"max_new reached ({policy.max_new} per run)"
        if attempt and lookup.open_tasks + starts >= policy.max_running:
            attempt = False
            reason = (
                f"max_running reached: {lookup.open_tasks} open + {starts} new, "
                f"max {policy.max_running}"
            )
        autonomy = cap_autonomy(item.spec.autonomy, source.autonomy) if item.spec else None
        decision = TriageDecision(
            task_id=item.task_id,
            source=item.source,
            item=item.key,
            title=item.title,
            action="start" if attempt else "skip",
            reason=reason,
            autonomy=autonomy,
        )
        if not attempt or item.spec is None or autonomy is None:
            planned.append(Planned(decision))
            continue
        seen.add(item.task_id)
        starts += 1
        if autonomy != item.spec.autonomy:
            decision.reason += f"; autonomy capped at {autonomy} (asked {item.spec.autonomy})"
        if item.note:
            decision.reason += f"; {item.note}"
        spec = item.spec.model_copy(update={"autonomy": autonomy})
        planned.append(Planned(decision, spec, rerun=existing is not None))
    return planned


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7_200:
        return f"{seconds // 60}m"
    if seconds < 172_800:
        return f"{seconds // 3_600}h"
    return f"{seconds // 86_400}d"
