"""The tools themselves, and ``execute``: one call, never an exception for the
model's mistakes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from activities.gates import gate_extra_env
from activities.host import sandbox
from activities.host.files import write_atomic
from activities.host.git import GitError, git
from activities.host.proc import kill_stale, run_process
from activities.host.toolbox.arguments import parse_arguments
from activities.host.toolbox.confine import (
    encode,
    is_binary,
    read_bytes,
    real_path,
    resolve_path,
    split_lines,
    write_bytes,
)
from activities.host.toolbox.outcome import PolicyViolation, ToolError, ToolOutcome, clean, cut
from activities.host.toolbox.policy import _log_text, run_refusal
from activities.host.toolbox.schemas import (
    BINARY_SNIFF_BYTES,
    ERROR_CHARS,
    HIDDEN_ENV_PREFIXES,
    MAX_FILE_BYTES,
    MAX_LIST_FILES,
    MAX_MATCH_LINE_CHARS,
    MAX_SEARCH_MATCHES,
    SCHEMA_BY_NAME,
    SEARCH_TIMEOUT_S,
)
from loop.contracts import SandboxPolicy, ToolPolicy


@dataclass
class _Call:
    top: Path
    policy: ToolPolicy
    protected: list[str]
    log_dir: Path
    log_name: str
    journal: Path | None
    sandbox: SandboxPolicy = field(default_factory=SandboxPolicy)
    task_id: str = "tool"
    home: Path | None = None
    """LOOP_HOME (leases, hidden from the command); None: the log folder stands in."""
    agent_home: Path | None = None
    allow_hosts: tuple[str, ...] = ()
    hidden: tuple[Path, ...] = ()
    """Host folders covered besides LOOP_HOME (``SandboxRun.hidden``)."""
    environment: sandbox.Laid | None = None
    """The repository's environment, laid read-only into the tree (``SandboxRun``)."""

    @property
    def limit(self) -> int:
        return self.policy.output_limit

    def path(self, rel: str, *, write: bool = False) -> Path:
        return resolve_path(self.top, rel, write=write, protected=self.protected)

    def shown(self, path: Path) -> str:
        return path.relative_to(self.top).as_posix() or "."


async def _git_files(call: _Call, path: Path) -> list[str]:
    """Tracked and untracked, not ignored, files under ``path`` (root-relative, sorted)."""
    rel = call.shown(path)
    try:
        out = await git(
            [
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
                "--",
                f":(literal){rel}",
            ],
            call.top,
        )
    except GitError as e:
        raise ToolError(f"cannot list files: {e.message or e}") from None
    names = dict.fromkeys(n for n in out.split("\0") if n)
    # A tracked file deleted in the worktree is still in the index; show what is there.
    return sorted(n for n in names if os.path.lexists(call.top / n))


async def _list_files(call: _Call, args: dict[str, Any]) -> ToolOutcome:
    rel = args.get("path", ".")
    path = call.path(rel)
    if not path.exists():
        raise ToolError(f"no such directory: {rel}")
    if not path.is_dir():
        raise ToolError(f"{rel} is a file, not a directory; use read_file")
    files = await _git_files(call, path)
    where = call.shown(path)
    if not files:
        return ToolOutcome(text=f"no files under {where}")
    head = f"{len(files)} file(s) under {where}"
    body = "\n".join(files[:MAX_LIST_FILES])
    more = len(files) - MAX_LIST_FILES
    if more > 0:
        body += f"\n[{more} more not shown; list a subdirectory]"
    return ToolOutcome(text=cut(clean(f"{head}:\n{body}"), call.limit, hint="list a subdirectory"))


async def _read_file(call: _Call, args: dict[str, Any]) -> ToolOutcome:
    rel = args["path"]
    path = call.path(rel)
    data = await asyncio.to_thread(read_bytes, call.top, path, rel)
    if is_binary(data):
        raise ToolError(f"{rel} looks binary ({len(data)} bytes); not shown")
    lines = split_lines(data.decode("utf-8", "replace"))
    total = len(lines)
    start, end = args.get("start_line", 1), args.get("end_line")
    if start < 1 or (end is not None and end < 1):
        raise ToolError("start_line and end_line are 1-based: use numbers from 1")
    if end is not None and start > end:
        raise ToolError(f"start_line ({start}) is after end_line ({end})")
    if total == 0:
        return ToolOutcome(text=f"{rel} is empty")
    if start > total:
        raise ToolError(f"{rel} has {total} line(s); start_line {start} is past the end")
    end = total if end is None else min(end, total)
    width = len(str(end))
    numbered = "\n".join(
        f"{n:>{width}} | {lines[n - 1].removesuffix(chr(13))}" for n in range(start, end + 1)
    )
    head = f"{rel} (lines {start}-{end} of {total})"
    text = clean(f"{head}\n{numbered}")
    return ToolOutcome(text=cut(text, call.limit, hint="read further with start_line"))


_SEARCH_SCRIPT = r"""
import json, os, re, signal, stat, sys
req = json.load(open(sys.argv[1], encoding="utf-8"))
signal.alarm(req["timeout"])  # ends the child even if the worker that started it is gone
rx = re.compile(req["pattern"])
found = 0
for rel in req["files"]:
    try:
        fd = os.open(os.path.join(req["root"], rel), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        continue
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > req["max_bytes"]:
            continue
        data = f.read()
    if b"\0" in data[: req["sniff"]]:
        continue
    for n, line in enumerate(data.decode("utf-8", "replace").split("\n"), 1):
        if rx.search(line):
            print(json.dumps([rel, n, line.rstrip("\r")[: req["max_line"]]]))
            found += 1
            if found > req["max_matches"]:
                sys.exit(0)
"""
"""Runs in a child Python (``-I``, stdlib only): a pathological regex is stopped by
``run_process``'s timeout and group kill instead of pinning a worker thread forever."""


async def _search(call: _Call, args: dict[str, Any]) -> ToolOutcome:
    pattern, rel = args["pattern"], args.get("path", ".")
    try:
        re.compile(pattern)
    except re.error as e:
        raise ToolError(f"invalid regular expression {pattern!r}: {e}") from None
    path = call.path(rel)
    if path.is_dir():
        files = await _git_files(call, path)
    elif path.is_file():
        files = [call.shown(path)]
    else:
        raise ToolError(f"no such file or directory: {rel}")
    request = {
        "root": str(call.top),
        "pattern": pattern,
        "files": files,
        "max_matches": MAX_SEARCH_MATCHES,
        "max_bytes": MAX_FILE_BYTES,
        "max_line": MAX_MATCH_LINE_CHARS,
        "sniff": BINARY_SNIFF_BYTES,
        "timeout": int(SEARCH_TIMEOUT_S) + 5,
    }
    call.log_dir.mkdir(parents=True, exist_ok=True)
    req_file = call.log_dir / f"{call.log_name}.search.json"
    req_file.write_text(json.dumps(request))
    pid_file = call.log_dir / f"{call.log_name}.search.pid"
    kill_stale(pid_file)
    proc = await run_process(
        [sys.executable, "-I", "-c", _SEARCH_SCRIPT, str(req_file)],
        cwd=call.top,
        env=dict(os.environ),
        limit_s=SEARCH_TIMEOUT_S,
        log_path=call.log_dir / f"{call.log_name}.search.log",
        pid_file=pid_file,
    )
    if proc.timed_out:
        raise ToolError(
            f"search timed out after {SEARCH_TIMEOUT_S:.0f} s; simplify the pattern "
            "(nested repeats backtrack) or narrow the path"
        )
    if proc.exit_code != 0:
        raise ToolError(f"search failed (exit code {proc.exit_code}): {proc.output_tail[-300:]}")
    matches: list[str] = []
    for line in Path(proc.log_path).read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError, TypeError):
            file, n, text = json.loads(line)
            matches.append(f"{file}:{n}: {text}")
    where = call.shown(path)
    if not matches:
        return ToolOutcome(text=f"no match for {pattern!r} in {len(files)} file(s) under {where}")
    body = "\n".join(matches[:MAX_SEARCH_MATCHES])
    if len(matches) > MAX_SEARCH_MATCHES:
        body += f"\n[more than {MAX_SEARCH_MATCHES} matches; narrow the pattern or the path]"
    return ToolOutcome(text=cut(clean(body), call.limit, hint="narrow the pattern or the path"))


async def _write_file(call: _Call, args: dict[str, Any]) -> ToolOutcome:
    rel, content = args["path"], args["content"]
    path = call.path(rel, write=True)
    created = await asyncio.to_thread(write_bytes, call.top, path, rel, encode(content))
    verb = "created" if created else "overwrote"
    return ToolOutcome(
        text=f"{verb} {rel} ({len(content)} characters, {len(split_lines(content))} line(s))"
    )


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def _edit_file(call: _Call, args: dict[str, Any]) -> ToolOutcome:
    rel, old, new = args["path"], args["old"], args["new"]
    path = call.path(rel, write=True)
    if not old:
        raise ToolError("`old` is empty; give the exact text to replace, or use write_file")
    data = await asyncio.to_thread(read_bytes, call.top, path, rel)
    note = _read_journal(call.journal)
    if note.get("path") == str(path) and note.get("after") == _sha(data):
        return ToolOutcome(text=f"edited {rel} (the edit had already been applied)")
    content = data.decode("utf-8", "surrogateescape")
    count = content.count(old)
    if count == 0:
        hint = "read the file again and copy the exact text, whitespace and indentation included"
        if "\r\n" in content and "\r\n" not in old and "\n" in old:
            hint = "the file uses CRLF (\\r\\n) line endings; include them in `old`"
        raise ToolError(f"`old` was not found in {rel}; {hint}. Nothing was changed.")
    if count > 1:
        raise ToolError(
            f"`old` appears {count} times in {rel}; include more of the surrounding lines so "
            "that it appears exactly once. Nothing was changed."
        )
    at = content.index(old)
    updated = encode(content[:at] + new + content[at + len(old) :])
    _write_journal(call.journal, {"tool": "edit_file", "path": str(path), "after": _sha(updated)})
    await asyncio.to_thread(write_bytes, call.top, path, rel, updated)
    first = content.count("\n", 0, at) + 1
    was = f"line {first}" + (f"-{first + old.count(chr(10))}" if "\n" in old else "")
    return ToolOutcome(text=f"edited {rel}: replaced the text at {was} (1 occurrence)")


async def _run(call: _Call, args: dict[str, Any]) -> ToolOutcome:
    command: str = args["command"]
    refusal = run_refusal(command, call.policy)
    if refusal:
        raise ToolError(refusal)
    call.log_dir.mkdir(parents=True, exist_ok=True)
    log_path = call.log_dir / f"{call.log_name}.run.log"
    if _read_journal(call.journal):
        # A try before this one started the command and was lost with its worker.
        await sandbox.kill_leftovers(call.log_dir, f"{call.log_name}.run")
        output = _log_text(log_path, call.limit)
        return ToolOutcome.failure(
            "the worker stopped while this command was running, so it may have run in part "
            "or in whole; it was not started again. Check the state (files, output) before "
            "running it again.",
            f"output so far:\n{output}" if output else "",
        )
    _write_journal(call.journal, {"tool": "run", "command": command})
    policy = call.sandbox
    proc = await sandbox.run_sandboxed(
        sandbox.SandboxRun(
            argv=["bash", "-c", command],
            kind="tool",
            policy=policy,
            task_id=call.task_id,
            home=call.home or call.log_dir,
            tree=call.top,
            state_dir=call.log_dir,
            name=f"{call.log_name}.run",
            limit_s=call.policy.run_timeout,
            env=gate_extra_env(policy),
            agent_home=call.agent_home,
            protected=call.protected,
            allow_hosts=list(call.allow_hosts),
            drop_env=HIDDEN_ENV_PREFIXES,
            hidden=list(call.hidden),
            environment=call.environment,
        )
    )
    output = _log_text(log_path, call.limit) or "(no output)"
    if proc.timed_out:
        return ToolOutcome.failure(
            f"the command timed out after {call.policy.run_timeout} s and was stopped",
            output,
        )
    if proc.exit_code != 0:
        return ToolOutcome.failure(f"exit code {proc.exit_code}", output)
    return ToolOutcome(text=f"exit code 0\n{output}")


async def _finish(call: _Call, args: dict[str, Any]) -> ToolOutcome:
    return ToolOutcome(
        text="answer recorded; the task's checks will now run", finished=True, answer=args["answer"]
    )


_TOOLS: dict[str, Callable[[_Call, dict[str, Any]], Awaitable[ToolOutcome]]] = {
    "list_files": _list_files,
    "read_file": _read_file,
    "search": _search,
    "write_file": _write_file,
    "edit_file": _edit_file,
    "run": _run,
    "finish": _finish,
}
assert set(_TOOLS) == set(SCHEMA_BY_NAME), "every schema has a tool and every tool a schema"


def _read_journal(journal: Path | None) -> dict[str, Any]:
    if journal is None:
        return {}
    try:
        data = json.loads(journal.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_journal(journal: Path | None, note: dict[str, Any]) -> None:
    """Record, before a change is applied, what it will be (see the module docstring)."""
    if journal is not None:
        write_atomic(journal, json.dumps(note))


async def execute(
    name: str,
    arguments: str,
    root: Path,
    policy: ToolPolicy,
    protected: list[str],
    log_dir: Path,
    *,
    log_name: str = "tool",
    journal: Path | None = None,
    sandbox: SandboxPolicy | None = None,
    task_id: str = "tool",
    home: Path | None = None,
    agent_home: Path | None = None,
    allow_hosts: tuple[str, ...] = (),
    hidden: tuple[Path, ...] = (),
    environment: sandbox.Laid | None = None,
) -> ToolOutcome:
    """Run one tool call in the worktree ``root``; never raises for the model's mistakes.

    ``log_dir``/``log_name`` name the files a call keeps beside it (a command's log
    and pid file, a search's request); ``journal`` is the pending note that makes a
    retried ``edit_file`` or ``run`` safe (None: no retry protection, as in tests).
    ``run`` commands go through the task's ``sandbox`` (default: the default policy)
    under ``task_id``'s uid, with ``home`` (LOOP_HOME) covered, ``agent_home`` as HOME
    and ``allow_hosts`` (the model's endpoint) open through the egress proxy.
    Exceptions that escape are Loopwork's trouble, not the model's.
    """
    tool = _TOOLS.get(name)
    if tool is None:
        return ToolOutcome.failure(
            f"there is no tool named {name!r}; the tools are: {', '.join(_TOOLS)}"
        )
    call = _Call(
        top=real_path(root),
        policy=policy,
        protected=list(protected),
        log_dir=log_dir,
        log_name=log_name,
        journal=journal,
        sandbox=sandbox or SandboxPolicy(),
        task_id=task_id,
        home=home,
        agent_home=agent_home,
        allow_hosts=tuple(allow_hosts),
        hidden=tuple(hidden),
        environment=environment,
    )
    try:
        args = parse_arguments(name, arguments)
        return await tool(call, args)
    except PolicyViolation as e:
        reason = str(e)
        return ToolOutcome(
            text=f"error: refused, policy violation: {reason}. This ends the attempt.",
            ok=False,
            error=f"error: policy violation: {reason}"[:ERROR_CHARS],
            policy_violation=reason,
        )
    except ToolError as e:
        return ToolOutcome.failure(str(e))
