"""GitHub's webhook deliveries, end to end: ``loop ui`` takes them, Temporal acts.

``loop ui --sources`` runs as a user runs it, against the test server, with a real
worker and real git; deliveries are GitHub's own example payloads
(``@octokit/webhooks-examples``) for the test repository, signed with HMAC-SHA256 of
the raw body as GitHub signs them. The API the worker asks (a commenter's permission,
a reply) is ``tests.support.github``'s stand-in, checked against GitHub's description in
tests/unit/test_github_spec.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from loop.contracts import (
    GitHubDeliveryResult,
    TaskResult,
    TaskSpec,
    TaskState,
    TaskStatus,
    delivery_workflow_id,
    workflow_id_for,
)
from loop.hardened import answers
from loop.settings import Settings
from loop.tasks import start_task
from tests.e2e.test_triage import runs_of, started_spec
from tests.support.agents import FIX_AT_ONCE, write_agent
from tests.support.github import GitHubStandIn, issue, review_comment, serving
from tests.support.tasks import result_of, task, wait_for
from tests.support.triage import NOTHING, template, write_sources
from tests.support.ui import loop_ui
from tests.support.webhooks import (
    comment_event,
    deliver,
    issue_event,
    needs_examples,
    review_event,
    signature,
)
from worker import WORKFLOWS, build_worker

pytestmark = [pytest.mark.timeout(180), needs_examples]

TOKEN = "ghp_standin0123456789abcdefghijklmnopqrst"
REPO = "acme/app"
SECRET = b"webhook-secret-0123456789abcdef"


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[GitHubStandIn]:
    hub = GitHubStandIn(token=TOKEN, repos={REPO: [issue(REPO, 1, "Fix slugify", ["loop"])]})
    hub.permissions = {"ann": "write", "mallory": "read"}
    with serving(hub) as h:
        monkeypatch.setenv("GITHUB_TOKEN", TOKEN)  # the worker's, in this process
        monkeypatch.setenv("GITHUB_API_URL", h.url)
        yield h


def hooked(
    tmp_path: Path, demo_repo: Path, agent: str, source_has: dict | None = None, **tmpl: object
) -> tuple[str, Path, Path]:
    """A sources file with one github source for REPO (with ``source_has``), and the
    secret's file."""
    name = f"gh{uuid.uuid4().hex[:6]}"
    source = {
        "name": name,
        "kind": "github",
        "repo": REPO,
        "labels": {"include": ["loop"]},
        "autonomy": "assisted",
    } | (source_has or {})
    spec = template(demo_repo, write_agent(tmp_path, agent)) | tmpl
    file = write_sources(tmp_path, spec, [source])
    secret = tmp_path / "webhook.secret"
    secret.write_bytes(SECRET + b"\n")
    return name, file, secret


async def delivered(client: Client, delivery: str) -> GitHubDeliveryResult:
    handle = client.get_workflow_handle(
        delivery_workflow_id(delivery), result_type=GitHubDeliveryResult
    )
    return await handle.result()


def replies(hub: GitHubStandIn) -> list[dict]:
    """The comments that answer a delivery (not a task's status comment)."""
    return [c for c in hub.comments if c["body"].startswith("Loopwork: ")]


def status_comment(hub: GitHubStandIn, number: int) -> str:
    """The body of the task's one status comment on issue ``number``, as it is now."""
    (found,) = [
        c for c in hub.comments if c["number"] == number and c["body"].startswith("**Loopwork**")
    ]
    return str(found["body"])


async def labeled(
    client: Client, url: str, task_id: str, state: TaskState
) -> tuple[WorkflowHandle, TaskStatus]:
    """Issue 1 labeled ``loop`` on GitHub: its task started, and its status once in ``state``."""
    _, started = await deliver(url, "issues", issue_event("labeled", REPO, 1, ["loop"]), SECRET)
    await delivered(client, started)
    handle = client.get_workflow_handle(workflow_id_for(task_id), result_type=TaskResult)
    return handle, await wait_for(handle, lambda st: st.state == state)


async def said_on(hub: GitHubStandIn, number: int, text: str, within: float = 30) -> str:
    """The status comment of issue ``number`` once it says ``text`` (it is edited as the
    task goes)."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        with contextlib.suppress(ValueError):
            body = status_comment(hub, number)
            if text in body:
                return body
        assert asyncio.get_running_loop().time() < deadline, f"{text!r} never said on #{number}"
        await asyncio.sleep(0.2)


async def exists(client: Client, workflow_id: str) -> bool:
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError:
        return False
    return True


async def test_a_forged_delivery_is_refused_and_starts_nothing(
    client: Client,
    env: WorkflowEnvironment,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    hub: GitHubStandIn,
):
    name, file, secret = hooked(tmp_path, demo_repo, NOTHING)
    labeled = issue_event("labeled", REPO, 1, ["loop"])
    ui = loop_ui(env, settings, "--sources", str(file), LOOP_GITHUB_WEBHOOK_SECRET_FILE=str(secret))
    async with build_worker(client, settings), ui as url:
        forged, d1 = await deliver(url, "issues", labeled, b"not-the-secret-at-all")
        unsigned, d2 = await deliver(url, "issues", labeled, SECRET, signed="")
        tampered = labeled | {"action": "opened"}
        sig = (await deliver(url, "ping", labeled, SECRET))[0]
        assert sig.status_code == 200  # the page takes a well-signed delivery at all
        relabeled, d3 = await deliver(
            url, "issues", tampered, SECRET, signed=signature(SECRET, json.dumps(labeled).encode())
        )
        for d in (d1, d2, d3):
            assert not await exists(client, delivery_workflow_id(d))
        assert not await exists(client, workflow_id_for(f"{name}-acme-app-1"))
    assert [r.status_code for r in (forged, unsigned, relabeled)] == [401, 401, 401]
    assert forged.json() == {"message": "refused: X-Hub-Signature-256 is missing or wrong"}
    assert not hub.seen, "nothing asked of GitHub either"

    async with loop_ui(env, settings) as plain:  # no secret: the path does not exist
        off, _ = await deliver(plain, "issues", labeled, SECRET)
    assert off.status_code == 404


async def test_a_labeled_issue_starts_its_task_once_and_closing_it_cancels_it(
    client: Client,
    env: WorkflowEnvironment,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    hub: GitHubStandIn,
):
    name, file, secret = hooked(tmp_path, demo_repo, NOTHING)
    task_id = f"{name}-acme-app-1"
    labeled = issue_event("labeled", REPO, 1, ["loop", "bug"], sender="ann")
    ui = loop_ui(env, settings, "--sources", str(file), LOOP_GITHUB_WEBHOOK_SECRET_FILE=str(secret))
    async with build_worker(client, settings), ui as url:
        first, delivery = await deliver(url, "issues", labeled, SECRET)
        again, _ = await deliver(url, "issues", labeled, SECRET)  # another delivery id
        did = await delivered(client, delivery)
        opened, other = await deliver(
            url, "issues", issue_event("opened", REPO, 1, ["loop"]), SECRET
        )
        other_did = await delivered(client, other)
        unlabeled, skipped = await deliver(
            url, "issues", issue_event("opened", REPO, 2, ["docs"]), SECRET
        )
        skipped_did = await delivered(client, skipped)
        handle = client.get_workflow_handle(workflow_id_for(task_id), result_type=TaskResult)
        await wait_for(handle, lambda st: st.state == TaskState.NEEDS_HUMAN)
        spec, parent = await started_spec(client, task_id)

        closed, closing = await deliver(
            url, "issues", issue_event("closed", REPO, 1, ["loop"], sender="ann"), SECRET
        )
        closed_did = await delivered(client, closing)
        result = await result_of(handle)
        runs = await runs_of(client, task_id)

    assert (first.status_code, again.status_code) == (202, 200)
    wid = delivery_workflow_id(delivery)
    assert again.json() == {"message": f"already received: {delivery} (workflow {wid})"}
    assert did.did == [f"started {task_id}: new item"]
    assert parent == delivery_workflow_id(delivery)
    assert spec.goal.startswith("Fix slugify (#1)\n\nslugify(")
    assert f"(GitHub issue https://github.com/{REPO}/issues/1)" in spec.goal
    assert opened.status_code == 202 and other_did.did[0].startswith(f"not started {task_id}: ")
    assert "task open" in other_did.did[0]
    assert unlabeled.status_code == 202
    assert skipped_did.did == [f"not started {name}-acme-app-2: needs a label of: loop"]
    assert runs == 1, "one task for two deliveries of the issue and a redelivery"

    assert closed.status_code == 202
    assert closed_did.did == [f"cancelled {task_id}: issue closed on GitHub by ann"]
    assert result.state == TaskState.CANCELLED
    assert result.reason == "issue closed on GitHub by ann"
    assert not replies(hub), "issue events reply nothing"
    said = status_comment(hub, 1)  # the task's own comment, edited as it went: its end
    assert said.startswith(f"**Loopwork** · task `{task_id}` · **CANCELLED** · attempt 1 of 1")
    assert "issue closed on GitHub by ann" in said and "| tests | **fail** |" in said
    assert len(hub.edits) >= 2, hub.edits


async def test_loop_approve_is_taken_from_a_writer_and_refused_to_anyone_else(
    client: Client,
    env: WorkflowEnvironment,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    hub: GitHubStandIn,
):
    answers.create_key(settings.home / answers.KEY_NAME)  # the worker signs what it sends
    name, file, secret = hooked(tmp_path, demo_repo, FIX_AT_ONCE, autonomy="assisted")
    task_id = f"{name}-acme-app-1"
    ui = loop_ui(env, settings, "--sources", str(file), LOOP_GITHUB_WEBHOOK_SECRET_FILE=str(secret))
    async with build_worker(client, settings), ui as url:
        handle, _ = await labeled(client, url, task_id, TaskState.AWAITING_APPROVAL)

        sneaky = "/loop approve $(rm -rf ~) `id`"
        refused, d1 = await deliver(
            url, "issue_comment", comment_event(REPO, 1, sneaky, "mallory"), SECRET
        )
        refused_did = await delivered(client, d1)
        still = await wait_for(handle, lambda st: st.state == TaskState.AWAITING_APPROVAL)
        chatter, _ = await deliver(
            url, "issue_comment", comment_event(REPO, 1, "looks good to me", "ann"), SECRET
        )
        taken, d2 = await deliver(
            url, "issue_comment", comment_event(REPO, 1, "/loop approve ship it", "ann"), SECRET
        )
        taken_did = await delivered(client, d2)
        result = await result_of(handle)

    assert (refused.status_code, taken.status_code) == (202, 202)
    assert chatter.status_code == 200
    assert chatter.json() == {"message": "ignored: a comment not beginning with /loop"}
    assert still.state == TaskState.AWAITING_APPROVAL, "mallory's approve did nothing"
    first, second = replies(hub)
    assert first["number"] == 1 and first["body"].startswith(
        "Loopwork: `mallory` may not write to acme/app (the API says `read`), so nothing was done"
    )
    said = first["body"].removeprefix("Loopwork: ")
    assert refused_did.did == [f"replied in comment {first['id']}: {said}"]
    assert second["body"].startswith(f"Loopwork: {task_id}: approved")
    assert taken_did.did[0].startswith(f"replied in comment {second['id']}: {task_id}: approved")
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    signals = [e.detail for e in result.events if e.kind == "signal"]
    assert signals == ["approve: ship it (by github:ann)"], signals
    asked = [s.path.split("/")[-2] for s in hub.seen if "/collaborators/" in s.path]
    assert asked == ["mallory", "ann"], "chatter asks GitHub nothing"


async def test_a_replayed_signed_comment_changes_nothing_after_the_first(
    client: Client,
    env: WorkflowEnvironment,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    hub: GitHubStandIn,
):
    """The signature covers the body, not ``X-GitHub-Delivery``: the same signed
    ``/loop extend`` sent again under three new delivery ids is the same comment, refused
    by the server (``already received``), and the task is extended once."""
    answers.create_key(settings.home / answers.KEY_NAME)
    name, file, secret = hooked(tmp_path, demo_repo, NOTHING)
    task_id = f"{name}-acme-app-1"
    ui = loop_ui(env, settings, "--sources", str(file), LOOP_GITHUB_WEBHOOK_SECRET_FILE=str(secret))
    async with build_worker(client, settings), ui as url:
        handle, _ = await labeled(client, url, task_id, TaskState.NEEDS_HUMAN)
        extend = comment_event(REPO, 1, "/loop extend attempts=1", "ann")
        first, key = await deliver(url, "issue_comment", extend, SECRET)
        await delivered(client, key)
        replays = [(await deliver(url, "issue_comment", extend, SECRET))[0] for _ in range(3)]
        parked = await wait_for(
            handle, lambda st: st.state == TaskState.NEEDS_HUMAN and st.attempt == 2
        )
        # A new comment, the same words: a new answer, taken.
        again, other = await deliver(
            url, "issue_comment", comment_event(REPO, 1, "/loop extend attempts=1", "ann"), SECRET
        )
        await delivered(client, other)
        await wait_for(handle, lambda st: st.state == TaskState.NEEDS_HUMAN and st.attempt == 3)
        await handle.cancel()
        result = await result_of(handle)

    assert first.status_code == 202 and again.status_code == 202 and other != key
    wid = delivery_workflow_id(key)
    for replay in replays:
        assert replay.status_code == 200, replay.text
        assert replay.json() == {"message": f"already received: {key} (workflow {wid})"}
    assert parked.budget.left.attempts == 0, parked.budget
    extends = [e.detail for e in result.events if e.kind == "signal"]
    one = 'extend_budget: {"attempts":1,"seconds":0,"tokens":0,"cost_usd":0.0} (by github:ann)'
    assert extends == [one, one], extends
    assert len(replies(hub)) == 2, "one reply per comment, none per replay"


async def test_an_approval_said_before_the_commit_waited_approves_nothing(
    client: Client,
    env: WorkflowEnvironment,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    hub: GitHubStandIn,
):
    """A ``/loop approve`` made before the commit waiting was there (a failed delivery
    redelivered later, or replayed) approves nothing; one made while it waits does, once,
    however often it is sent again."""
    answers.create_key(settings.home / answers.KEY_NAME)
    name, file, secret = hooked(tmp_path, demo_repo, FIX_AT_ONCE, autonomy="assisted")
    task_id = f"{name}-acme-app-1"
    old = comment_event(REPO, 1, "/loop approve looked fine last week", "ann")
    old["comment"]["created_at"] = "2020-01-01T00:00:00Z"
    ui = loop_ui(env, settings, "--sources", str(file), LOOP_GITHUB_WEBHOOK_SECRET_FILE=str(secret))
    async with build_worker(client, settings), ui as url:
        handle, waiting = await labeled(client, url, task_id, TaskState.AWAITING_APPROVAL)
        shown = await said_on(hub, 1, f"Commit to approve: `{waiting.commit}`")
        _, d1 = await deliver(url, "issue_comment", old, SECRET)
        stale = await delivered(client, d1)
        still = await wait_for(handle, lambda st: st.state == TaskState.AWAITING_APPROVAL)
        now = comment_event(REPO, 1, "/loop approve ship it", "ann")
        _, d2 = await deliver(url, "issue_comment", now, SECRET)
        taken = await delivered(client, d2)
        replays = [(await deliver(url, "issue_comment", now, SECRET))[0] for _ in range(2)]
        result = await result_of(handle)

    assert waiting.waiting_since and len(waiting.commit) == 40
    assert f"before commit {waiting.commit[:12]} waited for one" in stale.did[0], stale.did
    assert still.state == TaskState.AWAITING_APPROVAL
    assert f"{task_id}: approved" in taken.did[0], taken.did
    assert [r.status_code for r in replays] == [200, 200]
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    signals = [e.detail for e in result.events if e.kind == "signal"]
    assert signals == ["approve: ship it (by github:ann)"], signals
    said = [c["body"] for c in replies(hub)]
    assert len(said) == 2 and said[0].startswith("Loopwork: `approve` not sent: this approval")
    assert shown.startswith(f"**Loopwork** · task `{task_id}` · **AWAITING_APPROVAL**")


async def test_an_approving_review_approves_where_the_source_says_so(
    client: Client,
    env: WorkflowEnvironment,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    hub: GitHubStandIn,
):
    """``approve_on_review: true``: a writer's approving review on the task's branch is the
    approval of the commit it reviewed, for the task awaiting approval of that commit (a
    reader's is nothing, a review of another commit is refused), one reply on the PR."""
    answers.create_key(settings.home / answers.KEY_NAME)
    name, file, secret = hooked(
        tmp_path, demo_repo, FIX_AT_ONCE, {"approve_on_review": True}, autonomy="assisted"
    )
    task_id = f"{name}-acme-app-1"
    branch = f"loop/{task_id}"
    ui = loop_ui(env, settings, "--sources", str(file), LOOP_GITHUB_WEBHOOK_SECRET_FILE=str(secret))
    async with build_worker(client, settings), ui as url:
        handle, waiting = await labeled(client, url, task_id, TaskState.AWAITING_APPROVAL)
        by_reader = review_event(REPO, 7, branch, 93, "approved", "LGTM", "mallory", waiting.commit)
        _, d1 = await deliver(url, "pull_request_review", by_reader, SECRET)
        ignored = await delivered(client, d1)
        # An approving review of an earlier head of the branch: not this commit's approval.
        stale = review_event(REPO, 7, branch, 95, "approved", "LGTM", "ann", "0" * 40)
        _, d0 = await deliver(url, "pull_request_review", stale, SECRET)
        refused = await delivered(client, d0)
        still = await wait_for(handle, lambda st: st.state == TaskState.AWAITING_APPROVAL)
        by_writer = review_event(REPO, 7, branch, 94, "approved", "LGTM", "ann", waiting.commit)
        taken, d2 = await deliver(url, "pull_request_review", by_writer, SECRET)
        approved = await delivered(client, d2)
        result = await result_of(handle)
        history = await client.get_workflow_handle(delivery_workflow_id(d2)).fetch_history()

    replayed = await Replayer(
        workflows=WORKFLOWS, data_converter=pydantic_data_converter
    ).replay_workflow(history)
    assert replayed.replay_failure is None
    assert ignored.did == [f"ignored: mallory may not write to {REPO}"]
    assert len(waiting.commit) == 40
    assert refused.did[0].startswith("replied in comment "), refused.did
    assert f"waits for approval of commit {waiting.commit[:12]}, not 000000000000" in refused.did[0]
    assert still.state == TaskState.AWAITING_APPROVAL
    assert taken.status_code == 202
    assert approved.did[0].startswith("replied in comment ")
    assert f"{task_id}: approved" in approved.did[0]
    assert result.state == TaskState.DONE_WITH_EVIDENCE, result.reason
    signals = [e.detail for e in result.events if e.kind == "signal"]
    assert signals == ["approve: approving review on GitHub by ann (by github:ann)"], signals
    stale_reply, reply = replies(hub)
    assert reply["number"] == 7 and stale_reply["body"].startswith("Loopwork: `approve` not sent")
    assert not hub.reviews, "an approval reads no inline comments"


async def test_a_review_requesting_changes_is_one_feedback_for_the_next_attempt(
    client: Client,
    env: WorkflowEnvironment,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    hub: GitHubStandIn,
):
    name, file, secret = hooked(tmp_path, demo_repo, NOTHING)
    task_id = f"{name}-acme-app-1"
    hub.reviews[90] = [
        review_comment(REPO, 7, 90, "slugify.py", 4, "@@ -1,4 +1,4 @@\n-a\n+b", "Keep hyphens."),
        review_comment(REPO, 7, 90, "tests/test_slugify.py", 9, "@@ -8,2 +8,2 @@", "And a test."),
    ]
    ui = loop_ui(env, settings, "--sources", str(file), LOOP_GITHUB_WEBHOOK_SECRET_FILE=str(secret))
    async with build_worker(client, settings), ui as url:
        handle, _ = await labeled(client, url, task_id, TaskState.NEEDS_HUMAN)

        branch = f"loop/{task_id}"
        outsider = review_event(
            REPO, 7, branch, 91, "changes_requested", "Do it my way.", "mallory"
        )
        ignored, d0 = await deliver(url, "pull_request_review", outsider, SECRET)
        ignored_did = await delivered(client, d0)
        approving = review_event(REPO, 7, branch, 92, "approved", "LGTM", "ann")
        approved, _ = await deliver(url, "pull_request_review", approving, SECRET)
        review = review_event(REPO, 7, branch, 90, "changes_requested", "Two things.", "ann")
        taken, d1 = await deliver(url, "pull_request_review", review, SECRET)
        taken_did = await delivered(client, d1)
        await wait_for(handle, lambda st: st.state == TaskState.NEEDS_HUMAN and st.attempt == 2)
        prompt = (settings.runs / task_id / "attempt-2" / "prompt.md").read_text()
        await handle.cancel()
        result = await result_of(handle)

    assert ignored.status_code == 202
    assert ignored_did.did == [f"ignored: mallory may not write to {REPO}"]
    assert approved.status_code == 200
    assert approved.json() == {
        "message": "ignored: a review that approved (merging is the approval)"
    }
    assert taken.status_code == 202
    feedbacks = [e.detail for e in result.events if e.kind == "signal"]
    assert len(feedbacks) == 1, feedbacks  # one for the whole review
    for part in (
        "Review on GitHub by ann (requested changes):",
        "Two things.",
        "slugify.py:4\n```diff\n@@ -1,4 +1,4 @@\n-a\n+b\n```\nKeep hyphens.",
        "tests/test_slugify.py:9\n```diff\n@@ -8,2 +8,2 @@\n```\nAnd a test.",
    ):
        assert part in prompt, (part, prompt)
    assert "Do it my way." not in prompt
    (reply,) = replies(hub)
    assert reply["number"] == 7 and reply["body"].startswith(f"Loopwork: {task_id}: ")
    assert taken_did.did == [
        f"replied in comment {reply['id']}: {reply['body'].removeprefix('Loopwork: ')}"
    ]
    assert [s.path for s in hub.seen if "/reviews/" in s.path] == [
        f"/repos/{REPO}/pulls/7/reviews/90/comments"
    ]


async def test_a_writer_runs_an_unlabeled_issue_gives_feedback_and_rejects_it(
    client: Client,
    env: WorkflowEnvironment,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    hub: GitHubStandIn,
):
    answers.create_key(settings.home / answers.KEY_NAME)  # signs the status marker
    name, file, secret = hooked(tmp_path, demo_repo, NOTHING)
    task_id = f"{name}-acme-app-3"

    async def said(url: str, body: str) -> GitHubDeliveryResult:
        payload = comment_event(REPO, 3, body, "ann")
        payload["issue"]["labels"] = [{"id": 9, "name": "docs", "color": "0075ca"}]
        # Through a proxy that passes GitHub's Host on: the page's loopback-name check,
        # which keeps DNS rebinding out of the review page, is not the hook's.
        resp, delivery = await deliver(
            url, "issue_comment", payload, SECRET, host="hooks.example.com"
        )
        assert resp.status_code == 202, resp.text
        return await delivered(client, delivery)

    ui = loop_ui(env, settings, "--sources", str(file), LOOP_GITHUB_WEBHOOK_SECRET_FILE=str(secret))
    async with build_worker(client, settings), ui as url:
        _, opened = await deliver(url, "issues", issue_event("opened", REPO, 3, ["docs"]), SECRET)
        not_started = await delivered(client, opened)
        run = await said(url, "/loop run")
        handle = client.get_workflow_handle(workflow_id_for(task_id), result_type=TaskResult)
        await wait_for(handle, lambda st: st.state == TaskState.NEEDS_HUMAN)
        feedback = await said(url, "/loop feedback keep hyphens\nand add a test")
        await wait_for(handle, lambda st: st.state == TaskState.NEEDS_HUMAN and st.attempt == 2)
        prompt = (settings.runs / task_id / "attempt-2" / "prompt.md").read_text()
        no_reason = await said(url, "/loop reject")
        rejected = await said(url, "/loop reject not needed after all")
        result = await result_of(handle)
        before = status_comment(hub, 3)
        # A retry runs the task again: the issue's one status comment follows the new run
        # (found by its signed marker), rather than a second one beside a stale REJECTED.
        retried = await said(url, "/loop retry")
        rerun = client.get_workflow_handle(workflow_id_for(task_id), result_type=TaskResult)
        await wait_for(rerun, lambda st: st.state == TaskState.NEEDS_HUMAN)
        for _ in range(100):
            if "**NEEDS_HUMAN**" in status_comment(hub, 3):
                break
            await asyncio.sleep(0.1)
        after = status_comment(hub, 3)
        await said(url, "/loop reject still not needed")
        await result_of(rerun)

    assert "**REJECTED**" in before and "**NEEDS_HUMAN**" in after, after
    assert f": started {task_id}: task ended REJECTED" in retried.did[0], retried.did
    assert not_started.did == [f"not started {task_id}: needs a label of: loop"]
    assert run.did[0].endswith(f": started {task_id}: new item")
    assert feedback.did[0].endswith(f": {task_id}: one more attempt with your feedback"), feedback
    assert "keep hyphens\nand add a test" in prompt
    assert no_reason.did[0].endswith(
        ": nothing was done: say why it is rejected: `/loop reject <reason>`"
    )
    assert result.state == TaskState.REJECTED and result.reason == "not needed after all"
    assert rejected.did[0].endswith(f": {task_id}: rejected; the task ends REJECTED")
    assert len(replies(hub)) == 6, "one reply per command"
    assert all(c["number"] == 3 for c in hub.comments)
    assert "**REJECTED**" in status_comment(hub, 3)  # one status comment, the rerun's end


async def test_a_task_started_under_the_id_from_before_is_still_the_issues(
    client: Client,
    env: WorkflowEnvironment,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    hub: GitHubStandIn,
):
    """Ids name the repository now (``gh-acme-app-1``); a task that runs under the id it
    got before (``gh-1``) is still issue 1's: the issue's events do not start a second
    one, and its ``/loop`` answers and its close reach it."""
    name, file, secret = hooked(tmp_path, demo_repo, NOTHING)
    former = task(demo_repo, write_agent(tmp_path, NOTHING), id=f"{name}-1", approval_timeout=600)
    ui = loop_ui(env, settings, "--sources", str(file), LOOP_GITHUB_WEBHOOK_SECRET_FILE=str(secret))
    async with build_worker(client, settings), ui as url:
        handle, _ = await start_task(client, TaskSpec.model_validate(former), settings.task_queue)
        st = await wait_for(handle, lambda st: st.state == TaskState.NEEDS_HUMAN)
        _, labeled = await deliver(url, "issues", issue_event("labeled", REPO, 1, ["loop"]), SECRET)
        not_again = await delivered(client, labeled)
        payload = comment_event(REPO, 1, "/loop feedback keep the hyphens", "ann")
        _, commented = await deliver(url, "issue_comment", payload, SECRET)
        fed = await delivered(client, commented)
        more = st.attempt + 1
        await wait_for(handle, lambda st: st.state == TaskState.NEEDS_HUMAN and st.attempt == more)
        closing = issue_event("closed", REPO, 1, ["loop"], sender="ann")
        _, closed = await deliver(url, "issues", closing, SECRET)
        closed_did = await delivered(client, closed)
        result = await result_of(handle)
        new_one = await exists(client, workflow_id_for(f"{name}-acme-app-1"))
    assert not_again.did[0].startswith(f"not started {name}-acme-app-1: task open"), not_again
    assert fed.did[0].endswith("one more attempt with your feedback"), fed.did
    assert closed_did.did == [f"cancelled {name}-1: issue closed on GitHub by ann"]
    assert result.state == TaskState.CANCELLED and not new_one
