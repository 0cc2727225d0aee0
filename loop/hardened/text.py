"""Text an agent, a repository or an issue wrote, made inert wherever a person reads it.

Such text can hold terminal escape sequences (move the cursor up, erase a line, print
a fake green verdict, write the reader's clipboard with OSC 52, make a link with
OSC 8), characters that are invisible or reorder what is shown (bidi overrides
U+202A-U+202E and U+2066-U+2069, zero-width spaces, line and paragraph separators),
markup of the medium it lands in (rich's ``[green]``, Slack's ``<!channel>``), and
line breaks other than ``\\n`` that a parser may split on. Each function here maps
every such character to something a person sees and nothing interprets:

- ``for_terminal``: C0 and C1 controls (but ``\\n`` and ``\\t``), DEL, and the invisible
  characters become visible stand-ins (``␛``, ``␌``, ``⟦U+202E⟧``), so no sequence can
  start; pass the result to rich as ``Text`` (or with ``markup=False``) so brackets
  stay brackets.
- ``visible_html``: the same, HTML-escaped, each stand-in marked (``<span class="cc">``)
  for the review page.
- ``for_slack``: ``&``, ``<`` and ``>`` escaped as Slack asks, so ``<!channel>`` and
  ``<url|text>`` stay text, after ``for_terminal``.
- ``for_github``: one line of GitHub markdown (a table cell): after ``for_terminal``, no
  HTML (``&<>`` as entities), no ``@mention`` or team ping (``@`` as the full-width
  ``＠``), and markdown's punctuation escaped, so no link, image, emphasis, code span or
  table cell can be made of it.
"""

from __future__ import annotations

from html import escape

INVISIBLE = frozenset(
    [
        0x00AD, 0x034F, 0x061C, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180E, 0x3164, 0xFEFF,
        0xFFA0, *range(0x200B, 0x2010), *range(0x2028, 0x202F), *range(0x2060, 0x2070),
        *range(0xFFF9, 0xFFFC), *range(0xE0000, 0xE0080),
    ]
)  # fmt: skip
"""Characters that print nothing, or change the order or the lines of what is shown."""


def _stand_in(ch: str) -> str | None:
    """What a person sees instead of ``ch`` (None: ``ch`` is shown as it is)."""
    code = ord(ch)
    if ch in "\n\t":
        return None
    if code < 0x20:
        return chr(0x2400 + code)  # the Control Pictures: ␀ … ␟ (␛ for ESC, ␌ for FF)
    if code == 0x7F:
        return "␡"
    if 0x80 <= code < 0xA0 or code in INVISIBLE:
        return f"⟦U+{code:04X}⟧"
    return None


def _needs_work(text: str) -> bool:
    return any(_stand_in(ch) is not None for ch in text)


def for_terminal(text: str) -> str:
    """``text`` with every control and invisible character shown as a stand-in."""
    if not _needs_work(text):
        return text
    return "".join(_stand_in(ch) or ch for ch in text)


def visible_html(text: str) -> str:
    """``text`` HTML-escaped (quotes too), its control and invisible characters as marked
    stand-ins."""
    if not _needs_work(text):
        return escape(text)
    out: list[str] = []
    for ch in text:
        shown = _stand_in(ch)
        if shown is None:
            out.append(escape(ch))
        else:
            out.append(f'<span class="cc" title="U+{ord(ch):04X}">{shown}</span>')
    return "".join(out)


def for_slack(text: str) -> str:
    """``text`` for a Slack message: stand-ins for controls, then ``&<>`` escaped."""
    return for_terminal(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_MARKDOWN = frozenset("\\`*_{}[]()#+-.!|~:")
MAX_GITHUB_CHARS = 300


def for_github(text: str, limit: int = MAX_GITHUB_CHARS) -> str:
    """``text`` as one inert line of GitHub markdown, at most ``limit`` characters of it."""
    line = " ".join(for_terminal(text).split())
    if len(line) > limit:
        line = line[: limit - 1] + "…"
    out: list[str] = []
    for ch in line:
        if ch == "&":
            out.append("&amp;")
        elif ch == "<":
            out.append("&lt;")
        elif ch == ">":
            out.append("&gt;")
        elif ch == "@":
            out.append("＠")
        elif ch in _MARKDOWN:
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)
