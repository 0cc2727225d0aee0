"""Files of the worktree, reached without leaving it.

Every path is resolved against the worktree and refused when it leads outside,
into ``.git`` or (for writes) onto a protected path; the file operations then
walk from the root one folder at a time with ``O_NOFOLLOW``, so a link swapped in
after the check is not followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pathspec

from activities.host.toolbox.outcome import PolicyViolation, ToolError
from activities.host.toolbox.schemas import BINARY_SNIFF_BYTES, MAX_FILE_BYTES


def real_path(path: Path | str) -> Path:
    return Path(os.path.realpath(path))


def is_inside(path: Path, top: Path) -> bool:
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
    ``O_NOFOLLOW`` (see ``parent_dir``), so a link swapped in after this check is
    not followed. Limits that remain: the worktree root itself is trusted (Loopwork
    made it); a hard link inside the worktree to a file outside is not a symlink
    and can be read (writes replace the file by rename, so they never write through
    one); and none of this confines the ``run`` tool: its commands are confined by
    the task's sandbox (``activities.host.sandbox``: in strict mode a read-only host, the
    worktree writable, protected files read-only). What ``run`` changes in the
    repository is judged afterwards by the gates (``diff_scope`` protects paths the
    same way), and changes outside the worktree by the make step's outside-write check.
    """
    top = real_path(root)
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
    real = real_path(top.joinpath(*parts))
    if not is_inside(real, top):
        where = "into /proc" if is_inside(real, Path("/proc")) else f"to {real}"
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
        return real_path(fallback)


@contextlib.contextmanager
def parent_dir(top: Path, path: Path, rel: str, *, create: bool) -> Iterator[tuple[int, str]]:
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
        if not is_inside(where, top):
            raise PolicyViolation(f"path {rel}: its folder is now {where}, outside the worktree")
        yield fd, parts[-1]
    finally:
        os.close(fd)


def os_error(e: OSError, rel: str) -> ToolError:
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


def read_bytes(top: Path, path: Path, rel: str) -> bytes:
    """A regular file's bytes (at most ``MAX_FILE_BYTES``), opened without following links."""
    try:
        with parent_dir(top, path, rel, create=False) as (dfd, name):
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
        raise os_error(e, rel) from None


def write_bytes(top: Path, path: Path, rel: str, data: bytes) -> bool:
    """Write ``data`` to ``path`` atomically; True when the file is new.

    The content goes to a temporary file created with ``O_CREAT | O_EXCL |
    O_NOFOLLOW`` in the already-opened folder, then renamed over the name:
    rename replaces a symlink rather than following it, a crash leaves the old
    content or the new one, and the file's permission bits are kept.
    """
    try:
        with parent_dir(top, path, rel, create=True) as (dfd, name):
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
                if not is_inside(where, top):
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
        raise os_error(e, rel) from None


def encode(text: str) -> bytes:
    """UTF-8; bytes that came in undecodable (surrogateescape) go back out unchanged."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


def split_lines(text: str) -> list[str]:
    """Lines as editors and grep count them: split on \\n, no empty last line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def is_binary(data: bytes) -> bool:
    return b"\x00" in data[:BINARY_SNIFF_BYTES]
