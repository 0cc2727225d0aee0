"""What a sandboxed command needs to see, worked out from its command line and the host.

A command names an interpreter (``/root/.pyenv/versions/3.11.7/bin/python``), a
script, a shell line; the sandbox shows those paths read-only and nothing else of
the folders around them. Everything here only reads the host (``stat``, ``readlink``,
``git rev-parse``); nothing follows a path an agent could have planted, because the
inputs are the task file's commands, the worker's PATH and folders the worker made.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import threading
from collections.abc import Iterable
from pathlib import Path

import pathspec

from activities.host import tree
from activities.host.clone import alternates
from loop.hardened import git
from loop.rules.commands import ASSIGNMENT, SHELLS

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""Interpreters whose ``-c`` line is itself a command line worth reading for paths."""
NEVER_BOUND = ("/dev", "/proc", "/sys")
"""Kernel file systems: the sandbox has its own, so a path there is never bound."""

_WORD = re.compile(r"[\w.+-]+")


def under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def depth(path: str) -> int:
    return len(Path(path).parts)


def outermost(paths: Iterable[str]) -> list[str]:
    """The paths that no other path of the list contains, shallowest first."""
    ordered = sorted(set(paths), key=lambda p: (depth(p), p))
    kept: list[str] = []
    for p in ordered:
        if not any(under(p, k) for k in kept):
            kept.append(p)
    return kept


def _allows(st: os.stat_result, uid: int, gid: int, bit: int) -> bool:
    """``bit`` is the "other" permission bit (1 = x, 4 = r); owner and group shift it."""
    if st.st_uid == uid:
        return bool(st.st_mode & (bit << 6))
    if st.st_gid == gid:
        return bool(st.st_mode & (bit << 3))
    return bool(st.st_mode & bit)


SKIP_SCAN = ("/proc", "/sys", "/usr", "/boot", "/home", "/root", "/nix", "/snap")


def world_writable_folders(top: str = "/", depth: int = 4) -> list[str]:
    """Folders any user may write (``/tmp``, ``/var/tmp``, ``/run/lock``, ...), found by a
    shallow walk that follows no link: in basic each gets a private tmpfs, so nothing a
    task leaves there outlives its run or reaches another user."""
    found: list[str] = []

    def walk(folder: str, left: int) -> None:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for entry in entries:
            if entry.path in SKIP_SCAN or not entry.is_dir(follow_symlinks=False):
                continue
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if mode & stat.S_IWOTH:
                found.append(entry.path)
            elif left > 1:
                walk(entry.path, left - 1)

    walk(top, depth)
    return sorted(found)


def blocked_ancestor(path: str, uid: int, gid: int) -> str:
    """The first folder above ``path`` that ``uid`` may not search; empty when none."""
    parts = Path(path).parts
    current = "/"
    for part in parts[1:-1] if len(parts) > 1 else ():
        current = os.path.join(current, part)
        try:
            st = os.stat(current)
        except OSError:
            return ""
        if not _allows(st, uid, gid, 1):
            return current
    return ""


def cannot_execute(path: str, uid: int, gid: int) -> str:
    """Why ``uid`` could not run the file ``path`` (folders on the way aside: the sandbox
    shows those); empty when it can."""
    try:
        st = os.stat(path)
    except OSError as e:
        return f"{path}: {e.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a file"
    if not _allows(st, uid, gid, 1):
        mode = stat.S_IMODE(st.st_mode)
        return f"uid {uid} may not execute {path} (mode {mode:04o}, owner uid {st.st_uid})"
    return ""


def symlink_chain(path: str) -> list[str]:
    """``path``, each link it goes through, and where it ends (absolute, existing)."""
    chain: list[str] = []
    current = os.path.abspath(path)
    for _ in range(20):
        chain.append(current)
        if not os.path.islink(current):
            break
        target = os.readlink(current)
        current = os.path.normpath(os.path.join(os.path.dirname(current), target))
    real = os.path.realpath(path)
    if real not in chain:
        chain.append(real)
    return [p for p in chain if os.path.exists(p)]


def _pyenv_bins(shims: str, environ: dict[str, str]) -> list[str] | None:
    """For a pyenv ``shims`` folder: the ``bin`` folders of the versions it stands for (the
    worker's ``PYENV_VERSION``, else pyenv's global ``version`` file); None when ``shims``
    is not pyenv's. A shim runs pyenv itself, which the sandbox does not show."""
    root = os.path.dirname(shims)
    if os.path.basename(shims) != "shims" or not os.path.exists(
        os.path.join(root, "libexec", "pyenv")
    ):
        return None
    names = environ.get("PYENV_VERSION", "")
    if not names:
        try:
            with open(os.path.join(root, "version")) as f:
                names = ":".join(
                    line.strip() for line in f if line.strip() and not line.startswith("#")
                )
        except OSError:
            names = ""
    bins = [os.path.join(root, "versions", n, "bin") for n in names.split(":") if n != "system"]
    return [b for b in bins if os.path.isdir(b)]


def sandbox_path(path_env: str, environ: dict[str, str]) -> str:
    """The worker's PATH as a sandboxed command gets it: shim folders of version managers
    (pyenv) replaced by the version folders they resolve to, so ``python3`` runs the same
    interpreter without the manager's own machinery (or the rest of its home folder)."""
    entries: list[str] = []
    for entry in path_env.split(os.pathsep):
        if not entry:
            continue
        if os.path.basename(entry) == "shims" and "pyenv-virtualenv" in entry:
            continue  # virtualenv shims: pyenv's own shims below resolve the same names
        bins = _pyenv_bins(entry, environ)
        entries.extend(bins if bins is not None else [entry])
    return os.pathsep.join(dict.fromkeys(entries))


def command_words(argv: list[str]) -> list[str]:
    """The words of a command that may name programs or files: its argv, and for a shell's
    ``-c LINE`` the words of that line too (best effort; other interpreters' code is code)."""
    words = list(argv)
    name = os.path.basename(argv[0]) if argv else ""
    if len(argv) >= 3 and argv[1] == "-c" and name in SHELLS:
        try:
            words = [argv[0], *shlex.split(argv[2], comments=True)]
        except ValueError:
            words = [argv[0], *argv[2].split()]
    return words


def command_paths(argv: list[str], path_env: str) -> list[str]:
    """Executables and files a command names: absolute paths, and command words found on
    PATH; never a path under /dev, /proc or /sys."""
    found: list[str] = []
    for word in command_words(argv):
        word = ASSIGNMENT.sub("", word)
        if word.startswith("/") and word.strip("/"):
            if os.path.exists(word) and not any(under(word, k) for k in NEVER_BOUND):
                found.append(word)
        elif word and "/" not in word and _WORD.fullmatch(word):
            where = shutil.which(word, path=path_env)
            if where:
                found.append(where)
    return found


def toolchain(paths: Iterable[str]) -> list[str]:
    """What must be visible for those commands to run: for ``…/bin/x`` its prefix
    (an interpreter needs its library), else the file itself; every link followed."""
    exposed: list[str] = []
    for p in paths:
        for element in symlink_chain(p):
            if any(under(element, k) for k in NEVER_BOUND):
                continue
            parent = os.path.dirname(element)
            if os.path.isdir(element):
                exposed.append(element)
            elif os.path.basename(parent) == "bin" and os.path.dirname(parent) != "/":
                exposed.append(os.path.dirname(parent))
            else:
                exposed.append(element)
    return outermost(exposed)


def protected_files(worktree: str, globs: list[str]) -> list[str]:
    """Regular files of the worktree (outside ``.git``) that a ``protect`` glob matches.
    A link is not one: bound read-only, it would show what it points to."""
    if not globs:
        return []
    spec = pathspec.GitIgnoreSpec.from_lines(globs)
    return sorted(
        e.rel
        for e in tree.walk(worktree)
        if not e.is_git and stat.S_ISREG(e.st.st_mode) and spec.match_file(e.rel)
    )


GIT_DIRS_KEPT = 256
_git_dirs: dict[str, tuple[tuple[object, ...], list[str]]] = {}
_git_dirs_lock = threading.Lock()


def _git_pin(worktree: str, answer: list[str]) -> tuple[object, ...] | None:
    """What ``git rev-parse --git-dir --git-common-dir`` in ``worktree`` answered from: the
    worktree folder, its ``.git`` (a clone's folder; a worktree's file, by content through
    its size and times) and each folder answered with its ``commondir`` file, there or
    not. None when ``.git`` is missing or a link: nothing is kept, git is asked."""
    pins: list[object] = []
    try:
        top = os.stat(worktree)
        dot = os.lstat(os.path.join(worktree, ".git"))
    except OSError:
        return None
    if stat.S_ISLNK(dot.st_mode):
        return None
    pins += [(top.st_dev, top.st_ino), (dot.st_dev, dot.st_ino, dot.st_mode, dot.st_uid)]
    if not stat.S_ISDIR(dot.st_mode):
        pins.append((dot.st_size, dot.st_mtime_ns, dot.st_ctime_ns))
    for folder in answer:
        try:
            st = os.stat(folder)
        except OSError:
            return None
        pins.append((st.st_dev, st.st_ino))
        try:
            common = os.lstat(os.path.join(folder, "commondir"))
            pins.append((common.st_ino, common.st_size, common.st_mtime_ns, common.st_ctime_ns))
        except FileNotFoundError:
            pins.append(None)
        except OSError:
            return None
    return tuple(pins)


def _rev_parse(worktree: str) -> list[str] | None:
    """The git folder and common folder of ``worktree`` (absolute), as git answers; kept
    per worktree while ``_git_pin`` says nothing it answered from changed (every sandboxed
    run asks, a gate run twice on one checkout)."""
    with _git_dirs_lock:
        kept = _git_dirs.get(worktree)
    if kept is not None and _git_pin(worktree, kept[1]) == kept[0]:
        return list(kept[1])
    try:
        done = git.run_sync(["rev-parse", "--git-dir", "--git-common-dir"], worktree, timeout=30)
    except (OSError, git.Timeout):
        return None
    if done.code != 0:
        return None
    answer = [
        os.path.realpath(os.path.join(worktree, line.strip()))
        for line in done.text.split("\n")
        if line.strip()
    ]
    pin = _git_pin(worktree, answer)
    if pin is not None:
        with _git_dirs_lock:
            _git_dirs.pop(worktree, None)
            _git_dirs[worktree] = (pin, answer)
            while len(_git_dirs) > GIT_DIRS_KEPT:
                del _git_dirs[next(iter(_git_dirs))]
    return answer


def git_dirs(worktree: str) -> list[str]:
    """The worktree's ``.git``, the repository's git folder (``--git-common-dir``) and the
    object folders it borrows (a task's clone borrows the store of base history)."""
    dot_git = os.path.join(worktree, ".git")
    dirs = [dot_git] if os.path.lexists(dot_git) else []
    answer = _rev_parse(worktree)
    if answer is None:
        return dirs
    for found in answer:
        dirs += [found, *alternates(found)]
    return outermost(dirs)
