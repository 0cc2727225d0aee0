"""A unified diff (``git diff``) as files of highlighted lines.

Highlighting is Pygments': the lexer comes from the file's name (plain text when none
fits), and each hunk's text is lexed as one piece, so a string or comment that spans
lines is coloured as a whole; the tokens are then cut back into the diff's lines. What
comes out is HTML-escaped spans with Pygments' short class names (``k``, ``s2``, ...),
styled by ``css()``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html import escape

from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import TextLexer, get_lexer_for_filename
from pygments.token import STANDARD_TYPES, _TokenType
from pygments.util import ClassNotFound

MAX_LINES_PER_FILE = 4000
CSS_SCOPE = ".hl"
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$")


@dataclass
class Line:
    kind: str
    """``add``, ``del``, ``ctx``, ``hunk`` (an ``@@`` header) or ``note``."""
    old: int | None
    new: int | None
    text: str
    html: str = ""
    """The text, escaped and highlighted (set by ``highlight``)."""


@dataclass
class DiffFile:
    path: str
    old_path: str = ""
    status: str = "modified"
    """``modified``, ``added``, ``deleted``, ``renamed``, ``mode`` or ``binary``."""
    lines: list[Line] = field(default_factory=list)
    additions: int = 0
    deletions: int = 0
    truncated: bool = False

    @property
    def anchor(self) -> str:
        return "file-" + re.sub(r"[^A-Za-z0-9_-]", "-", self.path)


def _unquote(path: str) -> str:
    """git's C-style quoting of unusual paths (``"a/t\\303\\251st"``)."""
    if not (len(path) >= 2 and path[0] == path[-1] == '"'):
        return path
    raw = path[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
    try:
        return raw.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return raw


def _strip_prefix(path: str) -> str:
    path = _unquote(path.strip())
    if path == "/dev/null":
        return ""
    return path[2:] if path[:2] in ("a/", "b/") else path


def parse(text: str) -> list[DiffFile]:
    """Files of a ``git diff`` (``diff --git`` sections); anything before the first is ignored."""
    files: list[DiffFile] = []
    cur: DiffFile | None = None
    old = new = 0
    in_hunk = False
    for raw in text.splitlines():
        if raw.startswith("diff --git "):
            m = re.match(r'diff --git ("?a/.*"?) ("?b/.*"?)$', raw)
            a, b = (m.group(1), m.group(2)) if m else ("", raw.rsplit(" ", 1)[-1])
            cur = DiffFile(path=_strip_prefix(b), old_path=_strip_prefix(a))
            files.append(cur)
            in_hunk = False
            continue
        if cur is None:
            continue
        if not in_hunk:
            if raw.startswith("new file mode"):
                cur.status = "added"
            elif raw.startswith("deleted file mode"):
                cur.status = "deleted"
            elif raw.startswith("rename from "):
                cur.status, cur.old_path = "renamed", _unquote(raw[len("rename from ") :])
            elif raw.startswith("rename to "):
                cur.path = _unquote(raw[len("rename to ") :])
            elif raw.startswith("old mode") and cur.status == "modified":
                cur.status = "mode"
            elif raw.startswith("Binary files") or raw.startswith("GIT binary patch"):
                cur.status = "binary"
            elif raw.startswith("--- "):
                cur.old_path = _strip_prefix(raw[4:]) or cur.old_path
            elif raw.startswith("+++ "):
                cur.path = _strip_prefix(raw[4:]) or cur.path
        m = _HUNK.match(raw)
        if m:
            in_hunk = True
            if cur.status == "mode":
                cur.status = "modified"
            old, new = int(m.group(1)), int(m.group(2))
            cur.lines.append(Line("hunk", None, None, raw))
            continue
        if not in_hunk:
            continue
        if len(cur.lines) >= MAX_LINES_PER_FILE:
            cur.truncated = True
            continue
        tag, body = raw[:1], raw[1:]
        if tag == "+":
            cur.lines.append(Line("add", None, new, body))
            cur.additions += 1
            new += 1
        elif tag == "-":
            cur.lines.append(Line("del", old, None, body))
            cur.deletions += 1
            old += 1
        elif tag == " " or raw == "":
            cur.lines.append(Line("ctx", old, new, body))
            old += 1
            new += 1
        elif tag == "\\":
            cur.lines.append(Line("note", None, None, raw))
    for f in files:
        if not f.path:  # a deleted file: only its old name
            f.path = f.old_path
    return files


def lexer_for(path: str) -> Lexer:
    try:
        return get_lexer_for_filename(path, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=False)


def _css_class(ttype: _TokenType) -> str:
    while ttype not in STANDARD_TYPES:
        ttype = ttype.parent
    return STANDARD_TYPES[ttype]


def highlight_lines(texts: list[str], lexer: Lexer) -> list[str]:
    """Each line's HTML, from lexing the lines as one text."""
    out: list[str] = []
    current: list[str] = []
    for ttype, value in lexer.get_tokens("\n".join(texts)):
        cls = _css_class(ttype)
        pieces = value.split("\n")
        for i, piece in enumerate(pieces):
            if i:
                out.append("".join(current))
                current = []
            if piece:
                text = escape(piece, quote=False)
                current.append(f'<span class="{cls}">{text}</span>' if cls else text)
    out.append("".join(current))
    # Lexers may add or drop a trailing newline; the diff's line count is the truth.
    out = out[: len(texts)]
    out += [escape(t, quote=False) for t in texts[len(out) :]]
    return out


def highlight(files: list[DiffFile]) -> list[DiffFile]:
    """Fill each line's ``html``; hunk by hunk, with the file's lexer."""
    for f in files:
        lexer = lexer_for(f.path)
        run: list[Line] = []
        for line in [*f.lines, None]:
            if line is not None and line.kind in ("add", "del", "ctx"):
                run.append(line)
                continue
            if run:
                htmls = highlight_lines([x.text for x in run], lexer)
                for ln, html in zip(run, htmls, strict=True):
                    ln.html = html
                run = []
            if line is not None:
                line.html = escape(line.text, quote=False)
    return files


def css() -> str:
    """Pygments' default style, scoped to ``.hl``."""
    return HtmlFormatter(style="default").get_style_defs(CSS_SCOPE)
