"""The openai backend's tools, and ``tool_step``: one tool call of the model loop.

The model sees seven tools (``TOOL_SCHEMAS``): ``list_files``, ``read_file``,
``search``, ``write_file``, ``edit_file``, ``run`` and ``finish``. Each call is
one ``tool_step`` activity, so that a crash between two calls loses nothing and
a call that completed is never applied again.

What every call ends as, because the workflow needs to know which way to go:

- a result the model reads (``ok=True``), or a failure it can act on
  (``ok=False``, text starting with ``error:``): bad JSON arguments, an unknown
  tool, a missing argument, a file that is not there, an ambiguous edit, a
  command that exits non-zero or is refused by the task's ``run`` policy. The
  loop goes on; the model tries something else.
- a policy violation (``policy_violation`` set): a path outside the worktree,
  into ``.git``, or a write to a protected path. The workflow ends the attempt
  ``BLOCKED``, as DESIGN.md says; the model is not asked to try again.
- ``finish(answer)``: the attempt's claim, recorded and then checked by gates.
- an exception, only for Loopwork's own trouble (the step's model artifact is
  missing, the worktree is gone: permanent; a full disk while writing the
  artifact: retried by Temporal).

History stays small: the text the model reads goes to the tool artifact
``step-NNNN.tool-I.json`` next to the model artifacts in the attempt folder; the
activity returns only its path, its length and the outcome flags.

Idempotency: when the tool artifact exists, ``tool_step`` returns the stored
result and runs nothing. For the window between applying a change and writing
the artifact (a worker killed in between), a pending note is written first:
a retried ``edit_file`` whose edit already landed reports it instead of
editing twice, and a retried ``run`` is not started again (it may have run in
part or in whole; the model is told so and can check). ``write_file`` needs
no note (writing the same content twice is the same as once); the read-only
tools simply run again.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import shlex
import stat
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import pathspec
from temporalio import activity

from activities.gates import gate_extra_env
from activities.host import sandbox
from activities.host.files import write_atomic
from activities.host.git import GitError, git
from activities.host.proc import heartbeating, kill_stale, run_process
from activities.make import agent_home
from loop.contracts import TOOL_STEP, SandboxPolicy, ToolPolicy, ToolStepInput, ToolStepResult
from loop.errors import permanent
from loop.logs import log_for
from loop.settings import Settings

MAX_LIST_FILES = 1_000
"""Paths ``list_files`` names before it says how many more there are."""
MAX_SEARCH_MATCHES = 200
"""Matching lines ``search`` shows; more means the pattern or the path is too broad."""
MAX_MATCH_LINE_CHARS = 300
"""Characters of one matching line shown by ``search``."""
MAX_FILE_BYTES = 10 * 1024 * 1024
"""Bigger files are not read by ``read_file``/``edit_file`` and skipped by ``search``."""
SEARCH_TIMEOUT_S = 30.0
"""A regex that backtracks without end must not hold the worker (search runs in a child)."""
BINARY_SNIFF_BYTES = 8_192
"""A NUL byte in this many leading bytes marks a file as binary (as git and grep do)."""
EXACT_LOG_BYTES = 8 * 1024 * 1024
"""Up to this size a ``run`` log is read whole, so the cut note counts characters exactly."""
ERROR_CHARS = 500
"""Characters of an error message kept in ``ToolStepResult.error`` (it goes into history)."""
HEARTBEAT_EVERY_S = 1.0
HIDDEN_ENV_PREFIXES = ("LOOP_", "OPENAI_", "TEMPORAL_")  # the loop's own settings and keys
"""Variables a ``run`` command does not see: Loopwork's own, which are not the agent's."""


# --------------------------------------------------------------------------- schemas


def _function(name: str, description: str, properties: dict[str, Any], required: list[str]):
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


_PATH_NOTE = (
    "Paths are relative to the repository root (the worktree), like `src/app.py`; "
    "absolute paths, `..`, `.git` and links that lead outside the worktree are refused "
    "and end the attempt."
)

TOOL_SCHEMAS: list[dict[str, Any]] = [
    _function(
        "list_files",
        "List the files under a directory of the repository, tracked and untracked "
        "(files ignored by .gitignore are left out), one path per line, relative to the "
        f"repository root. Shows at most {MAX_LIST_FILES} paths; list a subdirectory to see "
        f"more. {_PATH_NOTE}",
        {
            "path": {
                "type": "string",
                "description": "Directory to list, relative to the repository root. Default: `.`",
            }
        },
        [],
    ),
    _function(
        "read_file",
        "Read a text file. Each line is shown as `<line number> | <text>`; the number and "
        "the ` | ` are not part of the file (leave them out when you copy text into "
        "edit_file). Lines are numbered from 1; give start_line and end_line (inclusive) to "
        f"read part of a long file. {_PATH_NOTE}",
        {
            "path": {"type": "string", "description": "File to read."},
            "start_line": {
                "type": "integer",
                "description": "First line to show (1-based). Default: 1.",
            },
            "end_line": {
                "type": "integer",
                "description": "Last line to show, inclusive. Default: the end of the file.",
            },
        },
        ["path"],
    ),
    _function(
        "search",
        "Search the text files under a path for a Python regular expression, line by line "
        "(case-sensitive; start the pattern with (?i) to ignore case). Results are "
        f"`path:line: text`, at most {MAX_SEARCH_MATCHES}; files ignored by .gitignore, "
        f"binary files and files over {MAX_FILE_BYTES // (1024 * 1024)} MB are skipped. "
        f"{_PATH_NOTE}",
        {
            "pattern": {"type": "string", "description": "Python regular expression."},
            "path": {
                "type": "string",
                "description": "Directory or file to search. Default: `.` (the whole repository).",
            },
        },
        ["pattern"],
    ),
    _function(
        "write_file",
        "Create a file, or replace the whole content of an existing one; missing parent "
        "directories are created. For a small change to an existing file prefer edit_file. "
        "Writing a path the task protects (for example the tests that check your work) is "
        f"refused and ends the attempt. {_PATH_NOTE}",
        {
            "path": {"type": "string", "description": "File to write."},
            "content": {"type": "string", "description": "The complete new content."},
        },
        ["path", "content"],
    ),
    _function(
        "edit_file",
        "Replace one exact piece of text in a file. `old` must appear exactly once in the "
        "file, character for character (spaces, indentation and line breaks included; copy "
        "it from read_file without the line numbers). If it is not found, or found more than "
        "once, nothing changes and you are told which: then read the file again, or include "
        "more surrounding lines so that `old` is unique. Protected paths are refused as for "
        f"write_file. {_PATH_NOTE}",
        {
            "path": {"type": "string", "description": "File to edit."},
            "old": {"type": "string", "description": "The exact text to replace (not empty)."},
            "new": {"type": "string", "description": "The text to put in its place."},
        },
        ["path", "old", "new"],
    ),
    _function(
        "run",
        "Run a shell command (bash -c) in the repository root and get its exit code and "
        "output (stdout and stderr together). Use it to run tests, linters or the program. "
        "There is no input (stdin is empty) and no terminal; each call starts in the "
        "repository root, with a fresh shell. The task may allow only some commands or "
        "refuse some; a refused command is not run and you are told why. A command that runs "
        "too long is stopped.",
        {"command": {"type": "string", "description": "The command line, e.g. `pytest -q`."}},
        ["command"],
    ),
    _function(
        "finish",
        "End your work on this attempt and give your final answer: what you changed and the "
        "evidence that it works (for example the test command you ran and its result). Call "
        "it once, when you are done or cannot go further. Your answer is recorded; the task's "
        "checks then run on the repository as you left it.",
        {"answer": {"type": "string", "description": "Your final answer."}},
        ["answer"],
    ),
]

_SCHEMA_BY_NAME = {s["function"]["name"]: s["function"] for s in TOOL_SCHEMAS}


# --------------------------------------------------------------------------- outcomes


class PolicyViolation(Exception):
    """A call that tried to leave the worktree, enter ``.git`` or write a protected path.

    The message is one line naming the path; the workflow ends the attempt BLOCKED.
    """


class ToolError(Exception):
    """A failure the model can act on (missing file, ambiguous edit, refused command).

    The message is shown to the model after ``error: ``; the loop goes on.
    """


@dataclass
class ToolOutcome:
    """What one tool call produced; ``text`` is exactly what the model will read."""

    text: str
    ok: bool = True
    error: str = ""
    """The failure in one line, starting with ``error:`` (empty when ``ok``)."""
    policy_violation: str = ""
    finished: bool = False
    answer: str = ""

    @classmethod
    def failure(cls, message: str, detail: str = "") -> ToolOutcome:
        error = message if message.startswith("error:") else f"error: {message}"
        text = f"{error}\n{detail}" if detail else error
        return cls(text=text, ok=False, error=error)


def cut(text: str, limit: int, *, keep: str = "first", hint: str = "") -> str:
    """``text`` if it fits in ``limit`` characters; else its first (or last) ``limit``
    characters followed by a note that says how much there was, so the model knows it
    has not seen everything and how to see more."""
    if len(text) <= limit:
        return text
    shown = text[:limit] if keep == "first" else text[-limit:]
    more = f"; {hint}" if hint else ""
    return f"{shown}\n[output cut: {len(text)} characters, showing the {keep} {limit}{more}]"


def _clean(text: str) -> str:
    """Text safe to send as JSON: lone surrogates (undecodable file names) and NULs go."""
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "")


# --------------------------------------------------------------------------- paths


def _real(path: Path | str) -> Path:
    return Path(os.path.realpath(path))


def _inside(path: Path, top: Path) -> bool:
    return path == top or path.is_relative_to(top)


def _has_git_dir(parts: tuple[str, ...]) -> bool:
    # Case-insensitive: on a case-insensitive filesystem .GIT is the same folder.
    return any(p.lower() == ".git" for p in parts)


def resolve_path(root: Path, rel: str, *, write: bool, protected: list[str]) -> Path:
    """The real path of ``rel`` inside the worktree ``root``, or ``PolicyViolation``.

    Refused, each with a one-line reason naming the path: absolute paths
    (``/proc`` named as such), any ``..`` component, anything under a ``.git``
    folder at any depth (the worktree's git metadata, or a nested repository's),
    and a path whose symlinks resolve outside the worktree or into ``.git``. For
    writes, also a path matching one of the ``protected`` globs (gitignore
    semantics, as the ``diff_scope`` gate reads them), checked on the path as given
    and on the path its symlinks lead to, so a link cannot smuggle a write onto a
    protected file. Reading a protected file is allowed: the model may look at the
    tests it must pass.

    The answer is true at the moment of the check only. The file tools therefore
    do not trust it later: they walk from the root one folder at a time with
    ``O_NOFOLLOW`` (see ``_parent_dir``), so a link swapped in after this check is
    not followed. Limits that remain: the worktree root itself is trusted (Loopwork
    made it); a hard link inside the worktree to a file outside is not a symlink
    and can be read (writes replace the file by rename, so they never write through
    one); and none of this confines the ``run`` tool: its commands are confined by
    the task's sandbox (``activities.host.sandbox``: in strict mode a read-only host, the
    worktree writable, protected files read-only). What ``run`` changes in the
    repository is judged afterwards by the gates (``diff_scope`` protects paths the
    same way), and changes outside the worktree by the make step's outside-write check.
    """
    top = _real(root)
    if "\x00" in rel:
        raise ToolError(f"path {rel!r} contains a NUL character")
    if rel.startswith("/"):
        if rel == "/proc" or rel.startswith("/proc/"):
            raise PolicyViolation(f"path {rel} points into /proc; tools stay in the worktree")
        raise PolicyViolation(f"path {rel} is absolute; tools take paths relative to the worktree")
    parts = PurePosixPath(rel).parts
    if ".." in parts:
        raise PolicyViolation(f"path {rel} contains '..'; tools stay in the worktree")
    if _has_git_dir(parts):
        raise PolicyViolation(f"path {rel} is inside .git; git metadata is off limits")
    real = _real(top.joinpath(*parts))
    if not _inside(real, top):
        where = "into /proc" if _inside(real, Path("/proc")) else f"to {real}"
        raise PolicyViolation(
            f"path {rel} leads {where} through a symbolic link, outside the worktree"
        )
    inside = real.relative_to(top).parts
    if _has_git_dir(inside):
        raise PolicyViolation(f"path {rel} leads into .git through a symbolic link")
    if write and protected:
        spec = pathspec.GitIgnoreSpec.from_lines(protected)
        for candidate in dict.fromkeys(("/".join(parts), "/".join(inside))):
            if not candidate:
                continue
            check = spec.check_file(candidate)
            if check.include:
                glob = protected[check.index] if check.index is not None else "a protected glob"
                shown = rel if candidate == "/".join(parts) else f"{rel} (that is {candidate})"
                raise PolicyViolation(
                    f"path {shown} is protected ({glob}); it may be read, not written"
                )
    return real


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _fd_path(fd: int, fallback: Path) -> Path:
    """Where an open folder really is now (Linux: /proc/self/fd; else its realpath)."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return _real(fallback)


@contextlib.contextmanager
def _parent_dir(top: Path, path: Path, rel: str, *, create: bool) -> Iterator[tuple[int, str]]:
    """Open the folder of ``path`` by walking down from ``top``, never following a link.

    Each step is ``openat(..., O_NOFOLLOW | O_DIRECTORY)`` relative to the folder
    before it, so a component that became a symlink after ``resolve_path`` makes
    the call fail (ELOOP/ENOTDIR) instead of leading elsewhere. Before the folder is
    handed out, its real location is checked once more to be inside the worktree
    (a folder moved out from under us). Yields the folder's fd and the file name.
    """
    parts = path.relative_to(top).parts
    if not parts:
        raise ToolError(f"{rel or '.'} is the repository root, a directory; use list_files")
    fd = os.open(top, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        where = _fd_path(fd, path.parent)
        if not _inside(where, top):
            raise PolicyViolation(f"path {rel}: its folder is now {where}, outside the worktree")
        yield fd, parts[-1]
    finally:
        os.close(fd)


def _os_error(e: OSError, rel: str) -> ToolError:
    """An OSError on a model-given path, in words the model can act on."""
    if isinstance(e, FileNotFoundError):
        return ToolError(f"no such file: {rel}")
    if isinstance(e, NotADirectoryError):
        return ToolError(f"{rel}: a part of this path is a file, not a directory")
    if isinstance(e, IsADirectoryError):
        return ToolError(f"{rel} is a directory")
    if e.errno == errno.ELOOP:
        return ToolError(f"{rel} is a symbolic link loop, or changed while in use; not followed")
    return ToolError(f"{rel}: {e.strerror or e}")


def _read_bytes(top: Path, path: Path, rel: str) -> bytes:
    """A regular file's bytes (at most ``MAX_FILE_BYTES``), opened without following links."""
    try:
        with _parent_dir(top, path, rel, create=False) as (dfd, name):
            # O_NONBLOCK: opening a FIFO someone left in the tree must not hang the worker.
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            fd = os.open(name, flags, dir_fd=dfd)
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if stat.S_ISDIR(st.st_mode):
                    raise ToolError(f"{rel} is a directory; use list_files")
                if not stat.S_ISREG(st.st_mode):
                    raise ToolError(f"{rel} is not a regular file")
                if st.st_size > MAX_FILE_BYTES:
                    raise ToolError(
                        f"{rel} has {st.st_size} bytes, more than the {MAX_FILE_BYTES} this "
                        "tool reads; use search, or run a command such as `head`"
                    )
                return f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise _os_error(e, rel) from None


def _write_bytes(top: Path, path: Path, rel: str, data: bytes) -> bool:
    """Write ``data`` to ``path`` atomically; True when the file is new.

    The content goes to a temporary file created with ``O_CREAT | O_EXCL |
    O_NOFOLLOW`` in the already-opened folder, then renamed over the name:
    rename replaces a symlink rather than following it, a crash leaves the old
    content or the new one, and the file's permission bits are kept.
    """
    try:
        with _parent_dir(top, path, rel, create=True) as (dfd, name):
            try:
                old = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                old = None
            if old is not None and stat.S_ISDIR(old.st_mode):
                raise ToolError(f"{rel} is a directory")
            if old is not None and stat.S_ISLNK(old.st_mode):
                raise ToolError(f"{rel} became a symbolic link while in use; not written")
            tmp = f".{name[:200]}.loop-{secrets.token_hex(4)}.tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(tmp, flags, 0o666, dir_fd=dfd)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    if old is not None:
                        os.fchmod(f.fileno(), stat.S_IMODE(old.st_mode))
                    os.fsync(f.fileno())
                where = _fd_path(dfd, path.parent)
                if not _inside(where, top):
                    raise PolicyViolation(
                        f"path {rel}: its folder is now {where}, outside the worktree"
                    )
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                raise
            return old is None
    except OSError as e:
        raise _os_error(e, rel) from None


def _encode(text: str) -> bytes:
    """UTF-8; bytes that came in undecodable (surrogateescape) go back out unchanged."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


def _lines(text: str) -> list[str]:
    """Lines as editors and grep count them: split on \\n, no empty last line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _is_binary(data: bytes) -> bool:
    return b"\x00" in data[:BINARY_SNIFF_BYTES]


# --------------------------------------------------------------------------- arguments

_JSON_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,)}


def parse_arguments(name: str, arguments: str | dict[str, Any] | None) -> dict[str, Any]:
    """The call's arguments, checked against the tool's own schema in TOOL_SCHEMAS.

    ``null`` for an optional argument counts as absent (some models send every
    key); an integer given as a string of digits is accepted (so do others).
    Unknown keys are refused, so a misspelt ``start_line`` does not silently mean
    "from the top".
    """
    schema = _SCHEMA_BY_NAME[name]["parameters"]
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        args: Any = {}
    elif isinstance(arguments, dict):
        args = arguments
    else:
        try:
            args = json.loads(arguments)
        except json.JSONDecodeError as e:
            raise ToolError(
                f"the arguments of {name} are not valid JSON ({e.msg} at character {e.pos}); "
                "send one JSON object"
            ) from None
    if not isinstance(args, dict):
        raise ToolError(f"the arguments of {name} must be a JSON object, not {type(args).__name__}")
    props: dict[str, Any] = schema["properties"]
    expected = ", ".join(f"{k} ({v['type']})" for k, v in props.items()) or "none"
    unknown = [k for k in args if k not in props]
    if unknown:
        raise ToolError(
            f"unknown argument(s) for {name}: {', '.join(unknown)}; expected: {expected}"
        )
    out: dict[str, Any] = {}
    for key, prop in props.items():
        value = args.get(key)
        if value is None:
            if key in schema["required"]:
                raise ToolError(f"{name} needs the argument {key!r}; expected: {expected}")
            continue
        kind = prop["type"]
        if kind == "integer" and isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, _JSON_TYPES[kind]):
            raise ToolError(
                f"argument {key!r} of {name} must be a {kind}, not {type(value).__name__}"
            )
        out[key] = value
    return out


# --------------------------------------------------------------------------- run policy

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
        text = _clean(path.read_bytes().decode("utf-8", "replace"))
        return cut(text, limit, keep="last")
    with path.open("rb") as f:
        f.seek(size - 4 * limit)
        text = _clean(f.read().decode("utf-8", "replace"))[-limit:]
    return f"{text}\n[output cut: {size} bytes, showing the last {limit} characters]"


# --------------------------------------------------------------------------- the tools


@dataclass
class _Call:
    top: Path
    policy: ToolPolicy
    protected: list[str]
    log_dir: Path
    log_name: str
    journal: Path | None
    sandbox: SandboxPolicy = field(default_factory=SandboxPolicy)
    task_id: str = "tool"
    home: Path | None = None
    """LOOP_HOME (leases, hidden from the command); None: the log folder stands in."""
    agent_home: Path | None = None
    allow_hosts: tuple[str, ...] = ()

    @property
    def limit(self) -> int:
        return self.policy.output_limit

    def path(self, rel: str, *, write: bool = False) -> Path:
        return resolve_path(self.top, rel, write=write, protected=self.protected)

    def shown(self, path: Path) -> str:
        return path.relative_to(self.top).as_posix() or "."


async def _git_files(call: _Call, path: Path) -> list[str]:
    """Tracked and untracked, not ignored, files under ``path`` (root-relative, sorted)."""
    rel = call.shown(path)
    try:
        out = await git(
            [
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
                "--",
                f":(literal){rel}",
            ],
            call.top,
        )
    except GitError as e:
        raise ToolError(f"cannot list files: {e.message or e}") from None
    names = dict.fromkeys(n for n in out.split("\0") if n)
    # A tracked file deleted in the worktree is still in the index; show what is there.
    return sorted(n for n in names if os.path.lexists(call.top / n))


async def _list_files(call: _Call, args: dict[str, Any]) -> ToolOutcome:
    rel = args.get("path", ".")
    path = call.path(rel)
    if not path.exists():
        raise ToolError(f"no such directory: {rel}")
    if not path.is_dir():
        raise ToolError(f"{rel} is a file, not a directory; use read_file")
    files = await _git_files(call, path)
    where = call.shown(path)
    if not files:
        return ToolOutcome(text=f"no files under {where}")
    head = f"{len(files)} file(s) under {where}"
    body = "\n".join(files[:MAX_LIST_FILES])
    more = len(files) - MAX_LIST_FILES
    if more > 0:
        body += f"\n[{more} more not shown; list a subdirectory]"
    return ToolOutcome(text=cut(_clean(f"{head}:\n{body}"), call.limit, hint="list a subdirectory"))


async def _read_file(call: _Call, args: dict[str, Any]) -> ToolOutcome:
    rel = args["path"]
    path = call.path(rel)
    data = await asyncio.to_thread(_read_bytes, call.top, path, rel)
    if _is_binary(data):
        raise ToolError(f"{rel} looks binary ({len(data)} bytes); not shown")
    lines = _lines(data.decode("utf-8", "replace"))
    total = len(lines)
    start, end = args.get("start_line", 1), args.get("end_line")
    if start < 1 or (end is not None and end < 1):
        raise ToolError("start_line and end_line are 1-based: use numbers from 1")
    if end is not None and start > end:
        raise ToolError(f"start_line ({start}) is after end_line ({end})")
    if total == 0:
        return ToolOutcome(text=f"{rel} is empty")
    if start > total:
        raise ToolError(f"{rel} has {total} line(s); start_line {start} is past the end")
    end = total if end is None else min(end, total)
    width = len(str(end))
    numbered = "\n".join(
        f"{n:>{width}} | {lines[n - 1].removesuffix(chr(13))}" for n in range(start, end + 1)
    )
    head = f"{rel} (lines {start}-{end} of {total})"
    text = _clean(f"{head}\n{numbered}")
    return ToolOutcome(text=cut(text, call.limit, hint="read further with start_line"))


_SEARCH_SCRIPT = r"""
import json, os, re, signal, stat, sys
req = json.load(open(sys.argv[1], encoding="utf-8"))
signal.alarm(req["timeout"])  # ends the child even if the worker that started it is gone
rx = re.compile(req["pattern"])
found = 0
for rel in req["files"]:
    try:
        fd = os.open(os.path.join(req["root"], rel), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        continue
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > req["max_bytes"]:
            continue
        data = f.read()
    if b"\0" in data[: req["sniff"]]:
        continue
    for n, line in enumerate(data.decode("utf-8", "replace").split("\n"), 1):
        if rx.search(line):
            print(json.dumps([rel, n, line.rstrip("\r")[: req["max_line"]]]))
            found += 1
            if found > req["max_matches"]:
                sys.exit(0)
"""
"""Runs in a child Python (``-I``, stdlib only): a pathological regex is stopped by
``run_process``'s timeout and group kill instead of pinning a worker thread forever."""


async def _search(call: _Call, args: dict[str, Any]) -> ToolOutcome:
    pattern, rel = args["pattern"], args.get("path", ".")
    try:
        re.compile(pattern)
    except re.error as e:
        raise ToolError(f"invalid regular expression {pattern!r}: {e}") from None
    path = call.path(rel)
    if path.is_dir():
        files = await _git_files(call, path)
    elif path.is_file():
        files = [call.shown(path)]
    else:
        raise ToolError(f"no such file or directory: {rel}")
    request = {
        "root": str(call.top),
        "pattern": pattern,
        "files": files,
        "max_matches": MAX_SEARCH_MATCHES,
        "max_bytes": MAX_FILE_BYTES,
        "max_line": MAX_MATCH_LINE_CHARS,
        "sniff": BINARY_SNIFF_BYTES,
        "timeout": int(SEARCH_TIMEOUT_S) + 5,
    }
    call.log_dir.mkdir(parents=True, exist_ok=True)
    req_file = call.log_dir / f"{call.log_name}.search.json"
    req_file.write_text(json.dumps(request))
    pid_file = call.log_dir / f"{call.log_name}.search.pid"
    kill_stale(pid_file)
    proc = await run_process(
        [sys.executable, "-I", "-c", _SEARCH_SCRIPT, str(req_file)],
        cwd=call.top,
        env=dict(os.environ),
        limit_s=SEARCH_TIMEOUT_S,
        log_path=call.log_dir / f"{call.log_name}.search.log",
        pid_file=pid_file,
    )
    if proc.timed_out:
        raise ToolError(
            f"search timed out after {SEARCH_TIMEOUT_S:.0f} s; simplify the pattern "
            "(nested repeats backtrack) or narrow the path"
        )
    if proc.exit_code != 0:
        raise ToolError(f"search failed (exit code {proc.exit_code}): {proc.output_tail[-300:]}")
    matches: list[str] = []
    for line in Path(proc.log_path).read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError, TypeError):
            file, n, text = json.loads(line)
            matches.append(f"{file}:{n}: {text}")
    where = call.shown(path)
    if not matches:
        return ToolOutcome(text=f"no match for {pattern!r} in {len(files)} file(s) under {where}")
    body = "\n".join(matches[:MAX_SEARCH_MATCHES])
    if len(matches) > MAX_SEARCH_MATCHES:
        body += f"\n[more than {MAX_SEARCH_MATCHES} matches; narrow the pattern or the path]"
    return ToolOutcome(text=cut(_clean(body), call.limit, hint="narrow the pattern or the path"))


async def _write_file(call: _Call, args: dict[str, Any]) -> ToolOutcome:
    rel, content = args["path"], args["content"]
    path = call.path(rel, write=True)
    created = await asyncio.to_thread(_write_bytes, call.top, path, rel, _encode(content))
    verb = "created" if created else "overwrote"
    return ToolOutcome(
        text=f"{verb} {rel} ({len(content)} characters, {len(_lines(content))} line(s))"
    )


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def _edit_file(call: _Call, args: dict[str, Any]) -> ToolOutcome:
    rel, old, new = args["path"], args["old"], args["new"]
    path = call.path(rel, write=True)
    if not old:
        raise ToolError("`old` is empty; give the exact text to replace, or use write_file")
    data = await asyncio.to_thread(_read_bytes, call.top, path, rel)
    note = _read_journal(call.journal)
    if note.get("path") == str(path) and note.get("after") == _sha(data):
        return ToolOutcome(text=f"edited {rel} (the edit had already been applied)")
    content = data.decode("utf-8", "surrogateescape")
    count = content.count(old)
    if count == 0:
        hint = "read the file again and copy the exact text, whitespace and indentation included"
        if "\r\n" in content and "\r\n" not in old and "\n" in old:
            hint = "the file uses CRLF (\\r\\n) line endings; include them in `old`"
        raise ToolError(f"`old` was not found in {rel}; {hint}. Nothing was changed.")
    if count > 1:
        raise ToolError(
            f"`old` appears {count} times in {rel}; include more of the surrounding lines so "
            "that it appears exactly once. Nothing was changed."
        )
    at = content.index(old)
    updated = _encode(content[:at] + new + content[at + len(old) :])
    _write_journal(call.journal, {"tool": "edit_file", "path": str(path), "after": _sha(updated)})
    await asyncio.to_thread(_write_bytes, call.top, path, rel, updated)
    first = content.count("\n", 0, at) + 1
    was = f"line {first}" + (f"-{first + old.count(chr(10))}" if "\n" in old else "")
    return ToolOutcome(text=f"edited {rel}: replaced the text at {was} (1 occurrence)")


async def _run(call: _Call, args: dict[str, Any]) -> ToolOutcome:
    command: str = args["command"]
    refusal = run_refusal(command, call.policy)
    if refusal:
        raise ToolError(refusal)
    call.log_dir.mkdir(parents=True, exist_ok=True)
    log_path = call.log_dir / f"{call.log_name}.run.log"
    if _read_journal(call.journal):
        # A try before this one started the command and was lost with its worker.
        await sandbox.kill_leftovers(call.log_dir, f"{call.log_name}.run")
        output = _log_text(log_path, call.limit)
        return ToolOutcome.failure(
            "the worker stopped while this command was running, so it may have run in part "
            "or in whole; it was not started again. Check the state (files, output) before "
            "running it again.",
            f"output so far:\n{output}" if output else "",
        )
    _write_journal(call.journal, {"tool": "run", "command": command})
    policy = call.sandbox
    proc = await sandbox.run_sandboxed(
        sandbox.SandboxRun(
            argv=["bash", "-c", command],
            kind="tool",
            policy=policy,
            task_id=call.task_id,
            home=call.home or call.log_dir,
            tree=call.top,
            state_dir=call.log_dir,
            name=f"{call.log_name}.run",
            limit_s=call.policy.run_timeout,
            env=gate_extra_env(policy),
            agent_home=call.agent_home,
            protected=call.protected,
            allow_hosts=list(call.allow_hosts),
            drop_env=HIDDEN_ENV_PREFIXES,
        )
    )
    output = _log_text(log_path, call.limit) or "(no output)"
    if proc.timed_out:
        return ToolOutcome.failure(
            f"the command timed out after {call.policy.run_timeout} s and was stopped",
            output,
        )
    if proc.exit_code != 0:
        return ToolOutcome.failure(f"exit code {proc.exit_code}", output)
    return ToolOutcome(text=f"exit code 0\n{output}")


async def _finish(call: _Call, args: dict[str, Any]) -> ToolOutcome:
    return ToolOutcome(
        text="answer recorded; the task's checks will now run", finished=True, answer=args["answer"]
    )


_TOOLS: dict[str, Callable[[_Call, dict[str, Any]], Awaitable[ToolOutcome]]] = {
    "list_files": _list_files,
    "read_file": _read_file,
    "search": _search,
    "write_file": _write_file,
    "edit_file": _edit_file,
    "run": _run,
    "finish": _finish,
}
assert set(_TOOLS) == set(_SCHEMA_BY_NAME), "every schema has a tool and every tool a schema"


def _read_journal(journal: Path | None) -> dict[str, Any]:
    if journal is None:
        return {}
    try:
        data = json.loads(journal.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_journal(journal: Path | None, note: dict[str, Any]) -> None:
    """Record, before a change is applied, what it will be (see the module docstring)."""
    if journal is not None:
        write_atomic(journal, json.dumps(note))


async def execute(
    name: str,
    arguments: str,
    root: Path,
    policy: ToolPolicy,
    protected: list[str],
    log_dir: Path,
    *,
    log_name: str = "tool",
    journal: Path | None = None,
    sandbox: SandboxPolicy | None = None,
    task_id: str = "tool",
    home: Path | None = None,
    agent_home: Path | None = None,
    allow_hosts: tuple[str, ...] = (),
) -> ToolOutcome:
    """Run one tool call in the worktree ``root``; never raises for the model's mistakes.

    ``log_dir``/``log_name`` name the files a call keeps beside it (a command's log
    and pid file, a search's request); ``journal`` is the pending note that makes a
    retried ``edit_file`` or ``run`` safe (None: no retry protection, as in tests).
    ``run`` commands go through the task's ``sandbox`` (default: the default policy)
    under ``task_id``'s uid, with ``home`` (LOOP_HOME) covered, ``agent_home`` as HOME
    and ``allow_hosts`` (the model's endpoint) open through the egress proxy.
    Exceptions that escape are Loopwork's trouble, not the model's.
    """
    tool = _TOOLS.get(name)
    if tool is None:
        return ToolOutcome.failure(
            f"there is no tool named {name!r}; the tools are: {', '.join(_TOOLS)}"
        )
    call = _Call(
        top=_real(root),
        policy=policy,
        protected=list(protected),
        log_dir=log_dir,
        log_name=log_name,
        journal=journal,
        sandbox=sandbox or SandboxPolicy(),
        task_id=task_id,
        home=home,
        agent_home=agent_home,
        allow_hosts=tuple(allow_hosts),
    )
    try:
        args = parse_arguments(name, arguments)
        return await tool(call, args)
    except PolicyViolation as e:
        reason = str(e)
        return ToolOutcome(
            text=f"error: refused, policy violation: {reason}. This ends the attempt.",
            ok=False,
            error=f"error: policy violation: {reason}"[:ERROR_CHARS],
            policy_violation=reason,
        )
    except ToolError as e:
        return ToolOutcome.failure(str(e))


# --------------------------------------------------------------------------- the activity


def tool_artifact(attempt_dir: str | Path, step: int, index: int) -> Path:
    return Path(attempt_dir) / f"step-{step:04d}.tool-{index}.json"


def model_artifact(attempt_dir: str | Path, step: int) -> Path:
    return Path(attempt_dir) / f"step-{step:04d}.model.json"


def _call_arguments(inp: ToolStepInput) -> str:
    """The arguments of the call ``inp.call`` names, from the step's model artifact.

    Matched by index when the id there agrees (ids from some endpoints repeat),
    else by a unique id. A missing artifact or call cannot be fixed by retrying.
    """
    path = model_artifact(inp.attempt_dir, inp.step)
    try:
        message = json.loads(path.read_bytes())["message"]
        calls = message.get("tool_calls") or []
    except FileNotFoundError:
        raise permanent(f"missing {path}: the model step of tool call {inp.call.id}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise permanent(f"broken artifact {path}: {type(e).__name__}: {e}") from None
    i = inp.call.index
    if 0 <= i < len(calls) and isinstance(calls[i], dict) and calls[i].get("id") == inp.call.id:
        entry = calls[i]
    else:
        same = [c for c in calls if isinstance(c, dict) and c.get("id") == inp.call.id]
        if len(same) != 1:
            raise permanent(f"{path} has {len(same)} tool calls with id {inp.call.id!r}, not 1")
        entry = same[0]
    function = entry.get("function") or {}
    if function.get("name") != inp.call.name:
        raise permanent(
            f"{path}: call {inp.call.id!r} is {function.get('name')!r}, not {inp.call.name!r}"
        )
    arguments = function.get("arguments")
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _stored_result(path: Path) -> ToolStepResult:
    try:
        return ToolStepResult.model_validate(json.loads(path.read_bytes())["result"])
    except (ValueError, KeyError, TypeError) as e:
        raise permanent(f"broken artifact {path}: {type(e).__name__}: {e}") from None


class ToolActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=TOOL_STEP.name)
    async def tool_step(self, inp: ToolStepInput) -> ToolStepResult:
        """Run one tool call, or return the stored result of a call that already ran.

        The text the model reads goes to ``step-NNNN.tool-I.json`` (``{"message":
        <tool message>, "result": <this result>}``), written atomically; the result
        carries only its path and length, so history does not grow with tool output.
        """
        call = inp.call
        log = log_for(inp.task_id, inp.attempt, "tool_step").bind(
            step=inp.step, index=call.index, tool=call.name
        )
        artifact = tool_artifact(inp.attempt_dir, inp.step, call.index)
        if artifact.exists():
            log.info("tool call already done; returning its stored result, not running again")
            return _stored_result(artifact)
        root = Path(inp.workspace.path)
        if not root.is_dir():
            raise permanent(f"the worktree {root} is gone; start the task again with --rerun")
        arguments = _call_arguments(inp)
        logs = Path(inp.attempt_dir) / "tool-logs"
        name = f"step-{inp.step:04d}.tool-{call.index}"
        journal = logs / f"{name}.pending.json"
        outcome = await heartbeating(
            execute(
                call.name,
                arguments,
                root,
                inp.policy,
                inp.protected,
                logs,
                log_name=name,
                journal=journal,
                sandbox=inp.sandbox,
                task_id=inp.task_id,
                home=self.settings.home,
                agent_home=agent_home(inp.workspace),
                allow_hosts=tuple(sandbox.endpoint_entries(inp.base_url, openai=True)),
            )
        )
        result = ToolStepResult(
            name=call.name,
            ok=outcome.ok,
            error=outcome.error[:ERROR_CHARS],
            policy_violation=outcome.policy_violation,
            finished=outcome.finished,
            answer=outcome.answer,
            output_chars=len(outcome.text),
            artifact=str(artifact),
        )
        record = {
            "message": {"role": "tool", "tool_call_id": call.id, "content": outcome.text},
            "result": result.model_dump(mode="json"),
        }
        write_atomic(artifact, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
        journal.unlink(missing_ok=True)
        log.info(
            "tool call done",
            ok=result.ok,
            error=result.error or None,
            policy_violation=result.policy_violation or None,
            output_chars=result.output_chars,
        )
        return result
