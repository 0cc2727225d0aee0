"""What the attempt added, line by line, handed to the diff scan (``loop.rules.tamper``).

The added line numbers come from git's own diff of base and the commit (``-U0``: the
hunks and nothing around them; ``--text`` and no attributes file, so no attribute can
make a file "binary" and hide it); each changed file's new bytes are read from the
clean checkout of the commit that the gates judge, without following a link, capped.
A diff too large to read whole, code the scan cannot read (too large, not a regular
file) and every symbolic link added are findings: a person looks at them.
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


def added_lines(diff: str) -> tuple[dict[str, set[int]], set[str], set[str]]:
    """Per file, the line numbers the diff adds; the files it creates; the symbolic
    links it creates or changes (mode 120000)."""
    added: dict[str, set[int]] = {}
    created: set[str] = set()
    links: set[str] = set()
    current = ""
    new_file = link = False
    for line in diff.split("\n"):
        if line.startswith("diff --git "):
            current, new_file, link = "", False, False
        elif line.startswith(("new file mode 120000", "new mode 120000")):
            link = True
        elif line.startswith("--- "):
            new_file = line == "--- /dev/null"
        elif line.startswith("+++ "):
            current = "" if line == "+++ /dev/null" else _path(line[4:]).removeprefix("b/")
            if current:
                added.setdefault(current, set())
                if new_file:
                    created.add(current)
                if link:
                    links.add(current)
        elif current and (m := _HUNK.match(line)):
            start, count = int(m.group(1)), int(m.group(2) or 1)
            added[current].update(range(start, start + count))
    return added, created, links


async def scan(repo: str, base: str, commit: str, tree: Path) -> list[tamper.Finding]:
    diff = await git(
        [
            "-c", "core.quotePath=false", "-c", "core.attributesFile=/dev/null", "diff", "-U0",
            "--text", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames",
            "--src-prefix=a/", "--dst-prefix=b/", base, commit,
        ],
        repo,
    )  # fmt: skip
    if len(diff) > DIFF_CHARS:
        size = f"{len(diff) >> 20} MB"
        return [tamper.Finding("", 0, "diff-size", f"the diff is {size}, too large to scan", "")]
    added, created, links = added_lines(diff)
    if len(added) > MAX_FILES:
        why = f"{len(added)} changed files, more than the scan reads ({MAX_FILES})"
        return [tamper.Finding("", 0, "diff-size", why, "")]
    unread: list[tamper.Finding] = []

    def read_all() -> dict[str, tuple[bytes | str, set[int]]]:
        files: dict[str, tuple[bytes | str, set[int]]] = {}
        for path, lines in added.items():
            if not lines or path in links:
                continue
            data, problem = read_untrusted(tree / path, FILE_BYTES)
            if problem and path.endswith(tamper.SOURCE_SUFFIXES):
                # Code the scan could not read whole is a question, never a pass.
                unread.append(tamper.Finding(path, 0, "unread", f"not scanned: {problem}", path))
                continue
            files[path] = (data, lines)
        return files

    files = await asyncio.to_thread(read_all)
    return unread + tamper.scan(files, created, links)
