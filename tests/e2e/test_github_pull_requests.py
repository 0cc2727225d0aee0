"""A task's pull request on GitHub, end to end: opened, reviewed, merged or closed there.

As ``test_github_hooks``: ``loop ui --sources`` with the webhook secret, a real worker,
real git (the task's repository is a bare clone of the demo's, by URL, which the pull
request's branch is pushed to), GitHub's own example payloads signed as GitHub signs
them, and the stand-in API (``tests.support.github``) the worker opens the pull
request on.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from loop.contracts import WAITING_PULL_REQUEST, FinalAction, TaskResult, TaskState, workflow_id_for
from loop.hardened import answers
from loop.settings import Settings
from tests.e2e.test_github_hooks import (  # noqa: F401  (hub: a fixture)
    REPO,
    SECRET,
    delivered,
    hub,
    replies,
    status_comment,
)
from tests.support.agents import write_agent
from tests.support.github import GitHubStandIn, annotation, check_run, review_comment
from tests.support.tasks import result_of, wait_for
from tests.support.triage import template, write_sources
from tests.support.ui import loop_ui
from tests.support.webhooks import (
    closed_event,
    comment_event,
    deliver,
    issue_event,
    needs_examples,
    review_event,
)
from worker import WORKFLOWS, build_worker
from workflows import patches

pytestmark = needs_examples

FIX_THEN_REVISE = """
text = COMPLETE if attempt == 1 else COMPLETE + "\\n# hyphens kept, as the review asked\\n"
pathlib.Path("slugify.py").write_text(text)
out.write_text("done")
"""
"""Fixes the demo; asked again (a review), changes the file once more."""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


def remote_of(demo_repo: Path, tmp_path: Path) -> Path:
    """A bare clone of the demo repository: the task's remote, where its branch is pushed."""
    bare = tmp_path / f"origin-{uuid.uuid4().hex[:6]}.git"
    git(tmp_path, "clone", "-q", "--bare", str(demo_repo), str(bare))
    return bare


def sources(tmp_path: Path, demo_repo: Path, bare: Path, **tmpl: object) -> tuple[str, Path, Path]:
    """An unattended github source whose tasks open a pull request instead of merging."""
    name = f"gh{uuid.uuid4().hex[:6]}"
    source = {
        "name": name,
        "kind": "github",
        "repo": REPO,
        "labels": {"include": ["loop"]},
        "autonomy": "unattended",
    }
    spec = template(demo_repo, write_agent(tmp_path, FIX_THEN_REVISE)) | {
        "repo": bare.as_uri(),
        "autonomy": "unattended",
        "finalize": {"pull_request": True, "github": REPO},
    }
    spec |= tmpl
    file = write_sources(tmp_path, spec, [source])
    secret = tmp_path / "webhook.secret"
    secret.write_bytes(SECRET + b"\n")
    return name, file, secret


async def test_a_review_updates_the_pull_request_and_a_merge_on_github_ends_the_task(
    client: Client,
    env: WorkflowEnvironment,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    hub: GitHubStandIn,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
):
    answers.create_key(settings.home / answers.KEY_NAME)  # the worker signs what it sends
    monkeypatch.setattr("activities.gates.checks.POLL_S", 0.2)
    bare = remote_of(demo_repo, tmp_path)
    ci = {"name": "ci", "github_checks": {"required": ["build"], "timeout": 60}}
    verify = [*template(demo_repo, [])["verify"], ci]
    name, file, secret = sources(tmp_path, demo_repo, bare, verify=verify)
    hub.check_plan = [[check_run(REPO, 50, "build", "success", "All good")]]  # CI green
    task_id = f"{name}-acme-app-1"
    branch = f"loop/{task_id}"
    ui = loop_ui(env, settings, "--sources", str(file), LOOP_GITHUB_WEBHOOK_SECRET_FILE=str(secret))
    async with build_worker(client, settings), ui as url:
        _, started = await deliver(url, "issues", issue_event("labeled", REPO, 1, ["loop"]), SECRET)
        await delivered(client, started)
        handle = client.get_workflow_handle(workflow_id_for(task_id), result_type=TaskResult)
        waiting = await wait_for(handle, lambda st: st.waiting_for == WAITING_PULL_REQUEST)
        (pr,) = hub.pulls
        first_push = git(bare, "rev-parse", branch)

        # A review id of its own: deliveries are keyed by the review's id, and this test's
        # dev server saw test_github_hooks' review 90 already.
        hub.reviews[190] = [
            review_comment(REPO, pr["number"], 190, "slugify.py", 4, "@@ -1 +1 @@", "Say so."),
        ]
        review = review_event(REPO, pr["number"], branch, 190, "changes_requested", "One.", "ann")
        _, reviewed = await deliver(url, "pull_request_review", review, SECRET)
        reviewed_did = await delivered(client, reviewed)
        again = await wait_for(
            handle, lambda st: st.waiting_for == WAITING_PULL_REQUEST and st.attempt == 2
        )
        prompt = (settings.runs / task_id / "attempt-2" / "prompt.md").read_text()
        second_push = git(bare, "rev-parse", branch)

        other = closed_event(REPO, 55, "feature/x", merged=True, sender="ann")
        not_ours, _ = await deliver(url, "pull_request", other, SECRET)
        merged = closed_event(REPO, pr["number"], branch, merged=True, sender="ann")
        taken, closing = await deliver(url, "pull_request", merged, SECRET)
        closed_did = await delivered(client, closing)
        result = await result_of(handle)
        history = await handle.fetch_history()

    # The whole run (a review, a second attempt, the merge, the status comment beside it)
    # replays on this code: the new paths are deterministic.
    replayed = await Replayer(
        workflows=WORKFLOWS, data_converter=pydantic_data_converter
    ).replay_workflow(history)
    assert replayed.replay_failure is None
    markers = [
        json.loads(e.marker_recorded_event_attributes.details["patch-data"].payloads[0].data)
        for e in history.events
        if e.HasField("marker_recorded_event_attributes")
        and e.marker_recorded_event_attributes.marker_name == "core_patch"
    ]
    # pull-request-outcome, github-status-comment and commit-status, under one marker;
    # the patch added after the release by its own id, when the review's answer came.
    assert [m["id"] for m in markers] == [patches.RELEASE, "bound-answers"]

    assert waiting.state == TaskState.AWAITING_APPROVAL
    assert pr["head"]["ref"] == branch and pr["base"]["ref"] == "main"
    assert reviewed_did.did[0].endswith(f"{task_id}: your feedback goes into the next attempt")
    assert "Review on GitHub by ann (requested changes):" in prompt
    assert "slugify.py:4\n```diff\n@@ -1 +1 @@\n```\nSay so." in prompt
    assert again.state == TaskState.AWAITING_APPROVAL
    assert second_push != first_push, "the next attempt pushed to the same branch"
    assert "# hyphens kept" in git(bare, "show", f"{second_push}:slugify.py")
    assert "# hyphens kept" not in git(bare, "show", f"{first_push}:slugify.py")
    assert len(hub.pushed) == 2 and len(hub.pulls) == 1, "the same pull request, updated"
    assert not_ours.status_code == 200
    assert not_ours.json() == {
        "message": "ignored: a pull request of feature/x, not of a task's branch"
    }
    assert taken.status_code == 202
    assert closed_did.did == ["merged; the task ends DONE_WITH_EVIDENCE"]
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert result.final_action == FinalAction.MERGED_BY_PERSON
    assert result.reason == f"verified; {pr['html_url']} merged on GitHub by ann"
    assert result.commit == second_push
    assert [a.attempt for a in result.attempts] == [1, 2]
    signals = [e.detail for e in result.events if e.kind == "signal"]
    assert signals[-1] == "pull_request_closed: merged by ann (by github:ann)", signals
    said = status_comment(hub, 1)
    head = f"**Loopwork** · task `{task_id}` · **DONE_WITH_EVIDENCE** · attempt 2 of 2"
    assert said.startswith(head), said
    assert "merged on GitHub by ann" in said and "| tests | pass |" in said
    assert "Pull request: https" in said and len(replies(hub)) == 1
    # loopwork/verify on each attempt's pushed commit and on each head of the pull request
    assert [(s["state"], s["context"]) for s in hub.statuses] == [
        ("success", "loopwork/verify")
    ] * 4
    assert {first_push, second_push} <= {s["sha"] for s in hub.statuses}
    described = "tests pass, scope pass, keep-tests pass, ci pass"
    assert all(s["description"] == described for s in hub.statuses)
    assert hub.check_shas == [a.make.commit for a in result.attempts], "CI asked per attempt"
    assert "| ci | pass |" in said


async def test_a_pull_request_closed_unmerged_by_a_writer_rejects_the_task(
    client: Client,
    env: WorkflowEnvironment,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    hub: GitHubStandIn,  # noqa: F811
):
    answers.create_key(settings.home / answers.KEY_NAME)
    name, file, secret = sources(tmp_path, demo_repo, remote_of(demo_repo, tmp_path))
    task_id = f"{name}-acme-app-1"
    branch = f"loop/{task_id}"
    ui = loop_ui(env, settings, "--sources", str(file), LOOP_GITHUB_WEBHOOK_SECRET_FILE=str(secret))
    async with build_worker(client, settings), ui as url:
        _, started = await deliver(url, "issues", issue_event("labeled", REPO, 1, ["loop"]), SECRET)
        await delivered(client, started)
        handle = client.get_workflow_handle(workflow_id_for(task_id), result_type=TaskResult)
        await wait_for(handle, lambda st: st.waiting_for == WAITING_PULL_REQUEST)
        (pr,) = hub.pulls
        by_reader = closed_event(REPO, pr["number"], branch, merged=False, sender="mallory")
        _, d1 = await deliver(url, "pull_request", by_reader, SECRET)
        ignored = await delivered(client, d1)
        still = await wait_for(handle, lambda st: st.waiting_for == WAITING_PULL_REQUEST)
        by_writer = closed_event(REPO, pr["number"], branch, merged=False, sender="ann")
        _, d2 = await deliver(url, "pull_request", by_writer, SECRET)
        rejected = await delivered(client, d2)
        result = await result_of(handle)
        replayed, _ = await deliver(url, "pull_request", by_writer, SECRET)  # the same body
        closed_again = closed_event(REPO, pr["number"], branch, merged=False, sender="ann")
        _, d3 = await deliver(url, "pull_request", closed_again, SECRET)  # a new event, late
        late = await delivered(client, d3)

    assert ignored.did == [f"ignored: mallory may not write to {REPO}"]
    assert still.state == TaskState.AWAITING_APPROVAL
    assert rejected.did == ["closed unmerged; the task ends REJECTED"]
    assert result.state == TaskState.REJECTED
    assert result.reason == "closed on GitHub by ann"
    assert result.final_action == FinalAction.PULL_REQUEST
    assert replayed.status_code == 200 and replayed.json()["message"].startswith(
        f"already received: {d2} "
    )
    assert late.did[0].startswith("pull_request_closed not sent: ")
    assert "has ended REJECTED" in late.did[0]
    assert not replies(hub), "nothing is said on a closed pull request"
    assert "**REJECTED**" in status_comment(hub, 1)
    assert "closed on GitHub by ann" in status_comment(hub, 1)


async def test_loop_commands_on_a_tasks_pull_request_answer_its_task(
    client: Client,
    env: WorkflowEnvironment,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    hub: GitHubStandIn,  # noqa: F811
):
    """``/loop`` on the pull request: the task its branch names, the writer check, one
    reply on the pull request each."""
    answers.create_key(settings.home / answers.KEY_NAME)
    name, file, secret = sources(tmp_path, demo_repo, remote_of(demo_repo, tmp_path))
    task_id = f"{name}-acme-app-1"
    ui = loop_ui(env, settings, "--sources", str(file), LOOP_GITHUB_WEBHOOK_SECRET_FILE=str(secret))

    async def said(url: str, number: int, body: str, sender: str) -> list[str]:
        payload = comment_event(REPO, number, body, sender, on_pull=True)
        resp, delivery = await deliver(url, "issue_comment", payload, SECRET)
        assert resp.status_code == 202, resp.text
        return (await delivered(client, delivery)).did

    async with build_worker(client, settings), ui as url:
        _, started = await deliver(url, "issues", issue_event("labeled", REPO, 1, ["loop"]), SECRET)
        await delivered(client, started)
        handle = client.get_workflow_handle(workflow_id_for(task_id), result_type=TaskResult)
        await wait_for(handle, lambda st: st.waiting_for == WAITING_PULL_REQUEST)
        (pr,) = hub.pulls
        number = pr["number"]
        by_reader = await said(url, number, "/loop reject no", "mallory")
        still = await wait_for(handle, lambda st: st.waiting_for == WAITING_PULL_REQUEST)
        hub.pulls.append(pr | {"number": 77, "head": pr["head"] | {"ref": "feature/x"}})
        not_a_task = await said(url, 77, "/loop reject no", "ann")
        retry = await said(url, number, "/loop retry", "ann")
        feedback = await said(url, number, "/loop feedback keep the hyphens, @team", "ann")
        again = await wait_for(
            handle, lambda st: st.waiting_for == WAITING_PULL_REQUEST and st.attempt == 2
        )
        prompt = (settings.runs / task_id / "attempt-2" / "prompt.md").read_text()
        rejected = await said(url, number, "/loop reject not needed after all", "ann")
        result = await result_of(handle)
        history = await handle.fetch_history()

    replayed = await Replayer(
        workflows=WORKFLOWS, data_converter=pydantic_data_converter
    ).replay_workflow(history)
    assert replayed.replay_failure is None
    assert still.state == TaskState.AWAITING_APPROVAL and still.attempt == 1
    assert "may not write to acme/app" in by_reader[0]
    assert "is not a Loopwork task's" in not_a_task[0] and "feature/x" not in not_a_task[0]
    assert "starts an issue's task; say it on the issue" in retry[0]
    assert feedback[0].endswith(f"{task_id}: your feedback goes into the next attempt")
    assert "keep the hyphens, @team" in prompt
    assert again.attempt == 2
    assert rejected[0].startswith("replied in comment ")
    assert result.state == TaskState.REJECTED
    assert "not needed after all" in result.reason
    assert [c["number"] for c in replies(hub)] == [number, 77, number, number, number]
    asked = [s.path for s in hub.seen]
    assert asked.count(f"/repos/{REPO}/pulls/{number}") == 2, "for feedback and reject"


async def test_a_failed_required_check_is_fed_back_with_its_annotations(
    client: Client,
    env: WorkflowEnvironment,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    hub: GitHubStandIn,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr("activities.gates.checks.POLL_S", 0.2)
    bare = remote_of(demo_repo, tmp_path)
    tmpl = template(demo_repo, [])
    ci = {"name": "ci", "github_checks": {"required": ["build"], "timeout": 60}}
    name, file, secret = sources(
        tmp_path,
        demo_repo,
        bare,
        verify=[*tmpl["verify"], ci],
        budget={"max_attempts": 2, "max_stalled_attempts": 2},
    )
    task_id = f"{name}-acme-app-1"
    hub.check_plan = [
        [check_run(REPO, 41, "build", "failure", "1 error", "ruff found a problem.")],
        [check_run(REPO, 42, "build", "success", "All good")],
    ]
    hub.annotations[41] = [annotation("slugify.py", 4, "failure", "E999 keep @hyphens")]
    hub.polls_pending = 2  # the CI reports a moment after the push
    ui = loop_ui(env, settings, "--sources", str(file), LOOP_GITHUB_WEBHOOK_SECRET_FILE=str(secret))
    async with build_worker(client, settings), ui as url:
        _, started = await deliver(url, "issues", issue_event("labeled", REPO, 1, ["loop"]), SECRET)
        await delivered(client, started)
        handle = client.get_workflow_handle(workflow_id_for(task_id), result_type=TaskResult)
        waiting = await wait_for(
            handle, lambda st: st.waiting_for == WAITING_PULL_REQUEST, within=120
        )
        prompt = (settings.runs / task_id / "attempt-2" / "prompt.md").read_text()
        await handle.cancel()
        result = await result_of(handle)

    assert waiting.attempt == 2
    first, second = result.attempts
    assert first.verdict is not None and second.verdict is not None
    (failed,) = [g for g in first.verdict.gates if g.name == "ci"]
    assert not failed.passed and not failed.uncertain
    assert failed.evidence.detail == "build failure"
    assert "slugify.py:4: [failure] E999 keep @hyphens" in failed.evidence.failure
    for part in ("build title: 1 error", "ruff found a problem.", "E999 keep @hyphens"):
        assert part in prompt, (part, prompt)
    (passed,) = [g for g in second.verdict.gates if g.name == "ci"]
    assert passed.passed and passed.evidence.detail.startswith("all succeeded on ")
    assert hub.check_shas[:2] == [first.make.commit, second.make.commit]
    assert hub.polls[hub.check_shas[0]] == 3, "it waited for the CI to report"
    said = status_comment(hub, 1)
    assert "E999 keep ＠hyphens" not in said  # the table shows the last verdict: passed
    assert "| ci | pass |" in said and "@" not in said


async def test_a_chosen_candidates_pull_request_is_its_tasks(
    client: Client,
    env: WorkflowEnvironment,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    hub: GitHubStandIn,  # noqa: F811
):
    """A task with candidates opens its pull request from the chosen one's branch,
    ``loop/<id>/<name>``: a review of it reaches the task (the chosen candidate alone
    attempts again, on the same branch), and its merge on GitHub ends the task."""
    answers.create_key(settings.home / answers.KEY_NAME)
    wrong = write_agent(tmp_path, 'pathlib.Path("slugify.py").write_text("x = 1\\n")\n')
    fixer = write_agent(tmp_path, FIX_THEN_REVISE)
    candidates = [{"name": "one", "agent": {"command": wrong}},
                  {"name": "two", "agent": {"command": fixer}}]  # fmt: skip
    name, file, secret = sources(
        tmp_path, demo_repo, remote_of(demo_repo, tmp_path), candidates=candidates
    )
    task_id = f"{name}-acme-app-1"
    branch = f"loop/{task_id}/two"
    ui = loop_ui(env, settings, "--sources", str(file), LOOP_GITHUB_WEBHOOK_SECRET_FILE=str(secret))
    async with build_worker(client, settings), ui as url:
        _, started = await deliver(url, "issues", issue_event("labeled", REPO, 1, ["loop"]), SECRET)
        await delivered(client, started)
        handle = client.get_workflow_handle(workflow_id_for(task_id), result_type=TaskResult)
        await wait_for(handle, lambda st: st.waiting_for == WAITING_PULL_REQUEST, within=120)
        (pr,) = hub.pulls
        hub.reviews[191] = []
        review = review_event(
            REPO, pr["number"], branch, 191, "changes_requested", "Say so.", "ann"
        )
        _, reviewed = await deliver(url, "pull_request_review", review, SECRET)
        reviewed_did = await delivered(client, reviewed)
        await wait_for(
            handle,
            lambda st: st.waiting_for == WAITING_PULL_REQUEST and st.attempt == 2,
            within=120,
        )
        merged = closed_event(REPO, pr["number"], branch, merged=True, sender="ann")
        _, closing = await deliver(url, "pull_request", merged, SECRET)
        closed_did = await delivered(client, closing)
        result = await result_of(handle)
    assert pr["head"]["ref"] == branch
    assert reviewed_did.did[0].endswith(f"{task_id}: your feedback goes into the next attempt")
    assert closed_did.did == ["merged; the task ends DONE_WITH_EVIDENCE"]
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    assert result.final_action == FinalAction.MERGED_BY_PERSON and result.chosen == "two"
    two = next(c for c in result.candidates if c.name == "two")
    assert [a.attempt for a in two.attempts] == [1, 2]  # the review's attempt was its own
    one = next(c for c in result.candidates if c.name == "one")
    assert len(one.attempts) == 1
