"""One redaction for everything Loopwork writes: logs, traces, run files, results.

Two kinds of secret are removed: the values of the worker's own secret
environment variables (names containing KEY, TOKEN, SECRET, PASSWORD or
CREDENTIAL, eight characters or longer), wherever they appear, and text shaped
like a credential (OpenAI ``sk-`` keys, GitHub tokens, Slack tokens, AWS access
key ids, bearer headers) even when Loopwork never saw its value.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loop.hardened.files import open_untrusted

MASK = "[redacted]"
LINE_LIMIT = 1 << 20
"""``redact_file`` reads at most this much at once (a log may be one endless line)."""
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
NOT_SECRET = {"LOOP_CODEC_KEY_FILE", "PYTHONHASHSEED", "KEYTIMEOUT"}
SHAPES = re.compile(
    r"\b(?:sk|pk|rk)-[A-Za-z0-9_*.\-]{4,}"  # OpenAI-style keys, masked ones too (sk-ab**yz)
    r"|\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}"
    r"|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|(?i:bearer)\s+[A-Za-z0-9._~+/=\-]{8,}"
)


@functools.cache
def _known(items: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    values = {v for k, v in items if SECRET_NAME.search(k) and k not in NOT_SECRET and len(v) >= 8}
    return tuple(sorted(values, key=len, reverse=True))


def secret_values(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    env = os.environ if environ is None else environ
    return _known(tuple(sorted(env.items())))


def redact(text: str, environ: Mapping[str, str] | None = None, also: tuple[str, ...] = ()) -> str:
    """``text`` without the worker's secret values, credential-shaped text, or ``also``."""
    return _masked(text, (*secret_values(environ), *(v for v in also if len(v) >= 4)))


def _masked(text: str, values: tuple[str, ...]) -> str:
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return SHAPES.sub(MASK, text)


def redact_obj(value: Any) -> Any:
    """Redact every string inside JSON-like data (dicts, lists, strings); the secrets are
    read from the environment once for all of them."""
    return _each_masked(value, secret_values())


def _each_masked(value: Any, values: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return _masked(value, values)
    if isinstance(value, dict):
        return {k: _each_masked(v, values) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_each_masked(v, values) for v in value]
    return value


def redact_file(path: Path) -> None:
    """Rewrite a log the worker wrote without secrets (agents may print their environment).

    Line by line (a megabyte at most at once) into a file beside it, so a log of a
    gigabyte costs no gigabyte of memory; replaced only when something changed. A link
    in its place is not followed.
    """
    try:
        fd = open_untrusted(path)
    except OSError:
        return
    changed = False
    tmp = path.with_name(f".{path.name}.redacting")
    try:
        with os.fdopen(fd, "rb") as src:
            with tmp.open("wb") as out:
                while raw := src.readline(LINE_LIMIT):
                    line = raw.decode("utf-8", "surrogateescape")
                    clean = redact(line)
                    changed = changed or clean != line
                    out.write(clean.encode("utf-8", "surrogateescape"))
        if changed:
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def structlog_processor(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    return {k: redact_obj(v) for k, v in event.items()}


class LoggingFilter(logging.Filter):
    """For stdlib logging, which the Temporal SDK uses for activity tracebacks."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if record.exc_info and record.exc_info[1] is not None:
            clean += "\n" + redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        if clean != message or record.args:
            record.msg, record.args = clean, ()
        return True
