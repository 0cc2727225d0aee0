"""The sandbox launcher: the first process of every sandboxed run, root until it execs.

The worker starts it once, as its zygote (``zygote.py``), with
``python -I -S -B launch.py SOCK_FD`` (the worker's own interpreter, isolated from the
environment, no site packages: nothing of the task can change what runs here). ``serve``
reads one request per run on that socket (the plan, the cwd, the environment, and the
run's fds), forks, reaps the child and says its exit status on the run's own status
socket. The child leads a session of its own, holds the request's fds at the numbers the
plan names and no other, and ``run`` follows the plan, in this order:

1. joins the run's cgroups, so everything it becomes and forks is counted and killed;
2. sets the resource limits (inherited by everything after it);
3. unless the network is ``host``: enters a network namespace of its own with only
   ``lo`` up; for ``proxy`` listens on 127.0.0.1:3128 there, and for a run with a
   model gateway on 127.0.0.1:3129, and hands those sockets to the worker over the
   control socket;
4. ``basic``: enters a mount namespace and builds the view (``mounts.View``), drops
   to the task's uid (no groups, no capabilities, ``no_new_privs``) under the
   seccomp filter, and execs the command; ``strict``: execs bubblewrap, which builds
   the view, drops privileges with ``setpriv`` and runs the command;
5. says ``ready`` on the control socket just before the exec, or the reason it could
   not set up; an exec that fails (command missing, not executable) is reported
   there too, so "could not start" is never mistaken for the command's own exit code.

The control socket closes on exec, so the command never inherits it. Only the
standard library is used, all of it imported up front (the view may hide the
interpreter's own library); this file is not imported by the worker. The zygote itself
changes nothing a child inherits (signals, umask, namespaces, cgroups, limits): each
child sets up its own, from the state the zygote started with.

It imports little (the zygote starts again after it ended): ``marshal`` for the
requests and ``_socket`` for the sockets, not ``json`` and ``socket`` (which bring
``re``, ``enum`` and ``functools``), and it searches PATH itself rather than through
``os.execvpe`` (which imports ``warnings``). Its messages on the control socket are
JSON, written by ``_json``, read by ``launcher.read_setup``.
"""

import _signal
import _socket
import ctypes
import fcntl
import marshal
import os
import resource
import select
import stat
import struct
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
ST_FLAGS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC))
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
O_PATH = getattr(os, "O_PATH", 0o10000000)
MAX_FDS = 64
"""The most fds one request may pass (the status socket, stdio, the plan's and the run's)."""
MAXFD = 0x7FFFFFFF

libc = ctypes.CDLL(None, use_errno=True)


class SetupError(Exception):
    pass


def _check(result, what):
    if result != 0:
        errno = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(errno)}")


def _mount(source, target, fstype, flags, data, what):
    _check(
        libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        what,
    )


def _json(value):
    """``value`` (a dict, list, str, bool, int or None, as the messages hold) as JSON."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_json(str(k))}: {_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_json(v) for v in value) + "]"
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int):
        return str(value)
    out = []
    for ch in str(value):
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or 0xD800 <= ord(ch) <= 0xDFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _send_fds(control, data, fds):
    control.sendmsg(
        [data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))]
    )


def _lo_up():
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
    finally:
        s.close()


def _network(plan, control):
    if plan["net"] == "host":
        return
    _check(libc.unshare(CLONE_NEWNET), "cannot make a network namespace")
    _lo_up()
    wanted = {
        "proxy": plan["proxy_port"] if plan["net"] == "proxy" else 0,
        "gateway": plan.get("gateway_port") or 0,
    }
    names, listeners = [], []
    for name, port in wanted.items():
        if not port:
            continue
        listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(128)
        names.append(name)
        listeners.append(listener)
    if listeners:
        message = _json({"listeners": names}).encode()
        _send_fds(control, message, [s.fileno() for s in listeners])
        for listener in listeners:
            listener.close()


def _keep_flags(path):
    """A read-only remount must keep the mount's nosuid, nodev and noexec."""
    flags = os.statvfs(path).f_flag
    return sum(ms for st, ms in ST_FLAGS if flags & st)


def _make_target(path, like_dir):
    if os.path.lexists(path):
        return
    if like_dir:
        os.makedirs(path, 0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


def _view(ops):
    """Apply ``mounts.View.operations()`` in a mount namespace of this process."""
    # Its own mounts, and its own System V IPC (a shared memory segment outlives nothing).
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWIPC), "cannot make mount and IPC namespaces")
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None, "cannot make / private")
    # Every bind source is opened before anything covers it (a tmpfs over /root hides
    # a toolchain below it, LOOP_HOME an environment); binds then come from /proc/self/fd.
    sources = {}
    for op in ops:
        source = op.get("source") or op["path"]
        if op["kind"] == "bind" and source not in sources:
            try:
                sources[source] = os.open(source, O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError as e:
                raise SetupError(f"cannot open {source}: {e.strerror}") from None
    null = os.open("/dev/null", O_PATH | os.O_CLOEXEC)
    for path, fd in sources.items():
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise SetupError(f"{path} became a symbolic link; not bound")
    for op in ops:
        kind, path = op["kind"], op["path"]
        if kind == "bind" and op.get("source") and os.path.realpath(path) != path:
            # Laid from elsewhere into a tree: never through a link planted on the way.
            raise SetupError(f"{path} leads through a symbolic link; not bound")
        if kind == "tmpfs":
            mode = "1777" if op.get("size") else "0755"
            size = f",size={op['size']}" if op.get("size") else ""
            _make_target(path, True)
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode}{size}", path)
        elif kind == "dir":
            os.makedirs(path, 0o755, exist_ok=True)
            os.chmod(path, 0o755)
        elif kind == "symlink":
            os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
            os.symlink(op["source"], path)
        elif kind == "bind":
            fd = sources[op.get("source") or path]
            is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
            _make_target(path, is_dir)
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC, None, f"bind {path}")
            if not op.get("writable"):
                flags = MS_BIND | MS_REMOUNT | MS_RDONLY | _keep_flags(path)
                _mount(None, path, None, flags, None, f"read-only {path}")
        elif kind == "null":
            _mount(f"/proc/self/fd/{null}", path, None, MS_BIND, None, f"cover {path}")
        elif kind == "remount_ro":
            flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
            _mount(None, path, None, flags, None, f"read-only {path}")
    for fd in (*sources.values(), null):
        os.close(fd)


def _drop(plan):
    """Become the task's uid for good: no groups, no way back, no new namespaces."""
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    os.setgroups([])
    os.setresgid(plan["gid"], plan["gid"], plan["gid"])
    os.setresuid(plan["uid"], plan["uid"], plan["uid"])
    if os.getuid() == 0 or os.geteuid() == 0:
        raise SetupError("still root after dropping privileges")
    program = os.read(plan["seccomp_fd"], 1 << 16)
    os.close(plan["seccomp_fd"])

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.addressof(buffer))
    _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp")


def _execvpe(argv, env):
    """``os.execvpe`` without its import of ``warnings``: the first of PATH's folders
    that holds ``argv[0]``; the error is the first that is not "no such file", as there."""
    if os.path.dirname(argv[0]):
        os.execve(argv[0], argv, env)
    first, last = None, None
    for folder in env.get("PATH", os.defpath).split(os.pathsep):
        try:
            os.execve(os.path.join(folder, argv[0]), argv, env)
        except (FileNotFoundError, NotADirectoryError) as e:
            last = e
        except OSError as e:
            last = e
            first = first or e
    raise first or last or FileNotFoundError(2, "No such file or directory")


def run(plan, env):
    """The launcher proper, in a child the zygote forked: confine, say ``ready``, exec;
    the exit code when it could not."""
    control = _socket.socket(fileno=plan["control_fd"])
    os.set_inheritable(control.fileno(), False)

    def say(message):
        control.sendall(_json(message).encode())

    try:
        if plan["mode"] not in ("basic", "strict"):  # anything else would run as root, bare
            raise SetupError(f"unknown sandbox mode {plan['mode']!r}")
        for procs in plan["cgroup_procs"]:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        for name, value in plan["rlimits"].items():
            resource.setrlimit(getattr(resource, name), (value, value))
        _network(plan, control)
        if plan["mode"] == "basic":
            _view(plan["mounts"])
            os.chdir(plan["cwd"])
            _drop(plan)
    except (OSError, SetupError, ValueError) as e:
        say({"error": str(e) if isinstance(e, SetupError) else f"{type(e).__name__}: {e}"})
        return 125
    argv = plan["argv"]
    say({"ready": True})
    # Python ignores these at its start, and an ignored signal stays ignored across exec:
    # the command would get EPIPE where a shell's child dies of SIGPIPE (`yes | head`).
    # Here, not earlier: until now a worker gone mid-setup is an error, not a signal.
    for ignored in (_signal.SIGPIPE, _signal.SIGXFSZ):
        _signal.signal(ignored, _signal.SIG_DFL)
    try:
        if plan["mode"] == "basic":
            _execvpe(argv, env)
        else:
            os.execve(argv[0], argv, env)
    except OSError as e:
        code = 127 if isinstance(e, FileNotFoundError) else 126
        message = f"cannot start {argv[0]!r}: {e.strerror or e}"
        say({"exec_failed": message, "code": code})
        os.write(2, (message + "\n").encode(errors="replace"))
        return code


def _received(ancdata):
    fds = []
    for level, kind, data in ancdata:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds += struct.unpack(f"{len(data) // 4}i", data[: len(data) // 4 * 4])
    return fds


def _child(request, fds, leading):
    """The forked child: a session of its own (then ``leading`` is closed), exactly the
    fds the request names, then ``run``. Never returns into the zygote's loop."""
    code = 125
    try:
        os.setsid()
        os.close(leading)
        _signal.pthread_sigmask(_signal.SIG_SETMASK, [])
        # fds[0] is the zygote's status socket of this run: not the child's.
        targets = [0, 1, 2, *request["fds"]]
        given = fds[1:]
        if len(given) != len(targets):
            raise SetupError("the request names other fds than it sent")
        # Above every number in play first, so no dup2 below overwrites a given fd.
        high = max([*targets, *fds]) + 1
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, high) for fd in given]
        for fd, target in zip(moved, targets, strict=True):
            os.dup2(fd, target)  # inheritable, as subprocess's pass_fds
        keep = sorted(set(targets))
        low = 0
        for fd in keep:
            if low < fd:  # closerange(n, n) would close everything from n on
                os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, MAXFD)
        os.chdir(request["cwd"])
        code = run(request["plan"], request["env"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 125
    except BaseException as e:  # a child must end here, whatever went wrong
        os.write(2, f"the sandbox launcher failed: {type(e).__name__}: {e}\n".encode())
    os._exit(code)


def _fork(sock, poller, children):
    """One request: fork its launcher, answer its pid. False once the worker is gone."""
    message, ancdata, flags, _ = sock.recvmsg(1 << 20, _socket.CMSG_SPACE(4 * MAX_FDS))
    if not message:
        return False
    fds = _received(ancdata)
    if not fds:
        return True  # nowhere to answer
    status = _socket.socket(fileno=fds[0])
    try:
        if flags & (_socket.MSG_TRUNC | _socket.MSG_CTRUNC):
            raise SetupError("the request was cut short")
        request = marshal.loads(message)
        # The pid is answered once the child leads its own session: a kill of its group
        # (what the worker does with that pid) then reaches it.
        led, leading = os.pipe()
        try:
            pid = os.fork()
            if pid == 0:
                _child(request, fds, leading)
            os.close(leading)
            leading = -1
            os.read(led, 1)  # EOF: the child closed its end after setsid (or died)
        finally:
            for fd in (led, leading):
                if fd >= 0:
                    os.close(fd)
        pidfd = os.pidfd_open(pid)
    except (OSError, SetupError, ValueError, EOFError, TypeError, KeyError) as e:
        _answer(status, {"error": f"{type(e).__name__}: {e}"})
        status.close()
        return True
    finally:
        for fd in fds[1:]:
            os.close(fd)
    _answer(status, {"pid": pid})
    children[pidfd] = (pid, status)
    poller.register(pidfd, select.POLLIN)
    return True


def _answer(status, message):
    try:
        status.send(marshal.dumps(message))
    except OSError:
        pass  # the worker stopped waiting for this run


def serve(sock_fd):
    """The zygote: fork a launcher per request on ``sock_fd``, reap each, say its exit
    status on the run's own status socket. Single-threaded (it forks); it ends when the
    worker's end closes, leaving running runs to the worker's retries (their pid files)."""
    sock = _socket.socket(fileno=sock_fd)
    poller = select.poll()
    poller.register(sock_fd, select.POLLIN)
    children = {}
    while True:
        for fd, _ in poller.poll():
            if fd == sock_fd:
                if not _fork(sock, poller, children):
                    return
                continue
            pid, status = children.pop(fd)
            poller.unregister(fd)
            os.close(fd)
            _, code = os.waitpid(pid, 0)
            _answer(status, {"exit": os.waitstatus_to_exitcode(code)})
            status.close()


def main():
    serve(int(sys.argv[1]))


if __name__ == "__main__":
    main()
