"""Who is asking, and whether a request may change anything.

- **Who.** With ``LOOP_UI_TOKEN`` set, every page needs a token: sent as
  ``Authorization: Bearer SECRET`` (scripts) or exchanged once on ``/login`` for a
  session cookie (browsers); the token's name is who an answer is recorded as.
  Without it (loopback only) the page answers as the local user who started it.
- **No cross-site requests.** A request that changes something (a POST) from a
  browser session must come from this page's own origin (``Origin``, else
  ``Referer``, equal to the address it was sent to) and carry the session's form
  token. A bearer request needs neither: a browser never adds that header by itself.
- **No rebinding.** Without a token, only loopback host names are answered, so a web
  page whose name is made to resolve to 127.0.0.1 cannot read or drive this one.

Sessions live in memory: restarting ``loop ui`` signs everybody out.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from starlette.requests import Request

SESSION_TTL_S = 12 * 3600
MAX_SESSIONS = 10_000
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})


@dataclass
class Session:
    sid: str
    who: str
    csrf: str
    created: float
    flashes: list[tuple[str, str]] = field(default_factory=list)
    """(kind, text) shown once on the next page: ``ok`` or ``error``."""


@dataclass
class Caller:
    who: str | None
    """None: not signed in (a token is required and none came)."""
    via: str
    """``bearer``, ``session`` or ``none``."""
    session: Session | None = None
    new_session: bool = False


class Guard:
    def __init__(self, tokens: dict[str, str], local_user: str, port: int) -> None:
        self.tokens = dict(tokens)
        self.local_user = local_user
        self.cookie = f"loop_ui_{port}"
        """One cookie per port: cookies do not tell ports apart, two pages on one host would."""
        self.sessions: OrderedDict[str, Session] = OrderedDict()

    @property
    def needs_token(self) -> bool:
        return bool(self.tokens)

    # ------------------------------------------------------------------ who

    def name_of(self, secret: str) -> str | None:
        """The token's name, compared in constant time against every secret."""
        found = None
        for known, name in self.tokens.items():
            if hmac.compare_digest(known.encode(), secret.encode()):
                found = name
        return found

    def identify(self, request: Request) -> Caller:
        auth = request.headers.get("authorization", "")
        if auth[:7].lower() == "bearer " and self.needs_token:
            name = self.name_of(auth[7:].strip())
            return Caller(name, "bearer" if name else "none")
        session = self._session(request.cookies.get(self.cookie, ""))
        if session is not None:
            return Caller(session.who, "session", session)
        if self.needs_token:
            return Caller(None, "none")
        return Caller(self.local_user, "session", self.open_session(self.local_user), True)

    def _session(self, sid: str) -> Session | None:
        s = self.sessions.get(sid) if sid else None
        if s is None:
            return None
        if time.monotonic() - s.created > SESSION_TTL_S:
            del self.sessions[sid]
            return None
        return s

    def open_session(self, who: str) -> Session:
        s = Session(secrets.token_urlsafe(32), who, secrets.token_urlsafe(32), time.monotonic())
        self.sessions[s.sid] = s
        while len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)
        return s

    def close_session(self, session: Session | None) -> None:
        if session is not None:
            self.sessions.pop(session.sid, None)

    # ------------------------------------------------------------------ where from

    def host_allowed(self, request: Request) -> bool:
        """Without a token only loopback names are answered (no DNS rebinding)."""
        if self.needs_token:
            return True
        host = request.headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return name.lower() in LOOPBACK_NAMES

    @staticmethod
    def same_origin(request: Request) -> bool:
        """``Origin`` (else ``Referer``) names the very address the request was sent to."""
        host = request.headers.get("host", "")
        if not host:
            return False
        expected = f"{request.url.scheme}://{host}".lower()
        origin = request.headers.get("origin")
        if origin and origin != "null":
            return origin.lower() == expected
        referer = request.headers.get("referer")
        if referer:
            parts = urlsplit(referer)
            return f"{parts.scheme}://{parts.netloc}".lower() == expected
        return False

    @staticmethod
    def csrf_ok(caller: Caller, token: str) -> bool:
        """A form's token is the session's (bearer requests carry none and need none)."""
        if caller.via == "bearer":
            return True
        if caller.session is None or not token:
            return False
        return hmac.compare_digest(caller.session.csrf.encode(), token.encode())
