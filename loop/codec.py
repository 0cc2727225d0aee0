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
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
)

from loop.errors import BadInput

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
            raise ValueError("payload was sealed with another key (encryption-key-id differs)")
        data = bytes(p.data)
        opened = Payload()
        opened.ParseFromString(self.aes.decrypt(data[:12], data[12:], None))
        return opened


def data_converter(environ: dict[str, str] | None = None) -> DataConverter:
    """The one converter: pydantic, plus encryption when a key file is configured."""
    env = os.environ if environ is None else environ
    key_file = env.get(KEY_ENV)
    if not key_file:
        return pydantic_data_converter
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=EncryptionCodec(load_key(key_file)),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


# --------------------------------------------------------------------------- codec server


def make_server(
    codec: PayloadCodec, *, host: str, port: int, token: str, ui_origin: str
) -> ThreadingHTTPServer:
    """Temporal's remote codec protocol: POST /encode and /decode of ``{"payloads": [...]}``.

    Only requests with ``Authorization: Bearer <token>`` are answered (401
    otherwise); CORS admits the configured UI origin so the browser UI can call it.
    """

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass  # request lines could carry namespaces and ids; stay quiet

        def _cors(self) -> None:
            if self.headers.get("Origin") == ui_origin:
                self.send_header("Access-Control-Allow-Origin", ui_origin)
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
            action = self.path.rstrip("/").rsplit("/", 1)[-1]
            if action not in ("encode", "decode"):
                self._reply(404, b'{"error": "use /encode or /decode"}')
                return
            if not hmac.compare_digest(self.headers.get("Authorization", ""), f"Bearer {token}"):
                self._reply(401, b'{"error": "missing or wrong bearer token"}')
                return
            length = int(self.headers.get("Content-Length") or 0)
            try:
                payloads = json_format.Parse(self.rfile.read(length), Payloads())
                run = codec.encode if action == "encode" else codec.decode
                done = asyncio.run(run(list(payloads.payloads)))
            except Exception as e:  # a bad body or a payload sealed with another key
                self._reply(400, json.dumps({"error": str(e).splitlines()[0]}).encode())
                return
            body = json_format.MessageToJson(Payloads(payloads=done)).encode()
            self._reply(200, body)

    return ThreadingHTTPServer((host, port), Handler)
