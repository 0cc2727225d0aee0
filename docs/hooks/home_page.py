"""The ``LOOP_HOME`` page: each top-level entry the code makes under it, found in the code,
with what it holds from the table here."""

from __future__ import annotations

import ast
import types

from generated import (
    DocsError,
    code_files,
    constants_of,
    rel,
    text_of,
)


def home_entries() -> dict[str, set[str]]:
    """Top-level names the code makes under ``LOOP_HOME`` (``home / "runs"`` and the
    like), with the files that name them."""
    found: dict[str, set[str]] = {}
    for path in code_files():
        tree = ast.parse(path.read_text())
        constants = constants_of(tree)
        imported = _imported_constants(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                if _is_home(node.left):
                    name = text_of(node.right, {**imported, **constants})
                    if name is None and isinstance(node.right, ast.Attribute):
                        name = imported.get(ast.unparse(node.right))
                    if name:
                        found.setdefault(name, set()).add(rel(path))
    return found


def _is_home(node: ast.AST) -> bool:
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Path" and node.args:
        node = node.args[0]
    if isinstance(node, ast.Name):
        return node.id == "home"
    return isinstance(node, ast.Attribute) and node.attr == "home"


def _imported_constants(tree: ast.Module) -> dict[str, str]:
    """String constants of the Loopwork modules this one imports, by the name used here."""
    import importlib

    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module.split(".", 1)[0] not in ("loop", "activities"):
                continue  # not Loopwork's (the witness's own modules import by bare name)
            module = importlib.import_module(node.module)
            for alias in node.names:
                value = getattr(module, alias.name, None)
                local = alias.asname or alias.name
                if isinstance(value, str):
                    found[local] = value
                elif isinstance(value, types.ModuleType):
                    for k, v in vars(value).items():
                        if isinstance(v, str) and k.isupper():
                            found[f"{local}.{k}"] = v
    return found


LOOP_HOME = {
    "temporal.db": [
        (
            "temporal.db",
            "the embedded server's SQLite store (0600; with its `-wal` and `-shm` files)",
        ),
        ("temporal.db.lock", "held by the server that owns the database: one server per database"),
    ],
    "temporal-server.log": [
        (
            "temporal-server.log",
            "the embedded server's log (`loop dev`, `worker --dev`, `loop demo`)",
        ),
    ],
    "answer.key": [
        (
            "answer.key",
            "the key answers are signed with, unless `LOOP_ANSWER_KEY_FILE` names another "
            "(made by `loop dev` and `loop demo`; no sandbox can read it)",
        ),
    ],
    "locks": [
        ("locks/", "one lock file per repository: worktree, merge and checkout changes take it")
    ],
    "repos": [("repos/<hash>.git", "this host's bare mirror of a repository at a URL")],
    "workers": [
        (
            "workers/<pid>.json",
            "each worker process's lease: the steps it runs, failed at "
            "once by the next worker of the host if it dies",
        )
    ],
    "envs": [
        (
            "envs/<key>/",
            "a repository's environment (`environment:`): what its setup made at its `paths` "
            "(`tree/`), the setup's HOME without caches (`home/`), `meta.json` (written last), "
            "the tasks holding it (`users/`) and when it was last used (`used`); bound "
            "read-only into every sandboxed run of a task on that key",
        ),
        ("envs/<key>.lock", "held while that key is built: one build per key on the host"),
    ],
    "base": [
        (
            "base/<repo hash>/<gate>-<key>/",
            "a gate's run at a base commit (its report and log), copied by later tasks of "
            "the repository on that commit, gate and sandbox for six hours instead of "
            "running it again",
        )
    ],
    "stores": [
        (
            "stores/<hash>.git",
            "a repository's store of base history: every task's base "
            "commit, nothing else; each task's clone borrows its objects (read-only to sandboxes)",
        )
    ],
    "worktrees": [
        (
            "worktrees/<id>/",
            "the task's worktree: a clone of its own with one branch, "
            "`loop/<id>`, handed over to the repository when committed; a dirty worktree is "
            "never deleted (a task's candidate's: `worktrees/<id>+<name>/`, on "
            "`loop/<id>/<name>`, its run folder `runs/<id>+<name>/`)",
        )
    ],
    "pools": [
        (
            "pools/<id>-<run>.jsonl",
            "a task's budget across its candidates: one line per model call (or per "
            "attempt, for an agent that reports its usage) and the candidate chosen, read "
            "before each call; removed when the task closes its last candidate",
        )
    ],
    "runs": [
        (
            "runs/<id>.json",
            "the trace: state, attempts (verdict per gate with evidence, agent claim, "
            "usage), final evidence, branch, commit, timings, escalations, `final_action`, "
            "`spec_hash`",
        ),
        (
            "runs/<id>/",
            "brief, per-attempt prompt, feedback, claim, agent and gate logs, pid and state "
            "files, the base's test report (`base/`), `workspace.json`; the task file and "
            "workspace its steps were sent once (`context-<digest>.json`) and each verdict "
            "(`attempt-N/verdict.json`), which the next steps read; model and tool steps; "
            "each attempt's model calls through the gateway (`calls.jsonl`, and `call-NNNN.log` "
            "with `agent.transcript`); the lock the running try of an attempt holds "
            "(`attempt-N/owner.lock`) and the result of the try that closed it "
            "(`attempt-N/made.json`), for a retry of that step (the worker's)",
        ),
        (
            "runs/<id>/attempt-N/agent/",
            "the agent's own folder: its output and usage files (its task uid's)",
        ),
        (
            "runs/<id>/home/",
            "the agent's HOME while its task runs (its task uid's; removed when the task ends)",
        ),
    ],
    "notes.md": [
        (
            "notes.md",
            "the progress file: per task, what was done, failed approaches, test "
            "results, limitations, last stable commit (replaced under `notes.md.lock`)",
        )
    ],
    "inbox.jsonl": [
        ("inbox.jsonl", "one JSON line per escalation (appended under `inbox.jsonl.lock`)")
    ],
    "memory.json": [
        (
            "memory.json",
            "what tasks learned per repository: commands, facts, failure "
            "patterns (replaced under `memory.json.lock`)",
        )
    ],
    "prices.json": [
        (
            "prices.json",
            "your model prices (USD per 1M tokens) over the built-in table: "
            '`{"my-model": {"input": 0.5, "output": 1.5}}`',
        )
    ],
    "services": [
        (
            "services/",
            "where the review page and the codec server say they listen, so the "
            "egress proxy refuses those ports",
        )
    ],
    "reporter": [
        (
            "reporter/<hash>/",
            "the test reporter put on a `run` gate's `PYTHONPATH`, shown read-only to sandboxes",
        )
    ],
    "witness": [
        (
            "witness/<hash>/",
            "the second observation's runner, put on the witness run's `PYTHONPATH`, shown "
            "read-only to sandboxes",
        )
    ],
    "demo": [("demo/", "`loop demo`'s repository and scripted agent")],
    "eval-results.json": [("eval-results.json", "the latest harness comparisons (`loop eval`)")],
    "eval": [("eval/<suite>/<case>/", "repositories snapshotted from eval case sources")],
    "mine": [
        (
            "mine/<suite>/",
            "`loop eval mine`'s bare clone of the repository it mines, and each commit's "
            "checkouts while its tests run",
        )
    ],
    "triage": [
        ("triage/ci-<source>/", "a `ci` source's log and the checkout it ran in"),
        ("triage/github-<source>.json", "a `github` source's pages and their ETags, between polls"),
    ],
}
"""What each top-level entry of ``LOOP_HOME`` holds, with the paths below it."""


def loop_home() -> str:
    found = home_entries()
    missing = sorted(set(found) - set(LOOP_HOME))
    if missing:
        where = {m: sorted(found[m]) for m in missing}
        raise DocsError(f"LOOP_HOME entries the code makes without a meaning: {where}")
    stale = sorted(set(LOOP_HOME) - set(found))
    if stale:
        raise DocsError(
            f"docs/hooks/home_page.py explains LOOP_HOME entries the code lacks: {stale}"
        )
    out = ["| path | what | named in |", "| --- | --- | --- |"]
    for entry in sorted(
        LOOP_HOME, key=lambda e: (e.startswith(("eval", "demo", "triage", "mine")), e)
    ):
        where = ", ".join(f"`{p}`" for p in sorted(found[entry]))
        for i, (path, what) in enumerate(LOOP_HOME[entry]):
            out.append(f"| `{path}` | {what} | {where if i == 0 else ''} |")
    return "\n".join(out) + "\n"
