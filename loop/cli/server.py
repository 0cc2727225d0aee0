"""Running Loopwork: ``dev`` (the embedded server), ``worker``, ``demo``, ``doctor`` and
``codec-server``. This module is the one place that imports the composition root."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from typing import Annotated

import typer

from loop import logs
from loop.cli import console
from loop.errors import LoopError
from loop.hardened import answers
from loop.services import register
from loop.settings import Settings


def dev(
    port: Annotated[
        int | None,
        typer.Option(
            help="gRPC port (default: the port of --address, TEMPORAL_ADDRESS or profile)"
        ),
    ] = None,
    ui_port: Annotated[int | None, typer.Option(help="UI port (default port+1000)")] = None,
    headless: Annotated[bool, typer.Option(help="no Web UI")] = False,
    ui_codec_endpoint: Annotated[
        str | None,
        typer.Option(help="a codec server the Web UI decrypts payloads with (`loop codec-server`)"),
    ] = None,
) -> None:
    """Run the embedded Temporal dev server (SQLite in LOOP_HOME/temporal.db) until Ctrl-C,
    where every other command connects: on 127.0.0.1 at the port of the connection
    settings (--address, TEMPORAL_ADDRESS, the profile; 7233 without any)."""
    from loop.devserver import HTTP_PORT_OFFSET, DevServer, local_port

    settings = Settings.from_env()
    try:
        configured = local_port(console.connection.address)
    except LoopError as e:
        if port is None:
            console.fail(f"{e}; or give --port")
        configured = None
    if port is None:
        port = configured
    from loop.client import connect_config

    namespace = str(connect_config(namespace=console.connection.namespace)["namespace"])
    if ui_codec_endpoint and not ui_codec_endpoint.startswith(("http://", "https://")):
        console.fail(
            f"--ui-codec-endpoint {ui_codec_endpoint!r} is not a URL; "
            "give e.g. http://127.0.0.1:8081"
        )

    async def main() -> None:
        if settings.answer_key_file is None:
            made = answers.create_key(settings.home / answers.KEY_NAME)
            if made:
                console.out.print(f"answer key made: {settings.home / answers.KEY_NAME}")
        server = DevServer.start(
            home=settings.home,
            port=port,
            ui_port=ui_port,
            headless=headless,
            ui_codec_endpoint=ui_codec_endpoint,
            namespace=namespace,
        )
        try:
            await server.wait_ready()
            console.out.print(f"Temporal dev server at {server.address}, data in {settings.db}")
            if port != configured:
                console.out.print(
                    f"other commands connect elsewhere: set TEMPORAL_ADDRESS={server.address}"
                )
            http = server.address.rpartition(":")[0] + f":{port + HTTP_PORT_OFFSET}"
            console.out.print(f"its HTTP API at {http} (no sandbox can reach either)")
            if not headless:
                console.out.print(f"Temporal UI: {server.ui_url}")
            console.out.print("Ctrl-C stops it.")
            stop = asyncio.Event()
            for sig in (signal.SIGINT, signal.SIGTERM):
                asyncio.get_running_loop().add_signal_handler(sig, stop.set)
            await stop.wait()
        finally:
            server.stop()  # the server runs in its own session: it must be stopped explicitly

    console.run(main)


def worker(
    dev: Annotated[bool, typer.Option(help="start the embedded server if none answers")] = False,
) -> None:
    """Serve the task queue (LOOP_TASK_QUEUE, default `loop`) until Ctrl-C or SIGTERM."""
    import worker as worker_module

    logs.configure()
    console.run(
        lambda: worker_module.serve(
            Settings.from_env(),
            address=console.connection.address,
            namespace=console.connection.namespace,
            dev=dev,
        )
    )


def codec_server(
    port: Annotated[int, typer.Option(help="port on 127.0.0.1")] = 8081,
    ui_origin: Annotated[
        str,
        typer.Option(
            help="the origin of a Temporal UI on another machine, allowed by CORS "
            "(a UI on this machine is allowed on any port)"
        ),
    ] = "",
) -> None:
    """Serve Temporal's codec endpoint (decrypt for the UI and `temporal workflow show`).

    Needs LOOP_CODEC_KEY_FILE (the key) and LOOP_CODEC_TOKEN (the bearer token that
    callers must send). Point the UI at it with `loop dev --ui-codec-endpoint
    http://127.0.0.1:PORT`, the CLI with `--codec-endpoint http://127.0.0.1:PORT
    --codec-auth "Bearer $LOOP_CODEC_TOKEN"`.
    """
    from loop.codec import KEY_ENV, EncryptionCodec, load_key, make_server

    key_file, token = os.environ.get(KEY_ENV), os.environ.get("LOOP_CODEC_TOKEN")
    if not key_file or not token:
        console.fail(f"set {KEY_ENV} and LOOP_CODEC_TOKEN to serve the codec endpoint")
    try:
        codec = EncryptionCodec(load_key(key_file))
        server = make_server(codec, host="127.0.0.1", port=port, token=token, ui_origin=ui_origin)
    except (LoopError, OSError) as e:
        console.fail(str(e))
    allowed = "any Temporal UI on this machine" + (f" and {ui_origin}" if ui_origin else "")
    console.out.print(
        f"codec endpoint at http://127.0.0.1:{port} (CORS: {allowed}); Ctrl-C stops it"
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with register(Settings.from_env().home, "codec", f"127.0.0.1:{port}"):
        threading.Thread(target=server.serve_forever, daemon=True).start()
        stop.wait()
        server.shutdown()
        server.server_close()


def demo(
    keep: Annotated[
        bool, typer.Option(help="keep the server it started running (Ctrl-C stops it)")
    ] = False,
) -> None:
    """Run the offline demo: a real bug, a scripted agent that needs one round of feedback."""
    from loop.cli.demo import run_demo

    logs.configure("WARNING")
    address, namespace = console.connection.address, console.connection.namespace
    raise typer.Exit(
        console.run(
            lambda: run_demo(
                Settings.from_env(), address, console.out, keep=keep, namespace=namespace
            )
        )
    )


def doctor() -> None:
    """Print the sandbox level this host supports, what it guarantees, and why; whether the
    model gateway runs here and which providers' keys the worker holds."""
    from loop.cli.doctor import print_doctor  # the probe runs trial sandboxes

    print_doctor()
