"""Loopwork's witness: the required tests run again, outside the runner, one process a file.

A ``run`` gate's verdict comes from records sent from inside the test process, where
the code under test runs too. The witness is a second, independent observation of
the tests the verdict requires (those failing at base, those of protected files): the
gate's command runs once more with this folder on ``PYTHONPATH``; its first test
process (``python -m pytest``, ``pytest``, ``python -m unittest``) never starts its
runner. Instead, before any code of the repository is imported, this module takes its
plan (which tests) and the channel's key, and forks one child per test file. A child
drops every trace of Loopwork and of the runner (the ``LOOP_*`` and ``PYTEST_*``
variables, this folder, this module), imports the file as pytest would, runs the
named tests with a small runner of its own (fixtures, parametrization, marks,
unittest cases) and writes each outcome, signed with a key of its own, to a pipe. The
parent has imported nothing of the repository: it checks each child's records and
exit, and only it holds the channel to the worker, which it closes in every child.

Code that behaves one way under pytest (a variable of the runner's, the reporter, the
runner's modules) and another way here is seen as two outcomes that disagree. What
this runner cannot run (a fixture it does not provide, a parametrization it cannot
match) is reported as not witnessed, with the reason. The runners are the modules
beside this one (``loopwork_witness_run`` and what it imports), imported by the child
only, then dropped with this folder before the test file is.

Standard library only, no syntax newer than Python 3.8: it runs on the gate's Python.
"""

import os
import sys

FD_VARIABLE = "LOOP_WITNESS_FD"
PLAN_VARIABLE = "LOOP_WITNESS_PLAN"
TEST_COMMANDS = ("pytest", "py.test", "unittest")
DROPPED = ("LOOP_", "PYTEST_", "_PYTEST")
KEY_BYTES = 32
NO_KEY = b"no-key"
WITNESS_MODULES = ("loopwork_witness_run", "loopwork_witness_collect", "loopwork_witness_capture")
"""This folder's other modules (the runners and what they read a test file with)."""


def _is_test_process(argv):
    args = list(argv[1:])
    if "-m" in args[:-1]:
        return args[args.index("-m") + 1] in TEST_COMMANDS
    script = next((a for a in args if not a.startswith("-")), "")
    return os.path.basename(script) in TEST_COMMANDS


def _start():
    if FD_VARIABLE not in os.environ:
        return
    argv = getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]
    if not _is_test_process(argv):
        return
    fd = os.environ.pop(FD_VARIABLE)
    plan_path = os.environ.pop(PLAN_VARIABLE, "")
    status = 1
    try:
        status = _witness(int(fd), plan_path, argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)  # the command's own runner never starts


# ------------------------------------------------------------------ the parent


def _witness(fd, plan_path, argv):
    import json

    os.set_blocking(fd, False)
    try:
        first = os.read(fd, 256)
    except BlockingIOError:
        os.write(fd, NO_KEY)
        return 1
    os.set_blocking(fd, True)
    session, _, key = first.partition(b":")
    channel = _Channel(fd, int(session), key)
    with open(plan_path, encoding="utf-8") as f:
        plan = json.load(f)
    channel.send({"t": "start", "runner": "witness", "version": sys.version.split()[0],
                  "root": plan.get("root", ""), "cwd": os.getcwd()})  # fmt: skip
    module_mode = "-m" in argv[1:]
    for file, ids in plan.get("files", []):
        for record in _run_file(plan, file, ids, fd, module_mode):
            channel.send(record)
    channel.send({"t": "end", "exit": 0})
    channel.flush()
    return 0


class _Channel:
    def __init__(self, fd, session, key):
        import hashlib
        import json

        self.fd = fd
        self.session = session
        self.mac = hashlib.blake2b(key=key, digest_size=32)
        self.encode = json.JSONEncoder(separators=(",", ":"), default=str).encode
        self.seq = 0
        self.pending = []

    def send(self, record):
        self.pending.append(record)
        if len(self.pending) >= 64 or record["t"] != "test":
            self.flush()

    def flush(self):
        if not self.pending:
            return
        body = self.encode({"s": self.session, "n": self.seq, "r": self.pending})
        body = body.encode("utf-8", "replace")
        self.seq += 1
        self.pending = []
        signer = self.mac.copy()
        signer.update(body)
        os.write(self.fd, signer.hexdigest().encode("ascii") + b" " + body)


def _run_file(plan, file, ids, channel_fd, module_mode):
    """Fork a child for one file's tests; its signed records, checked. Every id gets a
    record: a child that ends before it reported one leaves it an error."""
    import hashlib
    import json

    key = os.urandom(KEY_BYTES)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nothing of the parent's channel, and a pipe of its own
        status = 0
        try:
            os.close(channel_fd)
            os.close(read_end)
            _child(plan, file, ids, write_end, key, module_mode)
        except BaseException:
            status = 70
        finally:
            os._exit(status)
    os.close(write_end)
    data = b""
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, wait_status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(wait_status) if hasattr(os, "waitstatus_to_exitcode") else (
        wait_status >> 8)  # fmt: skip
    found, ended = {}, False
    for line in data.split(b"\n"):
        mac, _, body = line.partition(b" ")
        if not body:
            continue
        signer = hashlib.blake2b(key=key, digest_size=32)
        signer.update(body)
        if signer.hexdigest().encode("ascii") != mac:
            continue  # not the child's runner: written blind, or forged
        try:
            record = json.loads(body)
        except ValueError:
            continue
        if record.get("t") == "done":
            ended = True
        elif record.get("t") == "test" and record.get("id") in ids:
            found.setdefault(record["id"], record)
    records = []
    for test_id in ids:
        record = found.get(test_id)
        if record is None or not ended or code != 0:
            why = (
                f"the witness's process for {file} ended (exit code {code}) before it "
                "reported this test"
                if record is None or not ended
                else f"the witness's process for {file} exited with code {code}"
            )
            record = {"t": "test", "id": test_id, "o": "error", "m": why}
        record["f"] = file
        records.append(record)
    return records


# ------------------------------------------------------------------ the child


def _child(plan, file, ids, write_end, key, module_mode):
    import hashlib
    import json

    here = os.path.dirname(os.path.abspath(__file__))
    # The runners, from this folder, before the folder goes: the test sees neither.
    import loopwork_witness_run as run

    for name in list(os.environ):
        if name.startswith(DROPPED):
            del os.environ[name]
    path = os.environ.get("PYTHONPATH", "")
    kept = [p for p in path.split(os.pathsep) if p and os.path.abspath(p) != here]
    if kept:
        os.environ["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        os.environ.pop("PYTHONPATH", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if module_mode:
        sys.path.insert(0, os.getcwd())
    for name in ("sitecustomize", *WITNESS_MODULES):
        sys.modules.pop(name, None)
    sys.argv[:] = [os.path.join(os.getcwd(), file)]
    if hasattr(sys, "orig_argv"):
        sys.orig_argv = [sys.executable, sys.argv[0]]
    _chain(here)
    encode = json.JSONEncoder(separators=(",", ":"), default=str).encode
    out = os.fdopen(write_end, "wb", buffering=0)

    def emit(record):
        body = encode(record).encode("utf-8", "replace")
        signer = hashlib.blake2b(key=key, digest_size=32)
        signer.update(body)
        out.write(signer.hexdigest().encode("ascii") + b" " + body + b"\n")

    runner = run._UnittestRunner if plan.get("runner") == "unittest" else run._PytestRunner
    runner(plan, file, emit).run(ids)
    emit({"t": "done"})
    out.close()


def _chain(here):
    """Run the ``sitecustomize.py`` this one shadows (a distribution's), as ``site`` would."""
    for folder in sys.path:
        path = os.path.join(folder or ".", "sitecustomize.py")
        if os.path.abspath(folder or ".") != here and os.path.isfile(path):
            with open(path, "rb") as f:
                code = compile(f.read(), path, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": path})
            return


_start()
