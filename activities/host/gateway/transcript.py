"""What a person reads of an agent's model calls when ``agent.transcript`` is on.

Each call's request and answer, as the gateway forwarded them, go to the attempt's
folder (the worker's) as ``call-NNNN.log``: the review page lists them with the
calls. They are bounded (a context can be megabytes) and redacted: the key and the
run's token never reach the file, nor anything the worker's redaction knows.
"""

from __future__ import annotations

from pathlib import Path

from loop.redact import redact

TRANSCRIPT_BYTES = 256 * 1024
"""Kept of each side of a call; the rest is cut, with a note."""


class Transcript:
    """One call's bodies, kept up to ``TRANSCRIPT_BYTES`` each while it streams."""

    def __init__(self, request: bytes) -> None:
        self.request = request[:TRANSCRIPT_BYTES]
        self.request_cut = len(request) > TRANSCRIPT_BYTES
        self.answer = bytearray()
        self.answer_cut = False

    def feed(self, chunk: bytes) -> None:
        room = TRANSCRIPT_BYTES - len(self.answer)
        self.answer += chunk[: max(room, 0)]
        self.answer_cut = self.answer_cut or len(chunk) > room

    def write(self, file: Path, head: str, status: int, secrets: tuple[str, ...]) -> None:
        cut = f"\n[cut at {TRANSCRIPT_BYTES // 1024} KiB]"
        text = (
            f"{head}\n{self.request.decode('utf-8', 'replace')}{cut if self.request_cut else ''}"
            f"\n\n--- answer: {status}\n{self.answer.decode('utf-8', 'replace')}"
            f"{cut if self.answer_cut else ''}\n"
        )
        file.write_text(redact(text, also=secrets))
