"""Hidden tests, on the worker's side: read from where they are kept, laid over a checkout.

They are read from a folder (a mined suite's ``hidden/<case>``) or from a commit of the
task's repository, by the worker, capped; and written into a checkout of the worker's
without following any link the checkout holds. Nothing here touches the agent's
worktree or its clone's objects.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pathspec

from loop.hardened import git as hardened_git
from loop.hardened.files import read_untrusted

MAX_FILES = 500
MAX_BYTES = 32 << 20


def _spec(globs: list[str]) -> pathspec.PathSpec:
    return pathspec.GitIgnoreSpec.from_lines(globs)


def from_folder(folder: Path, globs: list[str]) -> tuple[dict[str, bytes], str]:
    """The files of ``folder`` that ``globs`` name (path relative to it -> bytes)."""
    if not folder.is_dir():
        return {}, f"hidden_tests.ref {folder} is not a folder on this host"
    spec, found, size = _spec(globs), {}, 0
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        rel = path.relative_to(folder).as_posix()
        if not spec.match_file(rel):
            continue
        data, problem = read_untrusted(path, MAX_BYTES)
        if problem:
            return {}, f"hidden test {rel} cannot be read: {problem}"
        found[rel], size = data, size + len(data)
        if len(found) > MAX_FILES or size > MAX_BYTES:
            return {}, f"hidden_tests names more than {MAX_FILES} files or {MAX_BYTES >> 20} MB"
    if not found:
        return {}, f"no file of {folder} matches hidden_tests.files ({', '.join(globs)})"
    return found, ""


async def from_commit(repo: str, ref: str, globs: list[str]) -> tuple[dict[str, bytes], str]:
    """The files of commit ``ref`` of ``repo`` that ``globs`` name."""
    listed = await hardened_git.run(["ls-tree", "-r", "-z", "--name-only", ref], repo)
    if listed.code != 0:
        return {}, f"hidden_tests.ref {ref} is not a commit of {repo}: {listed.err.strip()}"
    spec = _spec(globs)
    names = [n for n in listed.out.decode("utf-8", "surrogateescape").split("\0") if n]
    chosen = [n for n in names if spec.match_file(n)]
    if not chosen:
        return {}, f"no file of {ref} matches hidden_tests.files ({', '.join(globs)})"
    if len(chosen) > MAX_FILES:
        return {}, f"hidden_tests names more than {MAX_FILES} files"
    found: dict[str, bytes] = {}
    for name in chosen:
        blob = await hardened_git.run(["cat-file", "blob", f"{ref}:{name}"], repo, limit=MAX_BYTES)
        if blob.code != 0 or blob.cut:
            return {}, f"hidden test {name} of {ref} cannot be read"
        found[name] = blob.out
    return found, ""


def lay(tree: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` into ``tree``, replacing whatever stands at their paths, following
    no link the checkout holds (a committed ``tests -> elsewhere`` must not carry a hidden
    file out of the worker's folder)."""
    top = os.open(tree, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for path, data in sorted(files.items()):
            *folders, name = path.split("/")
            fd = os.dup(top)
            try:
                for part in folders:
                    fd = _into(fd, part)
                _replace(fd, name, data)
            finally:
                os.close(fd)
    finally:
        os.close(top)


def _into(parent: int, name: str) -> int:
    """The folder ``name`` in ``parent`` (made, or made anew where something else stood)."""
    try:
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(name, dir_fd=parent)
            raise FileNotFoundError
    except FileNotFoundError:
        os.mkdir(name, 0o755, dir_fd=parent)
    child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    os.close(parent)
    return child


def _replace(folder: int, name: str, data: bytes) -> None:
    try:
        st = os.stat(name, dir_fd=folder, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(f"a folder stands where the hidden test {name} goes")
        os.unlink(name, dir_fd=folder)
    except FileNotFoundError:
        pass
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=folder)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
