"""Encrypted payloads: what the Temporal server stores is ciphertext.

With ``LOOP_CODEC_KEY_FILE`` set (a file holding a 32-byte key, raw or as 64
hex or base64 characters), every payload — workflow inputs and results,
activity inputs and results, signals, queries, memos — is sealed with AES-GCM
before it leaves the process, and failure messages and stack traces are moved
into an encoded payload too (``DefaultFailureConverterWithEncodedAttributes``),
so the server, its database and anyone reading its history without the key see
neither code, evidence nor secrets. Client, worker, CLI and Replayer all build
their converter with :func:`data_converter`, so they agree.

``loop codec-server`` (``serve``) offers Temporal's codec endpoint on loopback
so authorised people still read histories in the Temporal UI and with
``temporal workflow show --codec-endpoint``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import hashlib
import hmac
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
)

from loop.errors import BadInput, Sealed

ENCODING = b"binary/encrypted"
KEY_ENV = "LOOP_CODEC_KEY_FILE"


def load_key(path: str | Path) -> bytes:
    """A 32-byte AES key from a file (raw bytes, hex or base64); a bad file is a clear error."""
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as e:
        raise BadInput(f"{KEY_ENV}: cannot read {file}: {e.strerror}") from None
    text = raw.strip()
    candidates = [raw]
    try:
        candidates.append(bytes.fromhex(text.decode()))
    except (ValueError, UnicodeDecodeError):
        pass
    try:
        candidates.append(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError):
        pass
    for key in candidates:
        if len(key) == 32:
            return key
    raise BadInput(
        f"{KEY_ENV}: {file} must hold a 32-byte key (raw, hex or base64); make one with "
        '`python -c "import os; print(os.urandom(32).hex())" > key`'
    )


class EncryptionCodec(PayloadCodec):
    def __init__(self, key: bytes) -> None:
        self.aes = AESGCM(key)
        self.key_id = hashlib.sha256(key).hexdigest()[:16].encode()

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._seal(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._open(p) for p in payloads]

    def _seal(self, p: Payload) -> Payload:
        nonce = os.urandom(12)
        sealed = self.aes.encrypt(nonce, p.SerializeToString(), None)
        return Payload(
            metadata={"encoding": ENCODING, "encryption-key-id": self.key_id},
            data=nonce + sealed,
        )

    def _open(self, p: Payload) -> Payload:
        if p.metadata.get("encoding") != ENCODING:
            return p  # written before encryption was switched on
        if p.metadata.get("encryption-key-id") != self.key_id:
            raise Sealed(
                f"the payloads were encrypted with another key: set {KEY_ENV} to the key "
                "file the worker uses"
            )
        data = bytes(p.data)
        opened = Payload()
        opened.ParseFromString(self.aes.decrypt(data[:12], data[12:], None))
        return opened


class NoKeyCodec(PayloadCodec):
    """Without a key nothing is sealed, and a sealed payload is one clear error
    (not the converter's KeyError on an unknown encoding)."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        if any(p.metadata.get("encoding") == ENCODING for p in payloads):
            raise Sealed(
                f"the payloads are encrypted: set {KEY_ENV} to the key file the worker uses"
            )
        return list(payloads)


def data_converter(environ: dict[str, str] | None = None) -> DataConverter:
    """The one converter: pydantic, plus encryption when a key file is configured."""
    env = os.environ if environ is None else environ
    key_file = env.get(KEY_ENV)
    if not key_file:
        return dataclasses.replace(pydantic_data_converter, payload_codec=NoKeyCodec())
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=EncryptionCodec(load_key(key_file)),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


# --------------------------------------------------------------------------- codec server


LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
MAX_BODY = 64 * 1024 * 1024


def ui_allowed(origin: str, extra: str = "") -> bool:
    """Whether CORS admits a browser page from ``origin``: a Temporal UI on this machine,
    on any port and under any loopback name, or the one ``extra`` origin configured."""
    if not origin:
        return False
    if extra and origin == extra.rstrip("/"):
        return True
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.hostname in LOOPBACK_HOSTS


class _Refusals:
    """Says on stderr that callers send a wrong token: the Temporal CLI retries every
    refusal silently until its 10 s deadline, so this line is the only clear sign."""

    EVERY_S = 10.0

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last = -self.EVERY_S
        self.count = 0

    def note(self) -> None:
        with self.lock:
            self.count += 1
            now = time.monotonic()
            if now - self.last < self.EVERY_S:
                return
            self.last = now
            print(
                f"refused {self.count} request(s) without the right bearer token: callers must "
                'send "Authorization: Bearer $LOOP_CODEC_TOKEN" (temporal: --codec-auth)',
                file=sys.stderr,
                flush=True,
            )


def make_server(
    codec: PayloadCodec, *, host: str, port: int, token: str, ui_origin: str = ""
) -> ThreadingHTTPServer:
    """Temporal's remote codec protocol: POST /encode and /decode of ``{"payloads": [...]}``.

    Only requests with ``Authorization: Bearer <token>`` are answered (401
    otherwise, at once); CORS admits a UI on this machine on any port (a page
    still needs the token), and ``ui_origin`` for a UI elsewhere.
    """

    refusals = _Refusals()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass  # request lines could carry namespaces and ids; stay quiet

        def _cors(self) -> None:
            origin = self.headers.get("Origin", "")
            if ui_allowed(origin, ui_origin):
                self.send_header("Access-Control-Allow-Origin", origin)
                self.send_header("Vary", "Origin")
                self.send_header("Access-Control-Allow-Credentials", "true")
                self.send_header(
                    "Access-Control-Allow-Headers", "Authorization, Content-Type, X-Namespace"
                )
                self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")

        def _reply(self, code: int, body: bytes = b"") -> None:
            self.send_response(code)
            self._cors()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_OPTIONS(self) -> None:
            self._reply(200)

        def do_POST(self) -> None:
            # The body is read before any refusal: a client still sending it when the
            # connection closes sees a reset, not the answer, and retries until its deadline.
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self.close_connection = True
                self._reply(413, b'{"error": "body too large"}')
                return
            body = self.rfile.read(length)
            action = self.path.rstrip("/").rsplit("/", 1)[-1]
            if action not in ("encode", "decode"):
                self._reply(404, b'{"error": "use /encode or /decode"}')
                return
            if not hmac.compare_digest(self.headers.get("Authorization", ""), f"Bearer {token}"):
                refusals.note()
                self._reply(401, b'{"error": "missing or wrong bearer token"}')
                return
            try:
                payloads = json_format.Parse(body, Payloads())
                run = codec.encode if action == "encode" else codec.decode
                done = asyncio.run(run(list(payloads.payloads)))
            except Exception as e:  # a bad body or a payload sealed with another key
                self._reply(400, json.dumps({"error": str(e).splitlines()[0]}).encode())
                return
            body = json_format.MessageToJson(Payloads(payloads=done)).encode()
            self._reply(200, body)

    return ThreadingHTTPServer((host, port), Handler)
