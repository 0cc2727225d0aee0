"""One patch marker per run, on a real server: a task started on today's code records the
release's marker and nothing else, and a task started by the code before it (every patch
by its own id) goes on under today's code as it would have (workflows/patches.py).

The older histories stored in tests/workflow/histories/ replay in test_replay.py; here
the run is live on both sides of the upgrade, which a stored history cannot show.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from loop.contracts import SIGNAL_APPROVE, FinalAction, TaskState
from loop.settings import Settings
from tests.support.agents import FIX_AT_ONCE, write_agent
from tests.support.tasks import result_of, start, task, wait_for
from worker import WORKFLOWS, build_worker
from workflows import patches

pytestmark = pytest.mark.timeout(120)


async def patch_ids(handle: WorkflowHandle) -> list[str]:
    """The patch markers of the run, in order."""
    found = []
    async for ev in handle.fetch_history_events():
        marker = ev.marker_recorded_event_attributes
        if ev.HasField("marker_recorded_event_attributes") and marker.marker_name == "core_patch":
            found.append(json.loads(marker.details["patch-data"].payloads[0].data)["id"])
    return found


async def version_upserts(handle: WorkflowHandle) -> int:
    """Upserts of ``TemporalChangeVersion``: each one a visibility write on the server."""
    count = 0
    async for ev in handle.fetch_history_events():
        if ev.HasField("upsert_workflow_search_attributes_event_attributes"):
            fields = ev.upsert_workflow_search_attributes_event_attributes.search_attributes
            count += "TemporalChangeVersion" in fields.indexed_fields
    return count


async def replays(handle: WorkflowHandle) -> bool:
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    replayed = await replayer.replay_workflow(await handle.fetch_history())
    return replayed.replay_failure is None


async def test_a_new_task_records_the_release_marker_only(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path
):
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="assisted")
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        await wait_for(handle, lambda s: s.state == TaskState.AWAITING_APPROVAL)
        await handle.signal(SIGNAL_APPROVE, {"note": "fine"})
        result = await result_of(handle)
    assert (result.state, result.final_action) == (
        TaskState.DONE_WITH_EVIDENCE,
        FinalAction.MERGED,
    )
    # Four patches of AT_RELEASE were asked for on the way (publish-changes,
    # period-local, settle-held-only, reason-in-memo at least): one marker for all.
    assert await patch_ids(handle) == [patches.RELEASE]
    assert await version_upserts(handle) == 1
    assert await replays(handle)


async def test_a_task_started_before_the_release_marker_goes_on_as_it_was(
    client: Client,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
):
    """The code before the release marker is today's with the marker never asked for
    (False, and nothing recorded: as if there were none). Its worker stops while the task
    waits for approval; today's worker (a new process would hold no cached run either)
    replays the run, which has no release marker, and goes on asking each patch by its
    own id."""
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="assisted")
    asked = workflow.patched

    def before_the_release(patch_id: str) -> bool:
        return patch_id != patches.RELEASE and asked(patch_id)

    monkeypatch.setattr(workflow, "patched", before_the_release)
    async with build_worker(client, settings):
        handle = await start(client, settings, spec)
        await wait_for(handle, lambda s: s.state == TaskState.AWAITING_APPROVAL)
    before = await patch_ids(handle)
    assert "publish-changes" in before and patches.RELEASE not in before
    monkeypatch.undo()
    async with build_worker(client, settings):
        await handle.signal(SIGNAL_APPROVE, {"note": "after the upgrade"})
        result = await result_of(handle)
    assert (result.state, result.final_action) == (
        TaskState.DONE_WITH_EVIDENCE,
        FinalAction.MERGED,
    )
    after = await patch_ids(handle)
    assert after[: len(before)] == before and patches.RELEASE not in after
    # Asked for first after the upgrade, live: recorded by its own id, as the old code did.
    assert "signed-answers" in after[len(before) :]
    assert await replays(handle)
