"""Serving the review page: connect to Temporal, take the socket, run uvicorn until
Ctrl-C or SIGTERM. The socket is bound here, before uvicorn starts, so a busy port is
one line (``BadInput``) rather than a log record, and port 0 can be told to the user."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable, Iterator

import uvicorn

from loop.client import connect
from loop.errors import BadInput
from loop.services import register
from loop.ui.app import create_app
from loop.ui.config import Bind, UiConfig


def listen(config: UiConfig) -> socket.socket:
    bind = config.bind
    sock = socket.socket(bind.family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bind.host, bind.port))
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise BadInput(f"cannot listen on {bind.host}:{bind.port}: {e.strerror}") from None
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """Ctrl-C and SIGTERM stop it gracefully and the command exits 0, like ``loop worker``
    (uvicorn's own handlers re-raise the signal after shutting down)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop)
        try:
            yield
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    def _stop(self) -> None:
        if self.should_exit:
            self.force_exit = True  # a second Ctrl-C does not wait for open connections
        self.should_exit = True


async def serve(
    config: UiConfig,
    *,
    address: str | None,
    namespace: str | None,
    say: Callable[[str], None],
) -> None:
    """Run the page until interrupted; ``say`` prints progress (the address first)."""
    client = await connect(address, namespace)
    sock = listen(config)
    port = sock.getsockname()[1]
    app = create_app(config, client, port=port)
    server = _Server(
        uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            server_header=False,
            timeout_graceful_shutdown=3,
        )
    )
    who = (
        f"token required ({', '.join(sorted(set(config.tokens.values())))})"
        if config.tokens
        else f"answers as {config.local_user}, loopback only"
    )
    host = sock.getsockname()[0]
    say(f"Loopwork review page: {Bind(host, port).url()}")  # what was bound, not what was named
    say(
        f"Temporal {client.service_client.config.target_host}, namespace {client.namespace}, "
        f"task queue {config.task_queue}; {who}; Ctrl-C stops it"
    )
    if config.hooked:
        repos = ", ".join(h.source.repo for h in config.hooked)
        say(f"GitHub webhook: POST {Bind(host, port).url()}hooks/github for {repos}")
    if config.hooks_token is not None:
        names = ", ".join(sorted(config.tasked))
        say(f"Tasks webhook: POST {Bind(host, port).url()}hooks/tasks for {names}")
    if config.slack is not None:
        say(f"Slack interactivity: POST {Bind(host, port).url()}hooks/slack")
    try:
        with register(config.home, "ui", f"{host}:{port}"):  # no sandbox may reach it
            await server.serve(sockets=[sock])
    finally:
        sock.close()
