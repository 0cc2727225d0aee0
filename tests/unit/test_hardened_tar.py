"""Unpacking an archive from outside (``loop.hardened.tar``): the ``data`` filter's rules on
every Python 3.11, its own checks where the Python has no filter (before 3.11.4), and
the same outcome either way."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from loop.hardened import tar as hardened_tar

UNPACKERS = [
    pytest.param(hardened_tar.unpack, id="unpack"),
    pytest.param(hardened_tar.unpack_checked, id="checked"),
]


def archive(*members: tuple[str, str, object]) -> tarfile.TarFile:
    """An archive of (kind, name, what): kind file (what: its text), dir, symlink or
    hardlink (what: the link's target), fifo; each 0o4777, owned by uid 1234 that names
    itself nobody (a user that exists, which a lookup by name would find)."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as out:
        for kind, name, what in members:
            info = tarfile.TarInfo(name)
            info.uid, info.gid, info.uname, info.gname = 1234, 1234, "nobody", "nogroup"
            info.mode = 0o4777
            body = None
            if kind == "file":
                body = str(what).encode()
                info.size = len(body)
            else:
                info.type = {
                    "dir": tarfile.DIRTYPE,
                    "symlink": tarfile.SYMTYPE,
                    "hardlink": tarfile.LNKTYPE,
                    "fifo": tarfile.FIFOTYPE,
                }[kind]
                info.linkname = str(what or "")
            out.addfile(info, io.BytesIO(body) if body is not None else None)
    data.seek(0)
    return tarfile.open(fileobj=data)


def listing(top: Path) -> list[tuple[str, str, int, str]]:
    """(path, kind, mode, content or link target) of everything under ``top``."""
    found = []
    for path in sorted(top.rglob("*")):
        st = path.lstat()
        rel = str(path.relative_to(top))
        if path.is_symlink():
            found.append((rel, "link", 0, os.readlink(path)))
        elif path.is_dir():
            found.append((rel, "dir", 0, ""))
        else:
            assert st.st_uid == os.geteuid(), rel
            found.append((rel, "file", stat.S_IMODE(st.st_mode), path.read_text()))
    return found


FRIENDLY = [
    ("dir", "src", None),
    ("file", "src/app.py", "x = 1\n"),
    ("symlink", "README", "src/app.py"),
    ("hardlink", "src/copy.py", "src/app.py"),
    ("symlink", "src/up", "../README"),  # read from src/, as the link will be
    ("dir", "inner", None),
    ("symlink", "through", "inner"),
    ("file", "through/f.txt", "written through a link an earlier member made\n"),
    ("file", "/rooted.txt", "its leading / dropped\n"),
]


@pytest.mark.parametrize("unpack", UNPACKERS)
def test_an_archive_unpacks_with_owners_and_high_bits_dropped(unpack, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    unpack(archive(*FRIENDLY), dest)
    assert listing(dest) == [
        ("README", "link", 0, "src/app.py"),
        ("inner", "dir", 0, ""),
        ("inner/f.txt", "file", 0o755, "written through a link an earlier member made\n"),
        ("rooted.txt", "file", 0o755, "its leading / dropped\n"),
        ("src", "dir", 0, ""),
        ("src/app.py", "file", 0o755, "x = 1\n"),
        ("src/copy.py", "file", 0o755, "x = 1\n"),
        ("src/up", "link", 0, "../README"),
        ("through", "link", 0, "inner"),
    ]


@pytest.mark.skipif(
    not hasattr(tarfile, "data_filter"),
    reason="the real data filter these checks are compared with is in Python 3.11.4 and later",
)
def test_the_checks_unpack_what_the_filter_unpacks(tmp_path: Path) -> None:
    """Against the real filter: the same files, modes and links, for a file that its owner
    may not run (no x bit left) and one only others could (none either)."""
    members = [*FRIENDLY, ("file", "plain.txt", "p\n")]
    results = []
    for name, unpack in (("filter", hardened_tar.unpack), ("checked", hardened_tar.unpack_checked)):
        tar = archive(*members)
        for info in tar.getmembers():
            if info.name == "plain.txt":
                info.mode = 0o047
        dest = tmp_path / name
        dest.mkdir()
        unpack(tar, dest)
        results.append(listing(dest))
    assert results[0] == results[1]
    assert ("plain.txt", "file", 0o644, "p\n") in results[1]


HOSTILE = {
    "dot-dot": [("file", "../escape", "x")],
    "dot-dot-inside": [("dir", "a", None), ("file", "a/../../escape", "x")],
    "link-absolute": [("symlink", "etc", "/etc")],
    "link-outside": [("symlink", "up", "../escape")],
    "link-then-through": [("symlink", "d", "."), ("symlink", "d/e", "../escape")],
    "hardlink-outside": [("hardlink", "h", "../escape")],
    "hardlink-absolute": [("hardlink", "h", "/etc/hostname")],
    "fifo": [("fifo", "pipe", None)],
}


@pytest.mark.parametrize("unpack", UNPACKERS)
@pytest.mark.parametrize("case", list(HOSTILE))
def test_what_could_reach_outside_is_refused(unpack, case: str, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(tarfile.TarError):
        unpack(archive(*HOSTILE[case]), dest)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest"]
    assert not any(p.is_symlink() and not p.resolve().is_relative_to(dest) for p in dest.rglob("*"))


@pytest.mark.parametrize("unpack", UNPACKERS)
def test_a_link_to_an_absolute_path_is_refused_even_inside(unpack, tmp_path: Path) -> None:
    """Where it points is decided where it is read: moved, it would point elsewhere."""
    dest = tmp_path / "dest"
    (dest / "in").mkdir(parents=True)
    with pytest.raises(tarfile.TarError):
        unpack(archive(("symlink", "abs", str(dest / "in"))), dest)
    assert not (dest / "abs").exists()
