"""structlog, configured once at the edge (CLI, worker), never on import.

Logs are JSON when stderr is not a terminal (a worker under systemd, CI) and
readable lines when it is. Activity logs are bound with task id, attempt and
activity so one task's story can be grepped out of a busy worker's log.
"""

from __future__ import annotations

import logging
import sys

import structlog

from loop import redact


def configure(level: str = "INFO", *, json: bool | None = None) -> None:
    as_json = not sys.stderr.isatty() if json is None else json
    renderer = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    numeric = logging.getLevelName(level.upper())
    logging.basicConfig(level=numeric, stream=sys.stderr, format="%(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(redact.LoggingFilter())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact.structlog_processor,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


def log_for(
    task_id: str, attempt: int | None, activity: str
) -> structlog.typing.FilteringBoundLogger:
    return structlog.get_logger("loop").bind(task_id=task_id, attempt=attempt, activity=activity)
