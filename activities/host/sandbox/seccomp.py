"""The seccomp filter every sandboxed command runs under: no new user namespaces.

A user namespace would let the task's uid become "root" of a world of its own and
reach kernel code that only root should; nothing an agent or a test needs does
that. So ``unshare`` and ``clone`` with CLONE_NEWUSER, and ``setns``, fail with
EPERM. ``clone3`` answers ENOSYS, so libc falls back to ``clone``, whose flags a
classic BPF filter can read (``clone3`` passes them in memory). Other ABIs (x32)
are refused outright. bubblewrap's own ``--disable-userns`` needs a user namespace
of its own, which would map the task's uid onto root outside; hence this filter.
"""

from __future__ import annotations

import os
import platform
import struct

_ARCHES = {
    # audit arch, clone, unshare, clone3, setns, x32 syscalls share the table
    "x86_64": (0xC000003E, 56, 272, 435, 308, True),
    "aarch64": (0xC00000B7, 220, 97, 435, 268, False),
}
_CLONE_NEWUSER = 0x10000000


def program() -> bytes | None:
    """The filter as ``struct sock_filter`` entries; None on an architecture it lacks."""
    arch = _ARCHES.get(platform.machine())
    if arch is None:
        return None
    audit, clone, unshare, clone3, setns, x32 = arch
    ld, jeq, jset, jge, ret = 0x20, 0x15, 0x45, 0x35, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050001, 0x00050026
    instructions: list[tuple[int, int | str, int | str, int]] = []
    labels: dict[str, int] = {}

    def emit(code: int, k: int = 0, jt: int | str = 0, jf: int | str = 0) -> None:
        instructions.append((code, jt, jf, k))

    emit(ld, 4)  # seccomp_data.arch
    emit(jeq, audit, jf="deny")
    emit(ld, 0)  # seccomp_data.nr
    if x32:
        emit(jge, 0x40000000, jt="deny")
    emit(jeq, unshare, jt="flags")
    emit(jeq, clone, jt="flags")
    emit(jeq, clone3, jt="nosys")
    emit(jeq, setns, jt="deny")
    emit(ret, allow)
    labels["flags"] = len(instructions)
    emit(ld, 16)  # the first argument's low word: the flags of unshare and clone
    emit(jset, _CLONE_NEWUSER, jt="deny")
    emit(ret, allow)
    labels["deny"] = len(instructions)
    emit(ret, eperm)
    labels["nosys"] = len(instructions)
    emit(ret, enosys)

    def offset(i: int, target: int | str) -> int:
        return labels[target] - i - 1 if isinstance(target, str) else target

    return b"".join(
        struct.pack("=HBBI", code, offset(i, jt), offset(i, jf), k)
        for i, (code, jt, jf, k) in enumerate(instructions)
    )


def memfd() -> int:
    """The filter in an anonymous file, for bubblewrap's ``--seccomp FD`` and the launcher."""
    data = program()
    if data is None:
        raise OSError(f"no seccomp filter for {platform.machine()}")
    fd = os.memfd_create("loop-seccomp", 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
