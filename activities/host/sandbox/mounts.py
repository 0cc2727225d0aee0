"""The file-system view of a sandboxed command, as one ordered list of mount operations.

Both levels build their view from the same list: ``strict`` hands it to bubblewrap
(on top of a read-only bind of ``/``), ``basic`` to the launcher, which applies it
with mount(2) in a mount namespace of its own. The rules:

- hidden: folders covered by an empty read-only tmpfs, so nothing of them shows:
  ``LOOP_HOME`` (other tasks, the server's database), in strict ``/home``, ``/root``
  and ``/run``, and every folder above a needed path that the task's uid could not
  search anyway (``/root`` above a pyenv Python, a 0700 ``mktemp -d``). Files that
  hold the worker's credentials are covered by ``/dev/null`` where the view would
  show them; under a hidden or private folder they are simply not there.
- private: ``/tmp`` (and in basic every folder any user may write: ``/var/tmp``,
  ``/dev/shm``, ``/run/lock``, ...) is a fresh tmpfs per run, so nothing planted there
  by one run is seen by the next, by a gate, or by another user.
- bound: each needed path at its own place, read-only unless it is the agent's to
  write (the worktree for agents and the ``run`` tool, the agent's output folder
  and HOME). The repository's git folders and protected files stay read-only.
- laid: a repository's environment, bound read-only from where the worker keeps it
  to where its setup made it in the tree (``.venv``), with a link from
  ``SETUP_TREE`` to the tree, so what the setup recorded there points at the tree
  being judged; a setup's own run sees its tree at ``SETUP_TREE`` (a second bind).

Operations are ordered parents first; folders leading to a bind inside a tmpfs are
made 0755 so the task's uid can walk to it. Hidden tmpfs turn read-only last, so a
write there fails loudly (EROFS) and shows up as a refused write.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from activities.host.sandbox.paths import blocked_ancestor, depth, outermost, under

STRICT_HIDDEN = ("/home", "/root", "/run")
STRICT_FRESH = ("/dev", "/proc")
"""bubblewrap's own /dev (with a new /dev/shm) and /proc in strict (``launcher.STRICT_FIXED``):
nothing of the host's is under them."""

OpKind = Literal["tmpfs", "dir", "bind", "null", "remount_ro", "symlink"]


@dataclass(frozen=True)
class Op:
    kind: OpKind
    path: str
    writable: bool = False
    """For ``bind``: read-write."""
    size: int | None = None
    """For ``tmpfs``: its size in bytes (the private scratch folders)."""
    source: str = ""
    """For ``bind``: what is bound at ``path`` ("": ``path`` itself); for ``symlink``: where
    the link points."""


@dataclass
class View:
    """What a sandboxed command sees of the host's files."""

    hides: list[str] = field(default_factory=list)
    scratch: list[tuple[str, int]] = field(default_factory=list)
    binds: list[tuple[str, bool]] = field(default_factory=list)
    nulls: list[str] = field(default_factory=list)
    moved: list[tuple[str, str, bool]] = field(default_factory=list)
    """Binds from elsewhere: (where, what, writable)."""
    links: list[tuple[str, str]] = field(default_factory=list)
    """Links made in a fresh folder: (where, pointing to)."""

    def operations(self) -> list[Op]:
        """The view as mount operations, in the order they must be applied."""
        scratch = [p for p, _ in self.scratch]
        hides = [h for h in self.hides if h not in scratch]
        bind_paths = [b for b, _ in self.binds]
        covered = [*hides, *scratch]
        keyed: list[tuple[int, int, str, Op]] = []
        made: set[str] = set()

        def folders_to(path: str) -> None:
            inside = [h for h in covered if under(path, h) and path != h]
            if not inside:
                return
            cover = current = max(inside, key=len)
            for part in Path(path).relative_to(cover).parts[:-1]:
                current = os.path.join(current, part)
                # A bind inside the cover brings its folders; one around it is covered.
                if current in made or any(
                    under(current, b) and under(b, cover) for b in bind_paths
                ):
                    continue
                made.add(current)
                keyed.append((depth(current), 1, current, Op("dir", current)))

        for path, size in self.scratch:
            keyed.append((depth(path), 0, path, Op("tmpfs", path, size=size)))
        for h in hides:
            folders_to(h)
            keyed.append((depth(h), 0, h, Op("tmpfs", h)))
        for path, writable in self.binds:
            folders_to(path)
            keyed.append((depth(path), 2, path, Op("bind", path, writable=writable)))
        for path, source, writable in self.moved:
            folders_to(path)
            keyed.append((depth(path), 2, path, Op("bind", path, writable, source=source)))
        for path, target in self.links:
            folders_to(path)
            keyed.append((depth(path), 2, path, Op("symlink", path, source=target)))
        for path in self.nulls:
            folders_to(path)
            keyed.append((depth(path), 3, path, Op("null", path)))
        keyed.sort(key=lambda k: (k[0], k[1], k[2]))
        return [op for *_, op in keyed] + [Op("remount_ro", h) for h in hides]


def bwrap_args(ops: list[Op]) -> list[str]:
    """The operations as bubblewrap arguments (after its fixed ones)."""
    args: list[str] = []
    for op in ops:
        if op.kind == "tmpfs":
            size = ["--size", str(op.size)] if op.size else []
            args += ["--perms", "1777" if op.size else "0755", *size, "--tmpfs", op.path]
        elif op.kind == "dir":
            args += ["--perms", "0755", "--dir", op.path]
        elif op.kind == "bind":
            args += ["--bind" if op.writable else "--ro-bind", op.source or op.path, op.path]
        elif op.kind == "symlink":
            args += ["--symlink", op.source, op.path]
        elif op.kind == "null":
            args += ["--ro-bind", "/dev/null", op.path]
        else:
            args += ["--remount-ro", op.path]
    return args


def plan_view(
    *,
    strict: bool,
    uid: int,
    gid: int,
    tree: str,
    tree_writable: bool,
    read_only: list[str],
    writable: list[str],
    protected: list[str],
    hide: list[str],
    secrets: list[str],
    tmp_bytes: int,
    shared: list[str] = (),  # type: ignore[assignment]  # a tuple: never mutated
    laid: list[tuple[str, str]] = (),  # type: ignore[assignment]
    tree_link: str = "",
    tree_also: str = "",
) -> View:
    """The view of one run.

    ``read_only``: host paths to show (toolchains, git folders, files for the agent);
    ``writable``: the agent's own folders; ``protected``: worktree-relative files kept
    read-only in a writable tree; ``hide``: folders to cover (LOOP_HOME); ``secrets``:
    files to cover with /dev/null wherever they are; ``shared``: the host's world-writable
    folders, each a private tmpfs in basic (strict's host is read-only anyway); ``laid``:
    an environment's folders, (kept at, laid at in the tree), read-only; ``tree_link``: a
    link to the tree made there (in the private /tmp); ``tree_also``: a second place the
    tree is bound at, as writable as the tree (an environment's setup).
    """
    hides = [*(STRICT_HIDDEN if strict else ()), *hide]
    hides = [h for h in hides if os.path.isdir(h)]
    needed: list[tuple[str, bool]] = [(tree, tree_writable)]
    needed += [(w, True) for w in writable]
    needed += [(p, False) for p in read_only if os.path.lexists(p) and not under(p, tree)]
    for path, _ in needed:
        if any(under(path, h) for h in hides):
            continue
        blocked = blocked_ancestor(path, uid, gid)
        if blocked:
            hides.append(blocked)  # the uid could not see past it anyway
    scratch = [("/tmp", tmp_bytes)]
    if not strict:
        scratch += [(p, tmp_bytes) for p in outermost(shared) if p != "/tmp" and os.path.isdir(p)]
    binds: dict[str, bool] = {}
    for path, rw in needed:
        binds[path] = binds.get(path, False) or rw
    if tree_writable:
        for rel in protected:
            binds[os.path.join(tree, rel)] = False
    # A bind of a link shows whatever it points to, in the sandbox's view: only real
    # paths are bound (what a link leads to is in the list already, or not shown).
    binds = {p: rw for p, rw in binds.items() if not os.path.islink(p)}
    hides = sorted({os.path.realpath(h) for h in hides}, key=lambda h: (depth(h), h))
    # A hide inside another is kept where a bind between them (a toolchain's prefix
    # around LOOP_HOME) would show it again.
    hides = [h for h in hides if shows(h, [k for k in hides if k != h], list(binds))]
    fresh = [*hides, *(p for p, _ in scratch), *(STRICT_FRESH if strict else ())]
    nulls = [
        s
        for s in secrets
        if os.path.lexists(s) and not os.path.isdir(s) and shows(s, fresh, list(binds))
    ]
    moved = [(target, source, False) for source, target in laid]
    if tree_also:
        moved.append((tree_also, tree, tree_writable))
    return View(
        hides=hides,
        scratch=scratch,
        binds=sorted(binds.items(), key=lambda b: (depth(b[0]), b[0])),
        nulls=sorted(set(nulls)),
        moved=moved,
        links=[(tree_link, tree)] if tree_link else [],
    )


def shows(path: str, fresh: list[str], binds: list[str]) -> bool:
    """Whether the host's file at ``path`` (a real path) is in the view: the deepest mount
    over it decides. Under a fresh file system (a hidden folder, a private scratch one,
    strict's own /dev) it is absent, and a cover there would have no file to go on (the
    launcher's mount fails); under a bind, or under none (the host's /), it shows, a
    bind even when it is the path itself (a command that names a key file)."""
    deepest = max(
        [(depth(f), 0) for f in fresh if under(path, os.path.realpath(f))]
        + [(depth(b), 1) for b in binds if under(path, b)],
        default=(0, 1),
    )
    return deepest[1] == 1
