"""The model gateway: what a call pays for going through it instead of to the endpoint.

Three processes, as in real use: this one is the agent CLI (the client), a second is
the worker (``GATEWAY`` with one run's grant attached on a ``host_listener``, nothing
else), a third is the model endpoint: a small asyncio HTTP/1.1 server in this file
that speaks OpenAI chat completions, plain or streamed (SSE, the usage chunk when
``stream_options.include_usage`` is asked for, as OpenAI does), with keep-alive, and
checks that the real key came with each call. A streamed answer sends its first
event at once and the rest ``--delay-ms`` later, so the time to the first byte is
apart from the time to generate. Separate processes keep the three off one GIL.

The client is one ``httpx.AsyncClient`` per path with the same settings (keep-alive,
no proxy variables); the direct path calls the endpoint with the key, the gateway
path calls the gateway with the run's token (and, as a CLI would, without
``stream_options``: the gateway adds it). Direct and gateway calls alternate, after
a warm-up, so drift on a shared machine hits both alike. Reported:

1. non-streamed latency, one call at a time, p50/p90/p99 over ``--calls``;
   target: p50 added by the gateway ≤ 2 ms;
2. streamed, one at a time: time to the first body byte (the first SSE event) and to
   the end; target: p50 TTFB added ≤ 5 ms;
3. throughput: ``--streams`` concurrent streamed calls for ``--seconds``, calls/s
   directly and through one gateway (also with a budget set, where the gateway lets
   a run's calls through one at a time), with the gateway process's CPU per call.

Check column: the grant's count and tokens after each gateway phase equal what the
endpoint sent (calls x (prompt + completion) tokens), i.e. every call was metered (a
streamed one only if the gateway asked for the usage chunk).

The gateway's process also times its stages with ``perf_counter`` (a few µs a call),
printed as "Where the time goes".

    .venv/bin/python bench/gateway.py [--calls 500] [--seconds 10] [--streams 20] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from common import ROOT, cpu_seconds, print_machine, print_table

KEY = "sk-bench-real-key"
USAGE = (1200, 40)
"""(prompt, completion) tokens every answer reports."""
TEXT = "Here is the fix: " + "x" * 200


# --------------------------------------------------------------------------- the endpoint


def completion(model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": TEXT, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": USAGE[0],
            "completion_tokens": USAGE[1],
            "total_tokens": sum(USAGE),
        },
    }


def sse_chunk(event: dict[str, Any]) -> bytes:
    data = b"data: " + json.dumps(event).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def stream_events(model: str, with_usage: bool) -> tuple[bytes, bytes]:
    """The answer as chunked SSE: the first event, and everything after it."""
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0}
    base["model"] = model

    def choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    first = sse_chunk(choice({"role": "assistant", "content": TEXT[:17]}))
    rest = [sse_chunk(choice({"content": TEXT[17:]})), sse_chunk(choice({}, "stop"))]
    if with_usage:
        usage = {"prompt_tokens": USAGE[0], "completion_tokens": USAGE[1]}
        usage["total_tokens"] = sum(USAGE)
        rest.append(sse_chunk({**base, "choices": [], "usage": usage}))
    done = b"data: [DONE]\n\n"
    rest.append(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
    return first, b"".join(rest)


async def endpoint(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float):
    """One keep-alive connection: chat completions, plain or streamed."""
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            body = json.loads(await reader.readexactly(int(headers.get("content-length", 0))))
            if headers.get("authorization") != f"Bearer {KEY}":
                data = b'{"error": {"message": "bad key", "type": "invalid_request_error"}}'
                writer.write(b"HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n")
                writer.write(b"content-length: %d\r\n\r\n%s" % (len(data), data))
                await writer.drain()
                continue
            model = body.get("model", "m")
            if body.get("stream"):
                with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                first, rest = stream_events(model, with_usage)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n" + first
                )
                await writer.drain()
                await asyncio.sleep(delay)
                writer.write(rest)
            else:
                data = json.dumps(completion(model)).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(data), data)
                )
            await writer.drain()
    finally:
        writer.close()


async def serve_endpoint(delay: float) -> None:
    server = await asyncio.start_server(
        lambda r, w: endpoint(r, w, delay), "127.0.0.1", 0, backlog=256
    )
    print(json.dumps({"port": server.sockets[0].getsockname()[1]}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until EOF
    os._exit(0)  # not asyncio.run's cancelling of the open connections


# --------------------------------------------------------------------------- the worker


async def serve_gateway(upstream: str, max_tokens: int | None) -> None:
    """One run's grant on the worker's gateway; on each line of stdin, its counters."""
    from activities.host.gateway import GATEWAY, Grant, host_listener

    listener = host_listener()
    grant = Grant(
        task_id="bench", attempt=1, api="openai", upstream=upstream, key=KEY,
        model="gpt-4o-mini", max_tokens=max_tokens,
    )  # fmt: skip
    stages = time_stages() if max_tokens is None else {}
    loop = asyncio.get_running_loop()
    async with GATEWAY.serving(listener, grant):
        port = listener.getsockname()[1]
        print(json.dumps({"port": port, "token": grant.token}), flush=True)
        while await loop.run_in_executor(None, sys.stdin.readline):
            metered = sum(c.metered for c in grant.calls)
            statuses = sorted({c.status for c in grant.calls})
            stats = {"count": grant.count, "tokens": grant.tokens, "refused": grant.refused}
            stats |= {"metered_recorded": metered, "statuses": statuses}
            stats["stages"] = {k: statistics.median(v) for k, v in stages.items() if v}
            for v in stages.values():
                v.clear()
            print(json.dumps(stats), flush=True)


STAGES = ["checks and body to upstream request", "upstream until its headers",
          "answer relayed to the client", "metering and pricing"]  # fmt: skip


def time_stages() -> dict[str, list[float]]:
    """Wrap the gateway's steps with ``perf_counter`` (this process only): the seconds
    from a parsed request to the upstream call, that call until the upstream's headers,
    the relaying of the answer, and its metering (``_count``)."""
    import httpx

    from activities.host.gateway import server

    stages: dict[str, list[float]] = {name: [] for name in STAGES}
    marks: dict[asyncio.Task[Any] | None, list[float]] = {}
    answer, send, count = server.Gateway._answer, httpx.AsyncClient.send, server.Gateway._count

    async def timed_answer(self: Any, *args: Any) -> None:
        marks[asyncio.current_task()] = [time.perf_counter()]
        await answer(self, *args)

    async def timed_send(self: Any, *args: Any, **kwargs: Any) -> Any:
        mark = marks.get(asyncio.current_task(), [])
        mark.append(time.perf_counter())
        try:
            return await send(self, *args, **kwargs)
        finally:
            mark.append(time.perf_counter())

    def timed_count(self: Any, *args: Any) -> None:
        mark = marks.pop(asyncio.current_task(), [])
        mark.append(time.perf_counter())
        count(self, *args)
        mark.append(time.perf_counter())
        if len(mark) == 5:
            for name, a, b in zip(STAGES, mark, mark[1:], strict=False):
                stages[name].append(b - a)

    server.Gateway._answer = timed_answer  # type: ignore[method-assign]
    httpx.AsyncClient.send = timed_send  # type: ignore[method-assign]
    server.Gateway._count = timed_count  # type: ignore[method-assign]
    return stages


# --------------------------------------------------------------------------- the client


class Helper:
    """A subprocess of this script in another role; ``ask`` writes a line, reads one."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=ROOT, text=True,
        )  # fmt: skip
        self.info = self.read()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.proc.args} ended: {self.proc.wait()}")
        return json.loads(line)

    def ask(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return self.read()

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)[0]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Path_:
    """One way to the endpoint: a client, the key it presents, the body it sends."""

    def __init__(self, name: str, base: str, key: str, gateway: Helper | None, pool: int) -> None:
        import httpx

        self.name = name
        self.gateway = gateway
        self.via_gateway = gateway is not None
        limits = httpx.Limits(max_connections=pool, max_keepalive_connections=pool)
        self.client = httpx.AsyncClient(
            base_url=base, timeout=30, trust_env=False, limits=limits,
            headers={"authorization": f"Bearer {key}"},
        )  # fmt: skip

    def body(self, stream: bool, size: int) -> bytes:
        doc: dict[str, Any] = {
            "model": "gpt-4o-mini",
            "messages": [{"role": "system", "content": "s" * size},
                         {"role": "user", "content": "fix the bug"}],
        }  # fmt: skip
        if stream:
            doc["stream"] = True
            if not self.via_gateway:  # the gateway asks for the usage itself
                doc["stream_options"] = {"include_usage": True}
        return json.dumps(doc).encode()

    async def plain(self, body: bytes) -> float:
        t0 = time.perf_counter()
        r = await self.client.post(
            "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
        )
        took = time.perf_counter() - t0
        assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"], r.text
        return took

    async def streamed(self, body: bytes) -> tuple[float, float]:
        """(seconds to the first body byte, seconds to the end)."""
        t0 = time.perf_counter()
        first = 0.0
        got = bytearray()
        async with self.client.stream(
            "POST", "/v1/chat/completions", content=body,
            headers={"content-type": "application/json"},
        ) as r:  # fmt: skip
            async for chunk in r.aiter_raw():
                if not got:
                    first = time.perf_counter() - t0
                got += chunk
        took = time.perf_counter() - t0
        assert r.status_code == 200 and b'"usage"' in got and got.endswith(b"[DONE]\n\n"), got
        return first, took


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(x: float) -> float:
    return round(x * 1000, 2)


SEEN_STAGES: dict[str, dict[str, float]] = {}
"""Per kind of call, the median seconds of each stage in the timed gateway."""


def check(gateway: Helper | None, before: dict[str, Any], calls: int, kind: str) -> str:
    assert gateway is not None
    after = gateway.ask()
    for _ in range(20):  # a call is counted after its answer has reached the client
        if after["count"] - before["count"] >= calls:
            break
        time.sleep(0.05)
        after = gateway.ask()
    if after["stages"]:
        SEEN_STAGES[kind] = after["stages"]
    counted = after["count"] - before["count"]
    tokens = after["tokens"] - before["tokens"]
    ok = counted == calls and tokens == calls * sum(USAGE) and not after["refused"]
    return f"{'ok' if ok else 'WRONG'}: {counted} calls, {tokens:,} tokens"


async def latency(
    paths: list[Path_], calls: int, warmup: int, size: int, stream: bool
) -> list[list[Any]]:
    """Rows for each path, then what each gateway path adds to the first (direct)."""
    bodies = {p.name: p.body(stream, size) for p in paths}
    one = (lambda p: p.streamed(bodies[p.name])) if stream else (lambda p: p.plain(bodies[p.name]))
    for _ in range(warmup):
        for p in paths:
            await one(p)
    before = {p.name: p.gateway.ask() for p in paths if p.gateway}
    seen: dict[str, list[Any]] = {p.name: [] for p in paths}
    for _ in range(calls):
        for p in paths:
            seen[p.name].append(await one(p))
    rows = []
    kind = "streamed, TTFB" if stream else "plain"
    stats: dict[str, list[float]] = {}
    for p in paths:
        first = [s[0] for s in seen[p.name]] if stream else seen[p.name]
        stats[p.name] = [pct(first, q) for q in (0.5, 0.9, 0.99)]
        end = statistics.median(s[1] for s in seen[p.name]) if stream else stats[p.name][0]
        checked = check(p.gateway, before[p.name], calls, kind) if p.gateway else ""
        rows.append([kind, p.name, *map(ms, stats[p.name]), ms(end), calls, checked])
    direct = stats[paths[0].name]
    for p in paths[1:]:
        added = [b - a for a, b in zip(direct, stats[p.name], strict=True)]
        rows.append([kind, f"added by {p.name}", *map(ms, added), "", "", ""])
    return rows


async def throughput(
    path: Path_, seconds: float, streams: int, size: int
) -> tuple[int, float, float, float]:
    """(calls, seconds, calls/s, gateway CPU ms per call) of ``streams`` loops."""
    body = path.body(True, size)
    await asyncio.gather(*(path.streamed(body) for _ in range(streams)))  # open the pool
    done = 0
    stop = time.perf_counter() + seconds
    gateway = path.gateway
    cpu0 = gateway.cpu() if gateway else 0.0

    async def loop() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await path.streamed(body)
            done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(streams)))
    wall = time.perf_counter() - t0
    cpu = (gateway.cpu() - cpu0) * 1000 / done if gateway else 0.0
    return done, wall, done / wall, cpu


async def main(args: argparse.Namespace) -> None:
    print_machine("Model gateway: added latency, time to first byte, throughput")
    size = args.body_kib * 1024
    delay = args.delay_ms / 1000
    upstream = Helper("--role", "endpoint", "--delay-ms", str(args.delay_ms))
    url = f"http://127.0.0.1:{upstream.info['port']}/v1"
    as_is = Helper("--role", "gateway", "--upstream", url)
    limited = Helper("--role", "gateway", "--upstream", url, "--max-tokens", str(10**12))
    helpers = [as_is, limited, upstream]
    pool = max(args.streams, 1) + 2
    try:
        direct = Path_("direct", f"http://127.0.0.1:{upstream.info['port']}", KEY, None, pool)

        def via(g: Helper, name: str) -> Path_:
            return Path_(name, f"http://127.0.0.1:{g.info['port']}", g.info["token"], g, pool)

        gateway = via(as_is, "gateway")
        budgeted = via(limited, "gateway, budget set")
        print(
            f"{args.calls} calls each way, {args.warmup} warm-up; body {args.body_kib} KiB; "
            f"a streamed answer sends the rest {args.delay_ms:g} ms after its first event\n"
        )
        paths = [direct, gateway]
        rows = await latency(paths, args.calls, args.warmup, size, False)
        rows += await latency(paths, args.calls, args.warmup, size, True)
        print_table(
            ["calls", "path", "p50 ms", "p90 ms", "p99 ms", "end p50 ms", "n", "check"], rows,
            title="1-2. Latency, one call at a time (streamed: to the first body byte)",
        )  # fmt: skip
        trows = []
        for p in (direct, gateway, budgeted):
            before = p.gateway.ask() if p.gateway else {}
            n, wall, rate, cpu = await throughput(p, args.seconds, args.streams, size)
            kind = f"{args.streams} streams"
            checked = check(p.gateway, before, n + args.streams, kind) if p.gateway else ""
            bound = args.streams / delay if delay else 0
            trows.append([p.name, args.streams, n, round(wall, 1), round(rate, 1),
                          round(bound), round(cpu, 2) if cpu else "", checked])  # fmt: skip
        print_table(
            ["path", "streams", "calls", "s", "calls/s", "bound by delay", "gateway CPU ms/call",
             "check"], trows, title="3. Throughput, concurrent streamed calls",
        )  # fmt: skip
        srows = [[name, *(ms(SEEN_STAGES[k][name]) for k in SEEN_STAGES)] for name in STAGES]
        print_table(
            ["stage (gateway), p50 ms", *SEEN_STAGES], srows,
            title="Where the time goes in the gateway",
        )  # fmt: skip
        for p in (direct, gateway, budgeted):
            await p.client.aclose()
    finally:
        for h in helpers:
            h.close()


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500, help="calls each way, per latency")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0, help="per throughput row")
    parser.add_argument("--streams", type=int, default=20, help="concurrent streamed calls")
    parser.add_argument("--delay-ms", type=float, default=20.0,
                        help="a streamed answer's pause after its first event")  # fmt: skip
    parser.add_argument("--body-kib", type=int, default=4, help="request body's system prompt")
    parser.add_argument("--quick", action="store_true", help="50 calls, 2 s per throughput row")
    parser.add_argument("--role", choices=["client", "endpoint", "gateway"], default="client",
                        help=argparse.SUPPRESS)  # fmt: skip
    parser.add_argument("--upstream", help=argparse.SUPPRESS)
    parser.add_argument("--max-tokens", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.calls, args.warmup, args.seconds = 50, 10, 2.0
    return args


if __name__ == "__main__":
    args = parse()
    if args.role == "endpoint":
        asyncio.run(serve_endpoint(args.delay_ms / 1000))
    elif args.role == "gateway":
        asyncio.run(serve_gateway(args.upstream, args.max_tokens))
    else:
        asyncio.run(main(args))
