"""The review page end to end: the real dev server, a real worker, ``loop ui`` as a
subprocess, and headless Chromium (Debian's ``chromium``) driven by Playwright.

Where no browser is installed the browser tests skip with the reason, unless
``LOOP_BROWSER_REQUIRED=1`` (``.ci/run`` sets it): then they fail. Screenshots of the
tasks page and a task page are saved in the test's temporary folder; docs/guides/review-page.md
says how to make them.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from loop.codec import KEY_ENV, data_converter
from loop.contracts import QUERY_STATUS, TaskSpec, TaskState, TaskStatus
from loop.hardened import answers
from loop.settings import Settings
from loop.tasks import local_user, start_task
from tests.e2e.test_progress import (
    SLOW_AGENT,
    SLOW_MODEL_AGENT,
    WATCH_S,
    Seen,
    assert_moving,
    slow_model,
)
from tests.support.agents import write_agent
from tests.support.tasks import answers_in_history, result_of, task
from tests.support.ui import LOOP, loop_ui, ui_env
from worker import build_worker

pytestmark = pytest.mark.timeout(150)

CHROMIUM = shutil.which("chromium") or ""
"""Debian's chromium, found on PATH as a newcomer's machine would (``.ci/bare-path`` hides it)."""
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
BROWSER_REQUIRED = os.environ.get("LOOP_BROWSER_REQUIRED", "") == "1"
"""``.ci/run`` sets it: a missing browser fails these tests instead of skipping them."""


def browser_missing() -> str:
    if not CHROMIUM:
        return "no browser: Debian's chromium is not installed (apt-get install chromium)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "no browser driver: Playwright for Python is not installed (pip install -e .[dev])"
    return ""


FIX_AT_ONCE = """
pathlib.Path("slugify.py").write_text(COMPLETE)
out.write_text("slugify now joins the words with single hyphens")
"""
PASS_ON_SECOND = """
if attempt == 1:
    pathlib.Path("slugify.py").write_text("def slugify(t):\\n    return t.lower()\\n")
    out.write_text("lowercased the title; all done")
else:
    pathlib.Path("slugify.py").write_text(COMPLETE)
    out.write_text("slugify now joins the words with single hyphens")
"""
SLOW = """
time.sleep(50)
"""


# --------------------------------------------------------------------------- helpers (copied)


async def wait_for(handle: WorkflowHandle, pred, within_s: float = 60) -> TaskStatus:
    deadline = time.monotonic() + within_s
    while True:
        st = await handle.query(QUERY_STATUS, result_type=TaskStatus)
        if pred(st):
            return st
        assert time.monotonic() < deadline, f"gave up waiting; last status {st}"
        await asyncio.sleep(0.2)


async def start(client: Client, settings: Settings, spec: dict) -> WorkflowHandle:
    handle, started = await start_task(client, TaskSpec.model_validate(spec), settings.task_queue)
    assert started
    return handle


def git_show(repo: Path, what: str) -> str:
    return subprocess.run(
        ["git", "show", what], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


async def run_ui(env: WorkflowEnvironment, settings: Settings, *args: str, **extra: str):
    """``loop ui ARGS`` expected to stop by itself: (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        LOOP,
        "ui",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=ui_env(env, settings, **extra),
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        pytest.fail(f"loop ui {' '.join(args)} kept running")
    return proc.returncode, out.decode(), err.decode()


@pytest_asyncio.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    missing = browser_missing()
    if missing:
        if BROWSER_REQUIRED:
            pytest.fail(f"{missing} (LOOP_BROWSER_REQUIRED=1)")
        pytest.skip(missing)
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()


@pytest_asyncio.fixture
async def page(browser: Any) -> AsyncIterator[Any]:
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield await context.new_page()
    finally:
        await context.close()


# --------------------------------------------------------------------------- the tests


async def test_approve_from_the_page_merges_and_the_page_follows(
    env: WorkflowEnvironment,
    client: Client,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    page: Any,
) -> None:
    """An assisted task waits; the page lists it first, shows its diff and every gate's
    evidence; Approve merges it and the page shows DONE_WITH_EVIDENCE without a reload."""
    repo = str(demo_repo)
    answers.create_key(settings.home / answers.KEY_NAME)  # as `loop dev` makes it: signed answers
    waiting = task(demo_repo, write_agent(tmp_path, PASS_ON_SECOND), autonomy="assisted")
    other = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="report")
    async with build_worker(client, settings), loop_ui(env, settings) as url:
        handle = await start(client, settings, waiting)
        await wait_for(handle, lambda s: s.state == TaskState.AWAITING_APPROVAL)
        done = await start(client, settings, other)  # newer, but not waiting
        assert (await result_of(done)).state == TaskState.DONE_WITH_EVIDENCE

        await page.goto(f"{url}/?repo={repo}")
        rows = page.locator("table.tasks tbody tr")
        assert await rows.count() == 2
        assert await rows.nth(0).get_attribute("data-task") == waiting["id"]
        first = await rows.nth(0).inner_text()
        assert (
            "AWAITING_APPROVAL" in first
            and "2 of 3" in first
            and "approval (loop approve, or loop reject)" in first
        )
        assert "DONE_WITH_EVIDENCE" in await rows.nth(1).inner_text()
        await page.screenshot(path=str(tmp_path / "tasks.png"), full_page=True)
        await page.select_option("select[name=state]", "AWAITING_APPROVAL")
        await page.click(".filters button[type=submit]")
        await page.wait_for_url(re.compile(r"state=AWAITING_APPROVAL"))
        assert await rows.count() == 1
        assert await rows.nth(0).get_attribute("data-task") == waiting["id"]

        await page.click(f"a[href='/tasks/{waiting['id']}']")
        await page.wait_for_selector("#state[data-state=AWAITING_APPROVAL]")
        # The diff of the attempt against base, per file, coloured by Pygments.
        diff_file = page.locator(".diff-file[data-file='slugify.py']")
        assert "findall" in await diff_file.inner_text()
        assert await diff_file.locator("tr.add .src span.k, tr.add .src span.kn").count() > 0
        # Each gate's evidence, attempt by attempt: the failing test's exit code and output
        # tail, the files the scope judged, the agent's claim next to the verdict, and the
        # feedback that went into the next attempt.
        failed = await page.locator("#attempt-1 tr.gate[data-gate='tests']").inner_text()
        assert "FAIL" in failed and re.search(r"\b1\b", failed) and "AssertionError" in failed
        assert "lowercased the title" in await page.locator("#attempt-1 .claim").inner_text()
        fed = await page.locator("#attempt-1 .fed").inner_text()
        assert "feedback into attempt 2" in fed.lower() and "tests" in fed
        for name in ("tests", "scope", "keep-tests"):
            gate = page.locator(f"#attempt-2 tr.gate[data-gate='{name}']")
            assert "pass" in await gate.inner_text()
        scope_gate = await page.locator("#attempt-2 tr.gate[data-gate='scope']").inner_text()
        assert "slugify.py" in scope_gate
        assert "single hyphens" in await page.locator("#attempt-2 .claim").inner_text()
        await page.screenshot(path=str(tmp_path / "task.png"), full_page=True)

        await page.fill("form.approve input[name=note]", "reviewed on the page")
        await page.click("form.approve button[type=submit]")
        flash = await page.wait_for_selector("[data-flash=ok]")
        assert flash is not None
        said = f"{waiting['id']}: approved; merge of loop/{waiting['id']} into main requested"
        assert said in await flash.inner_text()  # what the task said it did
        await page.evaluate("window.__notReloaded = true")
        await page.wait_for_selector("#state[data-state=DONE_WITH_EVIDENCE]", timeout=60_000)
        assert await page.evaluate("window.__notReloaded === true")  # the live parts, no reload
        assert await page.locator("form.approve").count() == 0
        await page.screenshot(path=str(tmp_path / "task-done.png"), full_page=True)

        result = await result_of(handle)
        # Merged: its clone and branch are gone, its diff is not (refs/loopwork/<id>).
        assert not Path(result.worktree).exists()
        await page.reload()
        await page.wait_for_selector("#state[data-state=DONE_WITH_EVIDENCE]")
        assert "findall" in await page.locator(".diff-file[data-file='slugify.py']").inner_text()
        assert "bad object" not in await page.locator("#diff").inner_text()
    assert result.state == TaskState.DONE_WITH_EVIDENCE and result.final_action == "merged"
    assert "findall" in git_show(demo_repo, "main:slugify.py")  # merged into the repository
    decided = [e.detail for e in result.events if e.kind == "signal"]
    assert decided == [f"approve: reviewed on the page (by {local_user()})"]


async def test_a_task_approved_with_loop_approve_keeps_its_diff_on_the_page(
    env: WorkflowEnvironment,
    client: Client,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    page: Any,
) -> None:
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="assisted")
    async with build_worker(client, settings), loop_ui(env, settings) as url:
        handle = await start(client, settings, spec)
        await wait_for(handle, lambda s: s.state == TaskState.AWAITING_APPROVAL)
        approving = await asyncio.create_subprocess_exec(
            LOOP, "approve", spec["id"], env=ui_env(env, settings),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(approving.communicate(), 60)
        assert approving.returncode == 0, (out, err)
        result = await result_of(handle)
        assert result.final_action == "merged" and not Path(result.worktree).exists()
        await page.goto(f"{url}/tasks/{spec['id']}")
        await page.wait_for_selector("#state[data-state=DONE_WITH_EVIDENCE]")
        diff_file = page.locator(".diff-file[data-file='slugify.py']")
        assert "findall" in await diff_file.inner_text()
        assert await diff_file.locator("tr.add").count() > 0


async def test_reject_from_the_page_signed_in_with_a_token(
    env: WorkflowEnvironment,
    client: Client,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    page: Any,
) -> None:
    secret = "s3cret-for-the-review-page"
    answers.create_key(settings.home / answers.KEY_NAME)
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="assisted")
    async with (
        build_worker(client, settings),
        loop_ui(env, settings, LOOP_UI_TOKEN=f"reviewer:{secret}") as url,
    ):
        handle = await start(client, settings, spec)
        await wait_for(handle, lambda s: s.state == TaskState.AWAITING_APPROVAL)
        async with httpx.AsyncClient(base_url=url) as web:
            assert (await web.get("/", headers={"X-Live": "1"})).status_code == 401
            ok = await web.get("/", headers={"Authorization": f"Bearer {secret}"})
            assert ok.status_code == 200 and spec["id"] in ok.text

        await page.goto(f"{url}/tasks/{spec['id']}")
        assert "/login" in page.url  # a browser signs in first
        await page.fill("input[name=token]", secret)
        await page.click("form.login button[type=submit]")
        await page.wait_for_selector("#state[data-state=AWAITING_APPROVAL]")
        assert "reviewer" in await page.locator(".who").inner_text()

        await page.fill("form.reject input[name=reason]", "the slugs must keep accents")
        await page.click("form.reject button[type=submit]")
        await page.wait_for_selector("#state[data-state=REJECTED]", timeout=60_000)
        result = await result_of(handle)
    assert result.state == TaskState.REJECTED
    assert result.reason == "the slugs must keep accents"
    assert "findall" not in git_show(demo_repo, "main:slugify.py")  # nothing merged
    assert [e.detail for e in result.events if e.kind == "signal"] == [
        "reject: the slugs must keep accents (by reviewer)"
    ]


async def test_a_task_not_waiting_has_no_approve_and_forged_posts_are_refused(
    env: WorkflowEnvironment,
    client: Client,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    page: Any,
) -> None:
    spec = task(demo_repo, write_agent(tmp_path, SLOW))
    spec["agent"]["timeout"] = 90
    async with build_worker(client, settings), loop_ui(env, settings) as url:
        handle = await start(client, settings, spec)
        try:
            await wait_for(handle, lambda s: s.phase == "make")
            target = f"{url}/tasks/{spec['id']}"
            await page.goto(target)
            await page.wait_for_selector("#state[data-state=RUNNING]")
            assert await page.locator("form.approve").count() == 0
            assert await page.get_by_role("button", name="Approve").count() == 0
            assert await page.locator("form.reject").count() == 0  # reject needs a wait too
            csrf = await page.locator("form.feedback input[name=csrf]").get_attribute("value")
            assert csrf

            # Another site's page posting with the person's cookie: wrong Origin.
            forged = await page.context.request.post(
                f"{target}/approve",
                form={"csrf": csrf, "note": "forged"},
                headers={"Origin": "http://evil.example"},
                max_redirects=0,
            )
            assert forged.status == 403
            # The right origin but no form token (a form that was never this page's).
            tokenless = await page.context.request.post(
                f"{target}/feedback",
                form={"text": "forged"},
                headers={"Origin": url},
                max_redirects=0,
            )
            assert tokenless.status == 403
            # A script without the cookie, the token or an origin.
            async with httpx.AsyncClient() as web:
                bare = await web.post(f"{target}/approve", data={"note": "forged"})
            assert bare.status_code == 403
            assert await answers_in_history(handle) == []  # nothing was sent

            # An honest request that no longer applies: the task's own refusal (its
            # update's validator), shown on the page, and nothing in its history.
            stale = await page.context.request.post(
                f"{target}/approve", form={"csrf": csrf}, headers={"Origin": url}
            )
            assert stale.ok
            assert f"task {spec['id']} is RUNNING; approve does not apply now" in await stale.text()
            assert await answers_in_history(handle) == []
        finally:
            await handle.cancel()
            result = await result_of(handle)
    assert result.state == TaskState.CANCELLED
    assert not [e for e in result.events if e.kind in ("signal-ignored", "answer-refused")]


@pytest.mark.parametrize("agent", ["scripted", "model"])
async def test_a_running_attempt_moves_on_the_page_without_a_reload(
    env: WorkflowEnvironment,
    client: Client,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    page: Any,
    monkeypatch: pytest.MonkeyPatch,
    agent: str,
) -> None:
    """A 50 s attempt of a slow scripted agent (its usage in LOOP_USAGE_FILE) and of an
    agent calling a slow model through the gateway: the page's progress line shows its
    time, tokens and cost moving at least every 5 s, refreshed in place."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-progress-0000")
    with slow_model() as model:
        if agent == "scripted":
            spec = task(demo_repo, write_agent(tmp_path, SLOW_AGENT))
            spec["agent"] |= {"timeout": 120, "usage": "file"}
        else:
            spec = task(demo_repo, write_agent(tmp_path, SLOW_MODEL_AGENT))
            spec["agent"] |= {"timeout": 120, "provider": {"api": "openai", "base_url": model.url}}
        async with build_worker(client, settings), loop_ui(env, settings) as url:
            handle = await start(client, settings, spec)
            try:
                await wait_for(handle, lambda s: s.phase == "make")
                await page.goto(f"{url}/tasks/{spec['id']}")
                await page.wait_for_selector("#progress", timeout=20_000)
                await page.evaluate("window.__notReloaded = true")
                seen: list[Seen] = []
                deadline = time.monotonic() + WATCH_S
                while time.monotonic() < deadline:
                    shown = page.locator("#progress")
                    seen.append(
                        Seen(
                            time.monotonic(),
                            float(await shown.get_attribute("data-seconds") or 0),
                            int(await shown.get_attribute("data-tokens") or 0),
                            float(await shown.get_attribute("data-cost") or 0),
                            await page.locator("#progress .last-line").inner_text(),
                        )
                    )
                    await asyncio.sleep(1)
                assert await page.evaluate("window.__notReloaded === true")
            finally:
                await handle.cancel()
                await result_of(handle)
    assert_moving(seen)
    assert seen[-1].line.startswith("step " if agent == "scripted" else "call ")


async def test_beyond_loopback_without_a_token_exits_2(
    env: WorkflowEnvironment, settings: Settings
) -> None:
    code, out, err = await run_ui(env, settings, "--bind", "0.0.0.0:8300")
    assert code == 2, (out, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "LOOP_UI_TOKEN" in lines[0]
    code, _, err = await run_ui(env, settings, "--bind", "0.0.0.0")
    assert code == 2 and "is not HOST:PORT" in err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = await run_ui(env, settings, "--bind", f"127.0.0.1:{port}")
    assert code == 2 and f"cannot listen on 127.0.0.1:{port}" in err


async def test_the_page_reads_sealed_payloads_through_the_codec(
    env: WorkflowEnvironment, settings: Settings, demo_repo: Path, tmp_path: Path
) -> None:
    """With LOOP_CODEC_KEY_FILE the history holds ciphertext; the page decrypts it with
    the worker's codec (the same key), like the CLI."""
    key_file = tmp_path / "codec.key"
    key_file.write_text(os.urandom(32).hex())
    sealed = await Client.connect(
        env.client.service_client.config.target_host,
        namespace=env.client.namespace,
        data_converter=data_converter({KEY_ENV: str(key_file)}),
    )
    spec = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE))
    spec["goal"] = "A goal only the key can read: slugify must join words with hyphens."
    async with build_worker(sealed, settings):
        handle = await start(sealed, settings, spec)
        assert (await result_of(handle)).state == TaskState.DONE_WITH_EVIDENCE
    raw = await env.client.get_workflow_handle(handle.id).fetch_history()
    assert "A goal only the key can read" not in str(raw)  # the server holds ciphertext
    async with (
        build_worker(sealed, settings),
        loop_ui(env, settings, **{KEY_ENV: str(key_file)}) as url,
        httpx.AsyncClient(base_url=url) as web,
    ):
        listed = await web.get("/")
        shown = await web.get(f"/tasks/{spec['id']}")
    assert "A goal only the key can read" in listed.text
    assert "A goal only the key can read" in shown.text
    assert 'data-state="DONE_WITH_EVIDENCE"' in shown.text
    assert 'data-gate="tests"' in shown.text and "findall" in shown.text


async def test_without_the_key_every_task_is_listed_and_the_sealed_ones_say_so(
    env: WorkflowEnvironment,
    client: Client,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    page: Any,
) -> None:
    """Started without LOOP_CODEC_KEY_FILE, the page lists a plain task and two sealed
    ones (one ended, one waiting on a worker that answers in ciphertext) instead of one
    error: the sealed rows are marked, keep what the server knows in clear (state,
    attempts, repository), and the page names the variable that would open them."""
    key_file = tmp_path / "codec.key"
    key_file.write_text(os.urandom(32).hex())
    sealed = await Client.connect(
        env.client.service_client.config.target_host,
        namespace=env.client.namespace,
        data_converter=data_converter({KEY_ENV: str(key_file)}),
    )
    plain = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="report")
    plain["goal"] = "A plain goal anyone can read."
    ended = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="report")
    waiting = task(demo_repo, write_agent(tmp_path, FIX_AT_ONCE), autonomy="assisted")
    for spec in (ended, waiting):
        spec["goal"] = "A goal only the key can read."
    async with build_worker(client, settings):
        assert (await result_of(await start(client, settings, plain))).state == "DONE_WITH_EVIDENCE"
    async with build_worker(sealed, settings):
        assert (await result_of(await start(sealed, settings, ended))).state == "DONE_WITH_EVIDENCE"
        handle = await start(sealed, settings, waiting)
        await wait_for(handle, lambda s: s.state == TaskState.AWAITING_APPROVAL)
        async with loop_ui(env, settings) as url:
            await page.goto(f"{url}/?repo={demo_repo}")
            rows = page.locator("table.tasks tbody tr")
            assert await rows.count() == 3
            assert await rows.nth(0).get_attribute("data-task") == waiting["id"]
            marked = page.locator("table.tasks tbody tr[data-sealed]")
            assert {await marked.nth(i).get_attribute("data-task") for i in range(2)} == {
                ended["id"],
                waiting["id"],
            }
            assert await marked.count() == 2
            first = await rows.nth(0).inner_text()
            assert "AWAITING_APPROVAL" in first and "encrypted" in first
            text = await page.locator("#tasks").inner_text()
            assert "A plain goal anyone can read." in text
            assert "A goal only the key can read" not in text
            note = await page.locator("[data-sealed-note]").inner_text()
            assert "2 tasks are encrypted" in note and "LOOP_CODEC_KEY_FILE" in note
            async with httpx.AsyncClient(base_url=url) as web:
                shown = await web.get(f"/tasks/{ended['id']}")
            assert shown.status_code == 200 and (
                f"task {ended['id']}: the payloads are encrypted: set LOOP_CODEC_KEY_FILE"
                in shown.text
            )


FIX_SIGNED = """
pathlib.Path("slugify.py").write_text(COMPLETE + "# by NAME\\n")
out.write_text("fixed, NAME's way")
"""
WRONG = """
pathlib.Path("slugify.py").write_text("def slugify(t):\\n    return 'wrong'\\n")
"""


async def test_choose_person_shows_each_passing_candidate_and_merges_the_one_approved(
    env: WorkflowEnvironment,
    client: Client,
    settings: Settings,
    demo_repo: Path,
    tmp_path: Path,
    page: Any,
) -> None:
    """Three candidates, two of which pass: the page shows both side by side, each with
    its diff, its gates and its cost, and an Approve of its own; the third (it failed) has
    none. Approving the second merges exactly its commit."""
    answers.create_key(settings.home / answers.KEY_NAME)
    agents = {"one": FIX_SIGNED, "two": FIX_SIGNED, "three": WRONG}
    spec = task(demo_repo, ["true"], choose="person", autonomy="assisted",
                budget={"max_attempts": 1},
                candidates=[{"name": n, "agent": {"command": write_agent(tmp_path,
                             body.replace("NAME", n))}} for n, body in agents.items()])  # fmt: skip
    async with build_worker(client, settings), loop_ui(env, settings) as url:
        handle = await start(client, settings, spec)
        st = await wait_for(handle, lambda s: s.state == TaskState.AWAITING_APPROVAL, 120)
        waiting = {c.name: c.commit for c in st.candidates if c.commit}
        assert set(waiting) == {"one", "two"}

        await page.goto(f"{url}/tasks/{spec['id']}")
        await page.wait_for_selector("#state[data-state=AWAITING_APPROVAL]")
        shown = page.locator("#candidates article.candidate")
        assert await shown.count() == 3
        for name in ("one", "two"):
            card = page.locator(f"article[data-candidate='{name}']")
            text = await card.inner_text()
            assert "DONE_WITH_EVIDENCE" in text and "changed lines" in text, text
            assert f"# by {name}" in await card.locator(".diff-file").inner_text()
            assert "pass" in await card.locator("tr.gate[data-gate='tests']").text_content()
            form = card.locator("form.approve")
            assert await form.locator("input[name=commit]").get_attribute("value") == waiting[name]
        three = page.locator("article[data-candidate='three']")
        assert await three.locator("form.approve").count() == 0
        assert "FAIL" in await three.locator("tr.gate[data-gate='tests']").text_content()
        # One Approve per passing candidate, none for the task as a whole.
        assert await page.locator("form.approve").count() == 2
        await page.screenshot(path=str(tmp_path / "candidates.png"), full_page=True)

        card = page.locator("article[data-candidate='two']")
        await card.locator("input[name=note]").fill("two reads better")
        await card.locator("form.approve button[type=submit]").click()
        flash = await page.wait_for_selector("[data-flash=ok]")
        assert flash is not None and "approved candidate two" in await flash.inner_text()
        await page.wait_for_selector("#state[data-state=DONE_WITH_EVIDENCE]", timeout=60_000)
        result = await result_of(handle)
    assert result.state == TaskState.DONE_WITH_EVIDENCE and result.chosen == "two"
    merged = git_show(demo_repo, "main:slugify.py")
    assert "# by two" in merged and "# by one" not in merged
    decided = [e.detail for e in result.events if e.kind == "signal"]
    assert decided == [f"approve: candidate two; two reads better (by {local_user()})"]
