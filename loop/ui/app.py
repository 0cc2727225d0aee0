"""The review page's routes (Starlette), rendered server-side with Jinja2.

    GET  /                       tasks (filters: ?state=, ?repo=), waiting ones first
    GET  /tasks/{id}             a task: goal, timeline, gates, diff, budget, escalations
    POST /tasks/{id}/{answer}    approve | reject | feedback | extend (an update: taken, or refused)
    GET  /tasks/{id}/logs/{name} a worker log of the task (gate-X.log, agent.log, brief.md)
    GET  /eval                   the latest harness comparisons (?run=)
    GET  /budgets                each repository's period ledger today
    GET|POST /login, POST /logout
    POST /hooks/tasks            a tracker's webhook starts a task (``loop.ui.tasks_hook``),
                                 only with LOOP_HOOKS_TOKEN_FILE; a bearer token
    POST /hooks/slack            a Slack button or modal (``loop.ui.slack``), only with
                                 LOOP_SLACK_SIGNING_SECRET_FILE
    POST /hooks/github           a GitHub webhook delivery (``loop.ui.hooks``), only with
                                 LOOP_GITHUB_WEBHOOK_SECRET_FILE; signed, not signed in

A page asked for with ``X-Live: 1`` is the same page for ``static/live.js`` to take its
live parts from; it leaves one-time messages for the next real page load.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from temporalio.client import Client
from temporalio.service import RPCError

from loop.errors import BadInput, LoopError, Sealed, UnknownTask
from loop.hardened.text import for_terminal, visible_html
from loop.rules.answers import waiting_words
from loop.tasks import ANSWERS, new_answer_id, payload_for
from loop.ui import diff as diffs
from loop.ui.config import UiConfig
from loop.ui.guard import Caller, Guard
from loop.ui.hooks import PATH as HOOK_PATH
from loop.ui.hooks import GitHubHook
from loop.ui.slack import PATH as SLACK_PATH
from loop.ui.slack import SlackHook
from loop.ui.source import Source, today
from loop.ui.tasks_hook import PATH as TASKS_PATH
from loop.ui.tasks_hook import TasksHook
from loop.ui.views import evals, ledger, spending, task_list, task_panels, timeline

HERE = Path(__file__).parent
NONCE = re.compile(r"[0-9a-f]{32}")
"""A form's answer id, as the page makes them (``secrets.token_hex(16)``)."""
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _inert(value: Any) -> Any:
    if isinstance(value, str) and not isinstance(value, Markup):
        return Markup(escape(for_terminal(value)))
    return value


def create_app(
    config: UiConfig, client: Client, *, port: int | None = None, source: Source | None = None
) -> Starlette:
    """The ASGI app; ``port`` is the one actually listened on (for the session cookie).
    ``source`` stands in for the reads and answers (tests); default: through ``client``."""
    source = source or Source(client, config.home, config.task_queue)
    guard = Guard(config.tokens, config.local_user, port if port is not None else config.bind.port)
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
        # Whatever a page prints, it prints inert: controls and invisible characters as
        # stand-ins (an agent's claim, a file name, an issue's goal), then escaped.
        finalize=_inert,
    )
    env.filters["urlq"] = lambda s: quote(str(s), safe="")
    env.filters["visible"] = lambda s: Markup(visible_html(str(s)))
    highlight_css = diffs.css()
    target = client.service_client.config.target_host

    def render(request: Request, name: str, status_code: int = 200, **ctx: Any) -> HTMLResponse:
        caller: Caller = request.state.caller
        live = request.headers.get("x-live") == "1"
        ctx.setdefault("polling", False)
        flashes: list[tuple[str, str]] = []
        if caller.session is not None and not live:
            flashes, caller.session.flashes = caller.session.flashes, []
        html = env.get_template(name).render(
            who=caller.who,
            via=caller.via,
            csrf=caller.session.csrf if caller.session else "",
            token_mode=guard.needs_token,
            flashes=flashes,
            address=target,
            namespace=client.namespace,
            queue=config.task_queue,
            poll_ms=int(config.poll_seconds * 1000),
            nav=request.url.path,
            **ctx,
        )
        return HTMLResponse(html, status_code=status_code)

    def failure(request: Request, e: Exception) -> HTMLResponse:
        if isinstance(e, UnknownTask):
            return render(request, "error.html", 404, title="not found", message=str(e))
        if isinstance(e, Sealed):
            task_id = request.path_params.get("task_id")
            message = f"task {task_id}: {e}" if task_id else str(e)
            return render(request, "error.html", 200, title="encrypted", message=message)
        if isinstance(e, RPCError):
            message = f"Temporal at {target} did not answer: {e.message or e.status}"
            return render(request, "error.html", 503, title="Temporal", message=message)
        return render(request, "error.html", 503, title="error", message=str(e))

    # ------------------------------------------------------------------ pages

    async def tasks_page(request: Request) -> Response:
        state = request.query_params.get("state", "")
        repo = request.query_params.get("repo", "")
        try:
            listings, repos = await asyncio.gather(source.listings(state, repo), source.repos())
        except (RPCError, LoopError) as e:
            return failure(request, e)
        rows = task_list.task_rows(listings, datetime.now(UTC))
        return render(
            request,
            "tasks.html",
            title="Tasks",
            rows=rows,
            states=task_list.STATES,
            repos=repos,
            state=state,
            repo=repo,
            waiting=sum(1 for r in rows if r.waiting),
            sealed=task_list.sealed_note(rows),
            polling=True,
        )

    async def task_page(request: Request) -> Response:
        task_id = request.path_params["task_id"]
        try:
            page = await source.task(task_id)
            diff = await source.diff(page)
            candidates = task_panels.candidate_rows(page.result, page.status if page.open else None)
            diffs = await source.candidate_diffs(page, {c.name: c.commit for c in candidates})
        except (RPCError, LoopError) as e:
            return failure(request, e)
        result = page.result
        st = page.status
        state = str(st.state) if st else page.closed_as or str(result.state)
        return render(
            request,
            "task.html",
            title=task_id,
            page=page,
            state=state,
            phase=str(st.phase) if st and st.phase else "",
            reason=(st.reason if st else result.reason),
            waiting_for=waiting_words(st.waiting_for) if st else "",
            attempt=f"{len(result.attempts)} of {page.limits.attempts}"
            if page.limits.attempts
            else str(len(result.attempts)),
            goal=page.spec.goal if page.spec else "",
            autonomy=str(page.spec.autonomy) if page.spec else "",
            repo=page.spec.repo if page.spec else "",
            timeline=timeline.timeline(result, open_=page.open, calls=page.calls),
            bars=spending.budget_bars(page.used, page.limits),
            escalations=task_panels.escalations(result),
            events=task_panels.events(result),
            running=task_panels.running(st, datetime.now(UTC)) if st else None,
            decisions=task_panels.decisions(st if page.open else None),
            answer_nonce=secrets.token_hex(16),
            diff=diff,
            candidates=candidates,
            candidate_diffs=diffs,
            choosing=any(c.approvable for c in candidates),
            polling=page.open,
        )

    async def answer(request: Request) -> Response:
        task_id, what = request.path_params["task_id"], request.path_params["answer"]
        caller: Caller = request.state.caller
        if what not in ANSWERS:
            return PlainTextResponse("unknown answer\n", status_code=404)
        form = {k: str(v) for k, v in (await request.form()).items()}
        if not guard.csrf_ok(caller, form.get("csrf", "")):
            return PlainTextResponse(
                "refused: the form's token is missing or stale; reload the page\n", 403
            )
        assert caller.who is not None
        # The page's forms name their answer: the same form sent twice is one answer.
        nonce = form.get("answer_id", "")
        answer_id = f"page:{nonce}:{what}" if NONCE.fullmatch(nonce) else new_answer_id("page")
        try:
            payload = payload_for(what, form, caller.who, answer_id)
            reply = await source.answer(task_id, what, payload)
        except BadInput as e:
            return _answered(request, caller, task_id, False, str(e))
        except (RPCError, LoopError) as e:
            message = e.message if isinstance(e, RPCError) else str(e)
            return _answered(request, caller, task_id, False, f"not sent: {message}")
        return _answered(request, caller, task_id, True, f"{task_id}: {reply.did}")

    def _answered(
        request: Request, caller: Caller, task_id: str, sent: bool, message: str
    ) -> Response:
        if caller.via == "bearer":
            body = {"sent": sent, "message" if sent else "error": message}
            return JSONResponse(body, status_code=200 if sent else 409)
        if caller.session is not None:
            caller.session.flashes.append(("ok" if sent else "error", message))
        return RedirectResponse(f"/tasks/{quote(task_id)}", status_code=303)

    async def log_page(request: Request) -> Response:
        try:
            text, note = source.read_log(
                request.path_params["task_id"], request.path_params["name"]
            )
        except LoopError as e:
            return PlainTextResponse(f"{e}\n", status_code=404)
        header = f"[{note}]\n" if note else ""
        return PlainTextResponse(header + text)

    async def eval_page(request: Request) -> Response:
        runs = source.eval_runs()
        wanted = request.query_params.get("run", "")
        chosen = next((r for r in runs if r.run == wanted), runs[0] if runs else None)
        return render(
            request,
            "eval.html",
            title="Eval",
            runs=runs,
            view=evals.eval_view(chosen) if chosen else None,
            results=config.home / "eval-results.json",
        )

    async def budgets_page(request: Request) -> Response:
        try:
            ledgers = await source.ledgers()
        except (RPCError, LoopError) as e:
            return failure(request, e)
        day = today()
        return render(
            request,
            "budgets.html",
            title="Budgets",
            day=day,
            ledgers=[ledger.ledger_view(st, day) for st in ledgers],
            polling=True,
        )

    async def login(request: Request) -> Response:
        nxt = _local_path(request.query_params.get("next", "/"))
        if request.method == "GET":
            return render(request, "login.html", title="Sign in", next=nxt, error="")
        form = await request.form()
        name = guard.name_of(str(form.get("token", "")).strip()) if guard.needs_token else None
        if name is None:
            await asyncio.sleep(0.5)  # a guess costs time
            return render(
                request, "login.html", 401, title="Sign in", next=nxt, error="wrong token"
            )
        session = guard.open_session(name)
        response = RedirectResponse(_local_path(str(form.get("next", "/"))), status_code=303)
        _set_cookie(response, guard.cookie, session.sid)
        return response

    async def logout(request: Request) -> Response:
        caller: Caller = request.state.caller
        form = await request.form()
        if not guard.csrf_ok(caller, str(form.get("csrf", ""))):
            return PlainTextResponse("refused\n", status_code=403)
        guard.close_session(caller.session)
        response = RedirectResponse("/login" if guard.needs_token else "/", status_code=303)
        response.delete_cookie(guard.cookie, path="/")
        return response

    async def highlight(request: Request) -> Response:
        return Response(highlight_css, media_type="text/css")

    # ------------------------------------------------------------------ the guard

    hooked = config.github_secret is not None

    class Guarded(BaseHTTPMiddleware):
        async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
            if request.url.path == HOOK_PATH:
                if hooked:
                    return await call_next(request)  # its signature is its sign-in
                return PlainTextResponse(
                    "not here: loop ui takes GitHub deliveries only with "
                    "LOOP_GITHUB_WEBHOOK_SECRET_FILE and --sources\n",
                    status_code=404,
                )
            if request.url.path == TASKS_PATH:
                if config.hooks_token is not None:
                    return await call_next(request)  # its bearer token is its sign-in
                return PlainTextResponse(
                    "not here: loop ui starts tasks from webhooks only with "
                    "LOOP_HOOKS_TOKEN_FILE and --sources\n",
                    status_code=404,
                )
            if request.url.path == SLACK_PATH:
                if config.slack is not None:
                    return await call_next(request)  # its signature is its sign-in
                return PlainTextResponse(
                    "not here: loop ui takes Slack's buttons only with "
                    "LOOP_SLACK_SIGNING_SECRET_FILE\n",
                    status_code=404,
                )
            if not guard.host_allowed(request):
                return PlainTextResponse(
                    "refused: this page answers only to a loopback address "
                    "(127.0.0.1, localhost) unless LOOP_UI_TOKEN is set\n",
                    status_code=403,
                )
            caller = guard.identify(request)
            request.state.caller = caller
            path = request.url.path
            public = path.startswith("/static/") or path in ("/login", "/highlight.css")
            if request.method not in ("GET", "HEAD") and caller.via != "bearer":
                if not guard.same_origin(request):
                    return PlainTextResponse(
                        "refused: a cross-site request (Origin or Referer is not this page)\n",
                        status_code=403,
                    )
            if caller.who is None and not public:
                if request.method in ("GET", "HEAD") and request.headers.get("x-live") != "1":
                    where = path + (f"?{request.url.query}" if request.url.query else "")
                    return RedirectResponse("/login?" + urlencode({"next": where}), 303)
                return PlainTextResponse(
                    "sign in: send Authorization: Bearer <LOOP_UI_TOKEN secret>\n",
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
            response = await call_next(request)
            for k, v in SECURITY_HEADERS.items():
                response.headers.setdefault(k, v)
            if caller.new_session and caller.session is not None:
                _set_cookie(response, guard.cookie, caller.session.sid)
            return response

    routes = [
        Route("/", tasks_page),
        Route("/tasks/{task_id}", task_page),
        Route("/tasks/{task_id}/logs/{name:path}", log_page),
        Route("/tasks/{task_id}/{answer}", answer, methods=["POST"]),
        Route("/eval", eval_page),
        Route("/budgets", budgets_page),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/highlight.css", highlight),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    if config.github_secret is not None:
        hook = GitHubHook(config.github_secret, config.hooked, client, config.task_queue)
        routes.append(Route(HOOK_PATH, hook.handle, methods=["POST"]))
    if config.hooks_token is not None:
        tasks = TasksHook(config.hooks_token, config.tasked, client, config.task_queue)
        routes.append(Route(TASKS_PATH, tasks.handle, methods=["POST"]))
    if config.slack is not None:
        slack = SlackHook(
            config.slack.secret,
            config.slack.token,
            config.slack.api_url,
            client,
            config.task_queue,
            config.slack.answerers,
        )
        routes.append(Route(SLACK_PATH, slack.handle, methods=["POST"]))
    app = Starlette(routes=routes, middleware=[Middleware(Guarded)])
    app.state.guard = guard
    app.state.source = source
    return app


def _local_path(value: str) -> str:
    """Only a path on this site (no ``//host`` or ``https://…``): no open redirect."""
    if not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


def _set_cookie(response: Response, name: str, value: str) -> None:
    response.set_cookie(name, value, httponly=True, samesite="strict", path="/")
