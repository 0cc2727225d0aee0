"""Tracing, end to end: a task's model calls reach an OTLP/HTTP collector as spans.

The collector is a real HTTP server in the test that decodes what the exporter sends
(protobuf, as any collector would); the worker, the gateway, the sandboxed agent and the
scripted model endpoint are the real ones of tests/e2e/test_gateway.py. Tracing is
process-wide, so each test here shuts it down after itself: the other tests of the
session run without it, as a worker without OTEL_* variables does.
"""

from __future__ import annotations

import gzip
import itertools
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from temporalio.client import Client

from loop import tracing
from loop.client import connect
from loop.contracts import TaskState
from loop.settings import Settings
from loop.tasks import start_task
from tests.support.gateway import KEY, calling_spec
from tests.support.model_server import ScriptedModel, reply
from tests.support.tasks import result_of
from worker import build_worker


class Collector:
    """An OTLP/HTTP trace receiver on 127.0.0.1: every span it was sent, with its
    service's name."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, Span]] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                got = ExportTraceServiceRequest.FromString(body)
                for resource in got.resource_spans:
                    service = next(a.value.string_value for a in resource.resource.attributes
                                   if a.key == "service.name")  # fmt: skip
                    for scope in resource.scope_spans:
                        collector.spans += [(service, s) for s in scope.spans]
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def named(self, prefix: str) -> list[Span]:
        return [s for _, s in self.spans if s.name.startswith(prefix)]


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[Collector]:
    """A collector the worker built in the test exports to; tracing off again after."""
    tracing.shutdown()
    c = Collector()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.url)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    try:
        yield c
    finally:
        tracing.shutdown()
        c.server.shutdown()
        c.server.server_close()


def attributes(span: Span) -> dict[str, Any]:
    def value(v: AnyValue) -> Any:
        return getattr(v, v.WhichOneof("value") or "string_value")

    return {a.key: value(a.value) for a in span.attributes}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("traced_client", [False, True], ids=["worker", "client"])
async def test_each_model_call_is_a_span_under_the_attempts_make_activity(
    client: Client, settings: Settings, demo_repo: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, collector: Collector, traced_client: bool,
) -> None:  # fmt: skip
    """With the worker alone tracing, the attempt's activity span is the trace's root;
    with a traced client (``loop.client.connect``, as ``loop run`` makes it) the task's
    start is, and the worker, which runs its client's interceptor, adds no second one."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    if traced_client:
        client = await connect(client.service_client.config.target_host, client.namespace)
    with ScriptedModel() as model:
        model.script([reply("ok", usage=(400, 20))] * 3)
        spec = calling_spec(tmp_path, demo_repo, "basic", model.url, calls=3)
        async with build_worker(client, settings):
            handle, _ = await start_task(client, spec, settings.task_queue)
            r = await result_of(handle, within=150)
    assert r.state == TaskState.DONE_WITH_EVIDENCE, r.reason
    # The worker's exit flushed: every span is at the collector now.
    calls = collector.named("chat ")
    makes = collector.named("RunActivity:make")
    assert len(calls) == 3 and len(makes) == 1, [s.name for _, s in collector.spans]
    make = makes[0]
    assert {service for service, _ in collector.spans} == {"loopwork-worker"}
    for span in calls:
        assert span.name == "chat gpt-4o-mini" and span.kind == Span.SPAN_KIND_CLIENT
        assert span.trace_id == make.trace_id and span.parent_span_id == make.span_id
        assert make.start_time_unix_nano < span.start_time_unix_nano
        assert span.start_time_unix_nano < span.end_time_unix_nano <= make.end_time_unix_nano
        assert attributes(span) == {
            "gen_ai.system": "openai",
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.response.model": "gpt-4o-mini",
            "gen_ai.usage.input_tokens": 400,
            "gen_ai.usage.output_tokens": 20,
            "http.response.status_code": 200,
            "loop.task_id": spec.id,
            "loop.attempt": 1,
            "loop.cost_usd": pytest.approx((400 * 0.15 + 20 * 0.6) / 1e6),
        }
    if traced_client:
        (start,) = collector.named("StartWorkflow:TaskWorkflow")
        assert make.trace_id == start.trace_id
    else:
        assert not make.parent_span_id
    # One after the other, as the agent made them.
    starts = sorted(s.start_time_unix_nano for s in calls)
    assert all(a < b for a, b in itertools.pairwise(starts))


def test_without_an_endpoint_nothing_is_set_up(monkeypatch: pytest.MonkeyPatch) -> None:
    tracing.shutdown()
    for name in tracing.ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    threads = threading.active_count()
    assert tracing.tracer() is None and tracing.interceptors() == []
    tracing.flush()  # a worker's exit: nothing to send, nothing waits
    assert threading.active_count() == threads
