"""The tools the model sees: their JSON schemas and the limits they promise."""

from __future__ import annotations

from typing import Any

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
HIDDEN_ENV_PREFIXES = ("LOOP_", "OPENAI_", "TEMPORAL_")  # the loop's own settings and keys
"""Variables a ``run`` command does not see: Loopwork's own, which are not the agent's."""


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

SCHEMA_BY_NAME = {s["function"]["name"]: s["function"] for s in TOOL_SCHEMAS}
