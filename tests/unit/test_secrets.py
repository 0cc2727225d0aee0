"""Secrets without a server: the codec endpoint people decode history with, key files,
redaction. That the history holds only ciphertext, and that a planted secret appears
nowhere, is checked on a real server in tests/e2e/test_secrets.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload

from loop.codec import EncryptionCodec, load_key, make_server
from loop.errors import BadInput
from loop.redact import redact, redact_obj

TOKEN = "codec-token-for-tests"


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "codec.key"
    path.write_text(os.urandom(32).hex())
    return path


async def test_codec_server_needs_the_token_and_allows_the_ui_origin(key_file: Path):
    codec = EncryptionCodec(load_key(key_file))
    (sealed,) = await codec.encode([Payload(metadata={"encoding": b"json/plain"}, data=b'"hi"')])
    body = json.dumps(
        {
            "payloads": [
                {
                    "metadata": {
                        k: base64.b64encode(v).decode() for k, v in sealed.metadata.items()
                    },
                    "data": base64.b64encode(sealed.data).decode(),
                }
            ]
        }
    ).encode()
    server = make_server(
        codec, host="127.0.0.1", port=0, token=TOKEN, ui_origin="http://localhost:8233"
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/decode"

    def post(headers: dict[str, str], method: str = "POST") -> tuple[int, bytes, dict]:
        req = urllib.request.Request(
            url, data=body if method == "POST" else None, headers=headers, method=method
        )
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, r.read(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read(), dict(e.headers)

    try:
        code, _, _ = await asyncio.to_thread(post, {"Content-Type": "application/json"})
        assert code == 401
        code, out, _ = await asyncio.to_thread(
            post, {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
        )
        assert code == 200
        payload = json.loads(out)["payloads"][0]
        assert base64.b64decode(payload["data"]) == b'"hi"'
        code, _, headers = await asyncio.to_thread(
            post, {"Origin": "http://localhost:8233"}, "OPTIONS"
        )
        assert headers.get("Access-Control-Allow-Origin") == "http://localhost:8233"
        # Any Temporal UI on this machine, on any port and under any loopback name
        # (`loop dev` prints 127.0.0.1), is allowed; a page from elsewhere is not.
        for origin in ("http://127.0.0.1:8611", "http://localhost:9233", "http://[::1]:8233"):
            _, _, headers = await asyncio.to_thread(post, {"Origin": origin}, "OPTIONS")
            assert headers.get("Access-Control-Allow-Origin") == origin, origin
        for origin in ("http://evil.example", "http://127.0.0.1.evil.example:8233"):
            _, _, headers = await asyncio.to_thread(post, {"Origin": origin}, "OPTIONS")
            assert "Access-Control-Allow-Origin" not in headers, origin
    finally:
        server.shutdown()


def test_a_bad_key_file_is_one_clear_line(tmp_path: Path):
    short = tmp_path / "short.key"
    short.write_text("abcd")
    with pytest.raises(BadInput, match="32-byte key"):
        load_key(short)


def test_redaction_of_known_values_and_credential_shapes():
    env = {"GITHUB_TOKEN": "not-a-real-token-123456", "HOME": "/root"}
    text = "token=not-a-real-token-123456 key sk-abcdefghijklmnop Bearer abc.def.ghijkl /root"
    clean = redact(text, env)
    assert "not-a-real-token-123456" not in clean and "sk-abcdefghijklmnop" not in clean
    assert "abc.def.ghijkl" not in clean and "/root" in clean


def test_redaction_of_every_string_in_json_like_data(monkeypatch: pytest.MonkeyPatch):
    """The worker's environment is read once for the whole structure: each string in it,
    however deep, is masked, and what is not a string is kept as it is."""
    monkeypatch.setenv("LOOP_TEST_API_KEY", "planted-secret-0000")
    data = {
        "said": "the key is planted-secret-0000",
        "calls": [{"auth": "Bearer abc.def.ghijkl", "n": 3}, ("planted-secret-0000", None)],
    }
    clean = redact_obj(data)
    assert "planted-secret-0000" not in json.dumps(clean)
    assert "abc.def.ghijkl" not in json.dumps(clean)
    assert clean["said"].startswith("the key is ") and clean["calls"][0]["n"] == 3
    assert clean["calls"][1][1] is None
