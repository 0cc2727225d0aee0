"""A ``git diff`` as files of highlighted lines, exactly as git has them.

The file list and each file's counts come from git's structured output (``-z
--numstat`` and ``--raw``), each file's lines from its own patch, parsed by the counts
in its hunk headers and split on ``\n`` only; a patch whose lines do not add up to
git's counts is marked, never shown as something else. Every control and invisible
character is shown as a marked stand-in (``loop.hardened.text``), in code, file names
and hunk headers alike.

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

from loop.hardened.text import visible_html

CSS_SCOPE = ".hl"
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


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
    unfaithful: str = ""
    """Why the page cannot show this file as git has it (the patch did not add up to git's
    own counts, or was cut): the reader is told to look at git instead."""
    shown: bool = True
    """False for a file listed with git's counts only (past the page's limits)."""

    @property
    def anchor(self) -> str:
        return "file-" + re.sub(r"[^A-Za-z0-9_-]", "-", self.path)


def split_z(out: str) -> list[str]:
    return out.split("\0")


def numstat(out: str) -> list[tuple[int | None, int | None, str, str]]:
    """``git diff -z --numstat`` as (added, deleted, old path, new path); None counts for a
    binary file. A rename is ``A<TAB>D<TAB>`` then its two paths, each ``\0``-ended."""
    fields = split_z(out)
    found: list[tuple[int | None, int | None, str, str]] = []
    i = 0
    while i < len(fields) and fields[i]:
        added, deleted, path = fields[i].split("\t", 2)
        i += 1
        if path:
            old = new = path
        else:
            old, new = fields[i], fields[i + 1]
            i += 2
        count = [None if n == "-" else int(n) for n in (added, deleted)]
        found.append((count[0], count[1], old, new))
    return found


_STATUS = {"A": "added", "D": "deleted", "M": "modified", "R": "renamed", "C": "copied",
           "T": "type changed"}  # fmt: skip


def raw(out: str) -> dict[str, tuple[str, str]]:
    """``git diff -z --raw``: new path -> (status, old path)."""
    fields = split_z(out)
    found: dict[str, tuple[str, str]] = {}
    i = 0
    while i < len(fields) and fields[i].startswith(":"):
        meta = fields[i].split()
        letter = meta[4][:1] if len(meta) > 4 else "M"
        old = fields[i + 1]
        if letter in "RC":
            new, i = fields[i + 2], i + 3
        else:
            new, i = old, i + 2
        status = _STATUS.get(letter, "modified")
        if status == "modified" and len(meta) > 1 and meta[0][1:] != meta[1]:
            status = "mode"
        found[new] = (status, old)
    return found


def parse_patch(patch: str, f: DiffFile) -> DiffFile:
    """One file's ``git diff`` into ``f.lines``, by the counts of each hunk's header.

    Lines are split on ``\n`` only (never on ``\r``, form feeds or Unicode separators,
    which a file may hold), and a hunk takes exactly the lines its header counts: no
    content can end a hunk early or pose as the next file. A patch that does not add up
    marks the file ``unfaithful``, never silently shown as something else."""
    lines = patch.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    i = 0
    while i < len(lines) and not lines[i].startswith("@@ "):
        if lines[i].startswith(("Binary files ", "GIT binary patch")):
            f.status = "binary"
        i += 1
    while i < len(lines):
        m = _HUNK.match(lines[i])
        if m is None:
            f.unfaithful = f"unexpected line after a hunk: {lines[i][:80]!r}"
            break
        old, old_left = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
        new, new_left = int(m.group(3)), int(m.group(4) if m.group(4) is not None else 1)
        f.lines.append(Line("hunk", None, None, lines[i]))
        i += 1
        while (old_left > 0 or new_left > 0) and i < len(lines):
            text = lines[i]
            tag, body = text[:1], text[1:]
            if tag == "+" and new_left > 0:
                f.lines.append(Line("add", None, new, body))
                f.additions += 1
                new, new_left = new + 1, new_left - 1
            elif tag == "-" and old_left > 0:
                f.lines.append(Line("del", old, None, body))
                f.deletions += 1
                old, old_left = old + 1, old_left - 1
            elif tag == " " and old_left > 0 and new_left > 0:
                f.lines.append(Line("ctx", old, new, body))
                old, new = old + 1, new + 1
                old_left, new_left = old_left - 1, new_left - 1
            elif tag == "\\":
                f.lines.append(Line("note", None, None, text))
            else:
                f.unfaithful = f"a line that does not fit its hunk: {text[:80]!r}"
                return f
            i += 1
        if old_left or new_left:
            f.unfaithful = "the patch ended inside a hunk"
            return f
        while i < len(lines) and lines[i].startswith("\\"):
            f.lines.append(Line("note", None, None, lines[i]))
            i += 1
    return f


def lexer_for(path: str) -> Lexer:
    try:
        return get_lexer_for_filename(path, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=False)


def _css_class(ttype: _TokenType) -> str:
    while ttype not in STANDARD_TYPES:
        ttype = ttype.parent
    return STANDARD_TYPES[ttype]


def _placeholders(texts: list[str]) -> tuple[list[str], dict[str, str]]:
    """The lines with each control or invisible character replaced by a one-character
    placeholder the lexer takes as an ordinary character (a private-use code point the
    lines do not hold), and each placeholder's marked stand-in."""
    joined = "".join(texts)
    special = sorted({ch for ch in joined if visible_html(ch) != escape(ch)})
    if not special:
        return texts, {}
    used = set(joined)
    free = (chr(c) for c in range(0xF0000, 0x10FFFE) if chr(c) not in used)
    mapping = dict(zip(special, free, strict=False))
    swapped = ["".join(mapping.get(ch, ch) for ch in t) for t in texts]
    return swapped, {held: visible_html(ch) for ch, held in mapping.items()}


def highlight_lines(texts: list[str], lexer: Lexer) -> list[str]:
    """Each line's HTML, from lexing the lines as one text.

    Control and invisible characters are held out of the lexer's sight first (Pygments
    turns ``\r`` into a new line, and splits a stand-in of several characters into
    tokens), then shown as marked stand-ins (``loop.hardened.text``), so the reader sees
    every one of them and every line stays the line it is."""
    shown, back = _placeholders(texts)
    out: list[str] = []
    current: list[str] = []
    for ttype, value in lexer.get_tokens("\n".join(shown)):
        cls = _css_class(ttype)
        pieces = value.split("\n")
        for i, piece in enumerate(pieces):
            if i:
                out.append("".join(current))
                current = []
            if piece:
                text = escape(piece, quote=False)
                for held, html in back.items():
                    text = text.replace(held, html)
                current.append(f'<span class="{cls}">{text}</span>' if cls else text)
    out.append("".join(current))
    if len(out) < len(shown) or (len(out) > len(shown) and any(out[len(shown) :])):
        # The lexer did not give back one line per line: show them unlexed, never shifted.
        return [visible_html(t) for t in texts]
    return out[: len(shown)]


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
                line.html = visible_html(line.text)
    return files


def css() -> str:
    """Pygments' default style, scoped to ``.hl``."""
    return HtmlFormatter(style="default").get_style_defs(CSS_SCOPE)
