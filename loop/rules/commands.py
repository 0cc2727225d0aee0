"""Which programs a command line runs: what ``loop start`` checks exists, and what a
sandbox must show and a pre-flight must find. Best effort on shell lines; other
interpreters' ``-c`` code is code, never parsed."""

from __future__ import annotations

import os
import re
import shlex

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


_SEPARATORS = frozenset({";", "&", "&&", "|", "||", "(", ")", ";;", "|&", "\n"})
_KEYWORDS = frozenset(
    {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "{", "}", "!", "time"}
)
_LOOPS = frozenset({"for", "case", "select"})
"""Their next words are names and values, not programs, up to the next separator."""
_WRAPPERS = frozenset({"exec", "command", "env", "nice", "nohup"})
_BUILTINS = frozenset(
    {
        "cd", "echo", "printf", "export", "set", "unset", "test", "[", "[[", "true", "false",
        "exit", "return", "read", "shift", "source", ".", "eval", "type", "wait", "trap",
        "umask", "ulimit", "local", "alias", ":", "break", "continue", "pwd", "esac",
    }
)  # fmt: skip


def programs(argv: list[str]) -> list[str]:
    """The programs a command runs: ``argv[0]``, and for a shell's ``-c LINE`` the word in
    command position of each of its simple commands (best effort: words with expansions,
    builtins and keywords are left out)."""
    found = [argv[0]] if argv else []
    if not (len(argv) >= 3 and argv[1] == "-c" and os.path.basename(argv[0]) in SHELLS):
        return found
    # A newline separates commands as ';' does.
    lexer = shlex.shlex(without_heredocs(argv[2]), posix=True, punctuation_chars="();<>|&\n")
    lexer.whitespace_split = True
    lexer.whitespace = " \t\r"
    try:
        tokens = list(lexer)
    except ValueError:
        return found
    at_start, skipping, arithmetic = True, False, False
    for token in tokens:
        if arithmetic:  # $(( … )) and (( … )) hold numbers and names, not commands
            arithmetic = not token.startswith("))")
        elif token.startswith("(("):
            arithmetic = True
        elif token in _SEPARATORS or set(token) <= set(";&|()\n"):
            at_start, skipping = True, False
        elif skipping:
            continue
        elif not at_start:
            continue
        elif token in _LOOPS:
            skipping = True
        elif token in _KEYWORDS or token in _WRAPPERS or ASSIGNMENT.match(token):
            continue
        else:
            at_start = False
            if token not in _BUILTINS and not any(c in token for c in "$`*?[]{}<>~"):
                found.append(token)
    return list(dict.fromkeys(found))


_HEREDOC = re.compile(r"(?<!<)<<(-?)[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")


def without_heredocs(line: str) -> str:
    """A shell line without its here-documents' bodies: their lines are data (a script fed
    to ``python -``, a file's content), never commands."""
    kept: list[str] = []
    pending: list[tuple[str, bool]] = []
    for one in line.split("\n"):
        if pending:
            delimiter, tabs = pending[0]
            if (one.lstrip("\t") if tabs else one) == delimiter:
                pending.pop(0)
            continue
        kept.append(one)
        pending += [(m.group(3), m.group(1) == "-") for m in _HEREDOC.finditer(one)]
    return "\n".join(kept)
