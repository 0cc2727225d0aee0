"""A span for each model call the gateway forwarded, in OpenTelemetry's GenAI terms.

The span is made after the call, from what the gateway measured (``Call``), with the
call's own start and end times, and as a child of the attempt's span the grant carries:
the gateway answers on its own event loop and thread, where the attempt's context is
not current. Nothing is made while tracing is off (``loop.tracing``).
"""

from __future__ import annotations

import time

from opentelemetry.trace import SpanKind, Status, StatusCode

from activities.host.gateway.grant import Call, Grant
from loop import tracing

OPERATIONS = {
    "/v1/chat/completions": "chat",
    "/v1/messages": "chat",
    "/v1/responses": "chat",
    "/v1/completions": "text_completion",
    "/v1/embeddings": "embeddings",
    "/v1/messages/count_tokens": "count_tokens",
}
"""GenAI operation names (``gen_ai.operation.name``) by path; the rest list models."""


def operation(path: str) -> str:
    return OPERATIONS.get(path, "models")


def record_call(grant: Grant, call: Call, requested: str, seconds: float) -> None:
    """``call``'s span, ended now and started ``seconds`` ago; ``requested`` is the model
    the request named (``call.model`` is the one that answered)."""
    tracer = tracing.tracer()
    if tracer is None:
        return
    ended = time.time_ns()
    op = operation(call.path)
    span = tracer.start_span(
        f"{op} {call.model}".strip(),
        context=grant.trace_context,
        kind=SpanKind.CLIENT,
        start_time=ended - int(seconds * 1e9),
        attributes={
            "gen_ai.system": grant.api,
            "gen_ai.operation.name": op,
            "gen_ai.request.model": requested or grant.model,
            "gen_ai.response.model": call.model,
            "gen_ai.usage.input_tokens": call.tokens_in,
            "gen_ai.usage.output_tokens": call.tokens_out,
            "http.response.status_code": call.status,
            "loop.task_id": grant.task_id,
            "loop.attempt": grant.attempt,
            "loop.cost_usd": call.cost_usd,
        },
    )
    if call.status >= 400:
        span.set_attribute("error.type", str(call.status))
        span.set_status(Status(StatusCode.ERROR))
    span.end(end_time=ended)
