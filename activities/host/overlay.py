"""Base's code with the attempt's test files: the commit ``regression_test`` runs on.

Made with git's plumbing, never by writing files into a checkout: a scratch index
read from base, the attempt's blobs (or their removal) for the given paths, a tree,
and a commit with base as its parent. Nothing here follows a path the repository
holds, and the object store gains one tree and one commit that nothing references.
"""

from __future__ import annotations

from pathlib import Path

from activities.host.git import git
from activities.host.worktree import split_z


async def commit(repo: str, base: str, attempt: str, paths: list[str], scratch: Path) -> str:
    """A commit of ``base`` with ``paths`` as they are at ``attempt``."""
    scratch.mkdir(parents=True, exist_ok=True)
    index = scratch / "overlay.index"
    index.unlink(missing_ok=True)
    await git(["read-tree", base], repo, index=index)
    entries = await git(["ls-tree", "-z", attempt, "--", *paths], repo) if paths else ""
    present: set[str] = set()
    for entry in split_z(entries):
        meta, _, path = entry.partition("\t")
        mode, kind, oid = meta.split()
        if kind != "blob":
            continue
        present.add(path)
        await git(
            ["update-index", "--add", "--cacheinfo", f"{mode},{oid},{path}"], repo, index=index
        )
    for path in paths:
        if path not in present:
            await git(["update-index", "--force-remove", "--", path], repo, index=index)
    tree = await git(["write-tree"], repo, index=index)
    index.unlink(missing_ok=True)
    return await git(
        ["commit-tree", tree, "-p", base, "-m", "loopwork: base with the attempt's tests"], repo
    )
