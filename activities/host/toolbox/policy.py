"""The ``run`` tool's allow and deny lists: a guard rail for an honest model, not a
sandbox (its commands run in the task's sandbox).
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from activities.host.toolbox.outcome import clean, cut
from activities.host.toolbox.schemas import EXACT_LOG_BYTES
from loop.contracts import ToolPolicy

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_OPERATOR_CHARS = frozenset("();<>|&")
_SHELL_KEYWORDS = frozenset(
    {"!", "{", "}", "if", "then", "elif", "else", "fi", "do", "done", "while", "until"}
)


def command_words(command: str) -> list[str]:
    """The first word of every simple command in ``command``, as the run policy sees it.

    ``shlex`` in POSIX mode with shell punctuation split out, so that besides the
    first word, the words after ``;``, ``&&``, ``||``, ``|``, ``&``, ``(`` and an
    unquoted newline are checked too (``pytest; rm -rf x`` is not just ``pytest``).
    ``VAR=value`` prefixes and keywords such as ``if``/``then``/``do`` are skipped.
    ``#`` is not taken as a comment (``a#; rm x`` must not hide ``rm``).

    This is a guard rail for an honest model, not a sandbox: ``bash -c '...'``,
    ``env rm``, ``python -c 'os.system(...)'``, backticks and ``eval`` get round a
    deny list. An allow list is the stronger form; the gates judge the result either
    way. Raises ``ValueError`` when the quotes do not balance.
    """
    lexer = shlex.shlex(command.replace("\n", " ; "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    words: list[str] = []
    at_start, skip_target = True, False
    for token in lexer:
        if skip_target:
            skip_target = False
            continue
        if token and set(token) <= _OPERATOR_CHARS:
            if "(" not in token and ("<" in token or ">" in token):
                skip_target = True  # a redirection: the next word is its target
            else:
                at_start = True  # ; && || | & ( and <( >( start a new command
            continue
        if not at_start or _ASSIGNMENT.match(token) or token in _SHELL_KEYWORDS:
            continue
        words.append(token)
        at_start = False
    return words


def run_refusal(command: str, policy: ToolPolicy) -> str | None:
    """Why the policy refuses ``command`` (a message for the model), or None.

    Deny entries match a word or its basename (``/bin/rm`` is ``rm``); allow entries
    match the word exactly (a script called ``./pytest`` is not ``pytest``).
    """
    try:
        words = command_words(command)
    except ValueError as e:
        return f"cannot parse the command ({e}); check its quotes"
    if not words:
        return "the command is empty"
    for word in words:
        if word in policy.run_deny or os.path.basename(word) in policy.run_deny:
            return (
                f"`{word}` is refused by the task's tool policy (refused: "
                f"{', '.join(policy.run_deny)}); the command was not run"
            )
        if policy.run_allow is not None and word not in policy.run_allow:
            allowed = ", ".join(policy.run_allow) or "none"
            return (
                f"`{word}` is not among the commands this task allows ({allowed}); "
                "the command was not run"
            )
    return None


def _log_text(path: Path, limit: int) -> str:
    """The end of a command's log, cut to ``limit`` characters with the note."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return ""
    if size <= EXACT_LOG_BYTES:
        text = clean(path.read_bytes().decode("utf-8", "replace"))
        return cut(text, limit, keep="last")
    with path.open("rb") as f:
        f.seek(size - 4 * limit)
        text = clean(f.read().decode("utf-8", "replace"))[-limit:]
    return f"{text}\n[output cut: {size} bytes, showing the last {limit} characters]"
