"""Property: the review page shows every line git's diff has, in order, and git's counts.

Generated commits hold lines with every character a parser might split on or a
reader might miss (``\\r``, ``\\x0b``, ``\\x0c``, ``\\x1c``-``\\x1e``, ``\\x85``, U+2028,
U+2029, bidi overrides, zero-width spaces) and fake diff headers. The oracle is git
itself: ``--numstat`` for the files and counts, and the whole diff printed with
output indicators no generated line holds (``\\x01`` added, ``\\x02`` removed), split on
``\\n`` only.
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loop.ui.source import git_diff
from tests.support.repos import git

TRICKY = [
    "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\u202e",
    "\u2066", "\u200b", "\ufeff", "\x1b[1A", "\t",
]  # fmt: skip
FAKE = [
    "diff --git a/docs/CHANGELOG.md b/docs/CHANGELOG.md", "@@ -1,2 +1,3 @@", "+++ b/x.py",
    "--- a/x.py", "\\ No newline at end of file", "+added?", "-removed?", " context?",
]  # fmt: skip
piece = st.one_of(st.sampled_from(TRICKY), st.sampled_from(FAKE), st.text("abc xyz=()", max_size=6))
line = st.lists(piece, max_size=4).map("".join)
content = st.lists(line, max_size=8)
names = st.sampled_from(["a.py", "b.txt", "src/c.py", "d\u202egnp.exe", "e f.md"])


def write(repo: Path, files: dict[str, list[str]]) -> str:
    for path in repo.rglob("*"):
        if path.is_file() and ".git" not in path.parts:
            path.unlink()
    for name, lines in files.items():
        target = repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes("\n".join(lines).encode() + b"\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", "x")
    return git(repo, "rev-parse", "HEAD")


def oracle(repo: Path, base: str, commit: str) -> tuple[dict[str, tuple[int, int]], list[str]]:
    stats = subprocess.run(
        ["git", "-c", "core.quotePath=false", "diff", "-z", "--numstat", "-M", base, commit],
        cwd=repo, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    fields = stats.split("\0")
    counts: dict[str, tuple[int, int]] = {}
    i = 0
    while i < len(fields) and fields[i]:
        added, deleted, path = fields[i].split("\t", 2)
        i += 1
        if not path:
            path, i = fields[i + 1], i + 2
        counts[path] = (int(added), int(deleted))
    out = subprocess.run(
        ["git", "diff", "--no-color", "-M", "--output-indicator-new=\x01",
         "--output-indicator-old=\x02", base, commit],
        cwd=repo, capture_output=True, check=True,
    ).stdout  # fmt: skip
    lines = [
        ("+" if raw[:1] == b"\x01" else "-") + raw[1:].decode("utf-8", "replace")
        for raw in out.split(b"\n")
        if raw[:1] in (b"\x01", b"\x02")
    ]
    return counts, lines


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.dictionaries(names, content, max_size=3),
    after=st.dictionaries(names, content, max_size=3),
)
def test_the_page_shows_exactly_what_git_diff_has(before, after) -> None:
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder)
        git(repo, "init", "-q", "-b", "main")
        base = write(repo, before)
        commit = write(repo, after)
        counts, lines = oracle(repo, base, commit)
        diff = asyncio.run(git_diff(str(repo), base, commit))
    assert not diff.unavailable, diff.unavailable
    assert {f.path: (f.additions, f.deletions) for f in diff.files} == counts
    assert not [f.path for f in diff.files if f.unfaithful]
    shown = [
        ("+" if ln.kind == "add" else "-") + ln.text
        for f in diff.files
        for ln in f.lines
        if ln.kind in ("add", "del")
    ]
    assert shown == lines
    for f in diff.files:
        for ln in f.lines:
            if ln.kind in ("add", "del", "ctx"):
                for ch in ("\r", "\x0c", "\u2028", "\u202e", "\x1b"):
                    assert ch not in ln.html, (ch, ln.html)
