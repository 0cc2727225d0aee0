"""Patch ids, and one marker for all of them in a run started on this release.

Every ``workflow.patched`` call that records a marker also makes the SDK upsert the
``TemporalChangeVersion`` search attribute, and each upsert is a visibility write on
the server: a trivial task paid four of them for patches that every new run takes.
A run started on today's code records ``RELEASE`` once instead, the first time any
patch here is asked for, and takes every patch of ``AT_RELEASE`` from it.

Why a history recorded before ``RELEASE`` still replays the same: the first patch
asked for asks for ``RELEASE`` too. If that happens while the run replays, its history
has no ``RELEASE`` marker, the SDK answers False for the rest of the run, and each
patch is asked for by its own id, exactly as before. If it happens live, every patch
of the run is asked for live from then on, and a live ``patched`` is True: the same
answers the old code gave, under one marker (docs/contributing/patches.md).
"""

from __future__ import annotations

from temporalio import workflow

RELEASE = "release-0.1.0"
"""Stands for every patch of ``AT_RELEASE`` in a run that recorded it."""

AT_RELEASE = frozenset(
    {
        "approving-review",
        "commit-status",
        "explain-agent-trouble",
        "explore-where-prepared",
        "extend-adds-only",
        "github-status-comment",
        "period-local",
        "publish-changes",
        "pull-request-commands",
        "pull-request-outcome",
        "reason-in-memo",
        "settle-held-only",
        "settle-on-every-end",
        "signed-answers",
        "slack-messages",
        "sweep-closed-holders",
        "usage-for-budgets",
    }
)
"""Frozen: a patch added later is asked for by its own id (or by a later release's)."""


def patched(patch_id: str) -> bool:
    """``workflow.patched(patch_id)``, answered by ``RELEASE`` for the patches it covers."""
    if patch_id in AT_RELEASE and workflow.patched(RELEASE):
        return True
    return workflow.patched(patch_id)
