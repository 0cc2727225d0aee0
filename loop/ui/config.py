"""What ``loop ui`` is told: where to listen (``--bind``), who may answer
(``LOOP_UI_TOKEN``), and whose GitHub deliveries it takes (``--sources`` and
``LOOP_GITHUB_WEBHOOK_SECRET_FILE``), and whether it takes Slack's buttons
(``LOOP_SLACK_SIGNING_SECRET_FILE`` with ``LOOP_SLACK_BOT_TOKEN_FILE``). Bad input is
a ``BadInput`` with one line, before anything starts."""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path

from loop.contracts import GitHubSource, TriageSources
from loop.errors import BadInput, LoopError
from loop.loaders import load_sources
from loop.slack.api import DEFAULT_API, read_token
from loop.ui.hooks import Hooked

DEFAULT_BIND = "127.0.0.1:8300"
TOKEN_ENV = "LOOP_UI_TOKEN"
SECRET_FILE_ENV = "LOOP_GITHUB_WEBHOOK_SECRET_FILE"
HOOKS_TOKEN_ENV = "LOOP_HOOKS_TOKEN_FILE"
SLACK_SECRET_ENV = "LOOP_SLACK_SIGNING_SECRET_FILE"
SLACK_TOKEN_ENV = "LOOP_SLACK_BOT_TOKEN_FILE"
SLACK_ANSWERERS_ENV = "LOOP_SLACK_ANSWERERS"
SLACK_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,20}$")
"""A Slack member id (``U012ABCDEF``; ``W…`` on Enterprise Grid): names can change, ids do not."""
MIN_SECRET = 16
"""Shortest secret accepted: a page that approves merges deserves more than a PIN."""
DEFAULT_TOKEN_NAME = "token"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")


@dataclass(frozen=True)
class Bind:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        """Reachable from this machine only: ``localhost`` or a loopback address."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # a host name: whatever it resolves to, treat it as reachable

    @property
    def family(self) -> socket.AddressFamily:
        return socket.AF_INET6 if ":" in self.host else socket.AF_INET

    def url(self, port: int | None = None) -> str:
        """The address to open in a browser (a wildcard bind names this machine)."""
        host = self.host
        if host in ("0.0.0.0", "::"):
            host = socket.gethostname()
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port if port is None else port}/"


def parse_bind(text: str) -> Bind:
    """``HOST:PORT`` (``[::1]:8300`` for IPv6); port 0 picks a free one."""
    raw = text.strip()
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d{1,5})", raw) or re.fullmatch(
        r"([A-Za-z0-9.-]+):(\d{1,5})", raw
    )
    if not m:
        raise BadInput(
            f"--bind {text!r} is not HOST:PORT (for example 127.0.0.1:8300, 0.0.0.0:8300, "
            "[::1]:8300)"
        )
    host, port = m.group(1), int(m.group(2))
    if port > 65535:
        raise BadInput(f"--bind {text!r}: port {port} is not between 0 and 65535")
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise BadInput(f"--bind {text!r}: {host} is not an IPv6 address") from None
    return Bind(host=host, port=port)


def parse_tokens(raw: str) -> dict[str, str]:
    """``LOOP_UI_TOKEN``: comma-separated ``NAME:SECRET`` (or one bare ``SECRET``, named
    ``token``). Returns secret -> name; the name is who an answer is recorded as."""
    tokens: dict[str, str] = {}
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        name, sep, secret = entry.partition(":")
        if not sep:
            name, secret = DEFAULT_TOKEN_NAME, entry
        if not _NAME.fullmatch(name):
            raise BadInput(
                f"{TOKEN_ENV}: {name!r} is not a token name (letters, digits, . _ @ -); "
                "write NAME:SECRET"
            )
        if len(secret) < MIN_SECRET:
            raise BadInput(
                f"{TOKEN_ENV}: the secret of {name!r} is shorter than {MIN_SECRET} characters; "
                'make one with `python -c "import secrets; print(secrets.token_urlsafe(24))"`'
            )
        if secret in tokens:
            raise BadInput(f"{TOKEN_ENV}: {name!r} and {tokens[secret]!r} share a secret")
        tokens[secret] = name
    return tokens


@dataclass
class UiConfig:
    bind: Bind
    home: Path
    task_queue: str
    local_user: str
    tokens: dict[str, str] = field(default_factory=dict)
    """secret -> name; empty: no token, the page answers as the local user (loopback only)."""
    poll_seconds: float = 2.0
    github_secret: bytes | None = None
    """The webhook secret; None: ``POST /hooks/github`` does not exist."""
    hooked: list[Hooked] = field(default_factory=list)
    """The ``github`` sources of ``--sources`` whose deliveries are taken."""
    slack: SlackConfig | None = None
    """None: ``POST /hooks/slack`` does not exist."""
    hooks_token: str | None = None
    """The bearer token of ``POST /hooks/tasks``; None: the path does not exist."""
    tasked: dict[str, TriageSources] = field(default_factory=dict)
    """Source name -> its sources file with that source alone: what a body may name."""


@dataclass(frozen=True)
class SlackConfig:
    secret: str
    """The Slack app's signing secret."""
    token: str
    """Its bot token: the page opens modals and says refusals in messages."""
    api_url: str
    answerers: frozenset[str] = frozenset()
    """Slack user ids whose presses are answers; empty: anyone in the channel's."""


def ui_config(
    bind: str,
    environ: dict[str, str],
    *,
    home: Path,
    task_queue: str,
    local_user: str,
    sources: list[Path] | None = None,
) -> UiConfig:
    """Everything ``loop ui`` needs, checked: a bind anywhere but loopback needs a token;
    ``--sources`` and the webhook secret go together."""
    where = parse_bind(bind)
    tokens = parse_tokens(environ.get(TOKEN_ENV, ""))
    if not where.loopback and not tokens:
        raise BadInput(
            f"--bind {bind} listens beyond this machine: set {TOKEN_ENV} (NAME:SECRET) so "
            "only people with the token can see and answer tasks, or bind 127.0.0.1"
        )
    token = hooks_token(environ.get(HOOKS_TOKEN_ENV, ""))
    secret, hooked = webhook(
        environ.get(SECRET_FILE_ENV, ""), sources or [], tasks=token is not None
    )
    return UiConfig(
        bind=where,
        home=home,
        task_queue=task_queue,
        local_user=local_user,
        tokens=tokens,
        github_secret=secret,
        hooked=hooked,
        slack=slack(environ),
        hooks_token=token,
        tasked=tasked(sources or []) if token is not None else {},
    )


def secret_file_of(env: str, file: str, fix: str) -> str:
    """The secret in the file ``env`` names, stripped: one line naming the variable when it
    cannot be read or is too short to be a secret (``fix``: where a good one comes from)."""
    try:
        secret = Path(file).expanduser().read_text().strip()
    except OSError as e:
        raise BadInput(f"{env}: cannot read {file}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise BadInput(f"{env}: {file} is not text; {fix}") from None
    if len(secret) < MIN_SECRET:
        raise BadInput(
            f"{env}: the secret in {file} is shorter than {MIN_SECRET} characters; {fix}"
        )
    return secret


MAKE_ONE = 'make one with `python -c "import secrets; print(secrets.token_urlsafe(32))"`'


def hooks_token(token_file: str) -> str | None:
    """The bearer token ``POST /hooks/tasks`` takes, from its file; None: no such path."""
    if not token_file:
        return None
    return secret_file_of(HOOKS_TOKEN_ENV, token_file, MAKE_ONE)


def tasked(files: list[Path]) -> dict[str, TriageSources]:
    """Every source of ``--sources`` by name, each with its file's template and policy."""
    if not files:
        raise BadInput(
            f"{HOOKS_TOKEN_ENV} is set: name the sources whose templates make the tasks "
            "with --sources FILE"
        )
    found: dict[str, TriageSources] = {}
    for file in files:
        try:
            loaded = load_sources(file)
        except LoopError as e:
            raise BadInput(str(e).splitlines()[0]) from None
        for s in loaded.sources:
            if s.name in found:
                raise BadInput(f"--sources: two sources are named {s.name}; keep one")
            found[s.name] = loaded.model_copy(update={"sources": [s]})
    return found


def slack(environ: dict[str, str]) -> SlackConfig | None:
    """The Slack app's signing secret and bot token: both, or neither."""
    secret_file = environ.get(SLACK_SECRET_ENV, "")
    if not secret_file:
        return None
    token_file = environ.get(SLACK_TOKEN_ENV, "")
    if not token_file:
        raise BadInput(
            f"{SLACK_SECRET_ENV} is set: set {SLACK_TOKEN_ENV} too (the bot token opens the "
            "modals that ask for a reason)"
        )
    secret = secret_file_of(
        SLACK_SECRET_ENV,
        secret_file,
        "copy the Signing Secret from the app's Basic Information page",
    )
    token = read_token(Path(token_file))
    api_url = environ.get("LOOP_SLACK_API_URL") or DEFAULT_API
    return SlackConfig(
        secret=secret,
        token=token,
        api_url=api_url,
        answerers=slack_answerers(environ.get(SLACK_ANSWERERS_ENV, "")),
    )


def slack_answerers(value: str) -> frozenset[str]:
    """``LOOP_SLACK_ANSWERERS``: comma-separated Slack member ids; a name or a typo is
    refused here rather than silently letting nobody (or everybody) answer."""
    ids = [part.strip() for part in value.split(",") if part.strip()]
    if value.strip() and not ids:
        raise BadInput(f"{SLACK_ANSWERERS_ENV}: no member id in {value!r}")
    for one in ids:
        if not SLACK_USER_ID.match(one):
            raise BadInput(
                f"{SLACK_ANSWERERS_ENV}: {one[:40]!r} is not a Slack member id (like "
                "U012ABCDEF: a profile's ⋮ menu, Copy member ID)"
            )
    return frozenset(ids)


def webhook(
    secret_file: str, files: list[Path], *, tasks: bool = False
) -> tuple[bytes | None, list[Hooked]]:
    """The webhook secret and the ``github`` sources it serves: both, or neither (``tasks``:
    ``--sources`` serves ``POST /hooks/tasks`` too)."""
    if not secret_file:
        if files and not tasks:
            raise BadInput(
                f"--sources names the sources whose GitHub deliveries are taken: set "
                f"{SECRET_FILE_ENV} to the file holding the webhook's secret (or "
                f"{HOOKS_TOKEN_ENV}, for POST /hooks/tasks)"
            )
        return None, []
    secret = secret_file_of(SECRET_FILE_ENV, secret_file, MAKE_ONE).encode()
    hooked: list[Hooked] = []
    for file in files:
        try:
            loaded = load_sources(file)
        except LoopError as e:
            raise BadInput(str(e).splitlines()[0]) from None
        hooked += [Hooked(loaded, s) for s in loaded.sources if isinstance(s, GitHubSource)]
    if not hooked:
        raise BadInput(
            f"{SECRET_FILE_ENV} is set but no --sources file has a github source; name "
            "the sources whose events it handles with --sources FILE"
        )
    repos = [h.source.repo.lower() for h in hooked]
    twice = next((r for r in repos if repos.count(r) > 1), None)
    if twice:
        raise BadInput(f"--sources: two github sources are for {twice}; keep one per repository")
    return secret, hooked
