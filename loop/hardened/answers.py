"""Answers that prove who sent them: an HMAC under a key the worker and people's tools share.

Anyone who can reach the Temporal frontend can send an update or a signal, and its
payload says whatever its sender writes, ``by`` included. So every answer (approve,
reject, feedback, extend) carries ``at`` (when it was signed) and ``signature``:
HMAC-SHA256, under the answer key, over the workflow id, the answer's name and every
other field of the payload, as canonical JSON. The worker checks it
(``activities.answers``); an answer that is unsigned, forged, replayed or older than
``MAX_AGE_S`` is refused: an update in its validator, with the reason to its sender
and nothing in history; a signal with an event in the trace saying why.

The key: the file ``LOOP_ANSWER_KEY_FILE`` names, else ``LOOP_HOME/answer.key`` when it
exists (``loop dev`` and ``loop demo`` make one). Without a key the worker takes
unsigned answers and the trace says they are unsigned: then whoever reaches the
frontend can answer, and Temporal's own authorization (mTLS, API keys with namespace
permissions) is what keeps them out.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

KEY_ENV = "LOOP_ANSWER_KEY_FILE"
KEY_NAME = "answer.key"
MAX_AGE_S = 600
"""How long a signed answer stays good (clocks on the two machines may differ a little)."""
KEY_BYTES = 32


class AnswerKeyError(ValueError):
    """The answer key file cannot be used; ``str()`` says why and what to do, in one line."""


def read_key(path: Path) -> bytes:
    try:
        text = path.read_text().strip()
    except OSError as e:
        raise AnswerKeyError(f"{KEY_ENV} {path}: {e.strerror}") from None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        why = "not a hex key (`loop dev` makes one)"
        raise AnswerKeyError(f"{KEY_ENV} {path}: {why}") from None
    if len(key) < KEY_BYTES:
        raise AnswerKeyError(f"{KEY_ENV} {path}: {len(key)} bytes; an answer key has {KEY_BYTES}")
    return key


def create_key(path: Path) -> bool:
    """Make a key file (0600) where there is none; True when one was made."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(KEY_BYTES) + "\n")
    return True


def message(workflow_id: str, answer: str, fields: Mapping[str, Any]) -> bytes:
    """What is signed: the workflow, the answer's name and its fields (but the signature)."""
    body = {k: v for k, v in fields.items() if k != "signature"}
    data = {"workflow_id": workflow_id, "answer": answer, "fields": body}
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sign(key: bytes, workflow_id: str, answer: str, fields: Mapping[str, Any]) -> str:
    return hmac.new(key, message(workflow_id, answer, fields), hashlib.sha256).hexdigest()


def valid(key: bytes, workflow_id: str, answer: str, fields: Mapping[str, Any]) -> bool:
    signature = str(fields.get("signature") or "")
    return bool(signature) and hmac.compare_digest(
        signature, sign(key, workflow_id, answer, fields)
    )
