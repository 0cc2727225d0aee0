"""What every hook of ``loop ui`` reads of a request from outside: its body, read in
chunks up to a cap (never all of it first), and its JSON, parsed within bounds
(``loop.hardened.json_in``): a body past the cap or nested past the bound is answered
413 or 400 with the reason, and the server goes on serving.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from loop.hardened import json_in


async def capped(request: Request, limit: int) -> bytes | None:
    """The raw body (a signature is over its bytes), or None past ``limit`` bytes, read
    no further than the chunk that passed it."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def parsed(body: bytes | str) -> tuple[Any, Response | None]:
    """(the JSON of ``body``, None), or (None, the answer refusing it): 413 past the
    values it may hold, 400 nested too deep or not JSON."""
    try:
        return json_in.loads(body), None
    except json_in.Refused as e:
        return None, said(413 if e.too_big else 400, f"refused: the body {e}")
    except ValueError:
        return None, said(400, "refused: the body is not JSON")


def said(status: int, message: str) -> Response:
    """A hook's answer: ``{"message": …}``, which GitHub's and Slack's logs show."""
    return JSONResponse({"message": message}, status_code=status)
