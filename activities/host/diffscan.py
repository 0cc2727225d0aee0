"""What the attempt added, line by line, handed to the diff scan (``loop.rules.tamper``).

The added line numbers come from git's own diff of base and the commit (``-U0``: the
hunks and nothing around them); each changed file's new text is read from the clean
checkout of the commit that the gates judge, without following a link, capped. A
diff too large to read whole is itself a finding: a person looks at it.
"""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path

from activities.host.git import git
from loop.hardened.files import read_untrusted
from loop.rules import tamper

FILE_BYTES = 2 << 20
DIFF_CHARS = 32 << 20
MAX_FILES = 2_000

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


def _path(raw: str) -> str:
    """A path as git prints it after ``+++ b/`` (C-quoted when it holds odd bytes)."""
    if raw.startswith('"'):
        try:
            return ast.literal_eval("b" + raw).decode("utf-8", "surrogateescape")
        except (ValueError, SyntaxError):
            return raw
    return raw


def added_lines(diff: str) -> tuple[dict[str, set[int]], set[str]]:
    """Per file, the line numbers the diff adds; and the files it creates."""
    added: dict[str, set[int]] = {}
    created: set[str] = set()
    current = ""
    new_file = False
    for line in diff.split("\n"):
        if line.startswith("diff --git "):
            current, new_file = "", False
        elif line.startswith("--- "):
            new_file = line == "--- /dev/null"
        elif line.startswith("+++ "):
            current = "" if line == "+++ /dev/null" else _path(line[4:]).removeprefix("b/")
            if current:
                added.setdefault(current, set())
                if new_file:
                    created.add(current)
        elif current and (m := _HUNK.match(line)):
            start, count = int(m.group(1)), int(m.group(2) or 1)
            added[current].update(range(start, start + count))
    return added, created


async def scan(repo: str, base: str, commit: str, tree: Path) -> list[tamper.Finding]:
    diff = await git(
        [
            "-c", "core.quotePath=false", "diff", "-U0", "--no-color", "--no-ext-diff",
            "--no-textconv", "--no-renames", "--src-prefix=a/", "--dst-prefix=b/", base, commit,
        ],
        repo,
    )  # fmt: skip
    if len(diff) > DIFF_CHARS:
        size = f"{len(diff) >> 20} MB"
        return [tamper.Finding("", 0, "diff-size", f"the diff is {size}, too large to scan", "")]
    added, created = added_lines(diff)
    if len(added) > MAX_FILES:
        why = f"{len(added)} changed files, more than the scan reads ({MAX_FILES})"
        return [tamper.Finding("", 0, "diff-size", why, "")]

    def read_all() -> dict[str, tuple[str, set[int]]]:
        files: dict[str, tuple[str, set[int]]] = {}
        for path, lines in added.items():
            if not lines:
                continue
            data, problem = read_untrusted(tree / path, FILE_BYTES)
            if problem and problem != "missing" and not data:
                continue  # a link or a special file: nothing a test process imports as code
            files[path] = (data.decode("utf-8", "replace"), lines)
        return files

    return tamper.scan(await asyncio.to_thread(read_all), created)
