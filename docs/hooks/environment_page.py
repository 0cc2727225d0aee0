"""The environment variables page: each variable of ours the code reads or sets for a
process it starts, found in the code; its meaning from ``Settings`` or the tables here."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from pathlib import Path

from generated import (
    DocsError,
    attribute_docstrings,
    code_files,
    constants_of,
    markdown_text,
    rel,
    text_of,
)

VARIABLE = re.compile(r"^[A-Z][A-Z0-9_]*[A-Z0-9]$")
OURS = ("LOOP_", "OPENAI_", "GITHUB_", "ANTHROPIC_")
"""Prefixes of the variables this reference covers: Loopwork's own and the endpoints'
and services' it calls. Temporal's connection variables are Temporal's (see its list
below); general ones (PATH, COLUMNS, PYTHONPATH) are not Loopwork's to document."""


def environment_in_code() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(read, set): each variable of ours that the code reads from its environment, or
    sets for a process it starts, with the files that do so."""
    read: dict[str, set[str]] = {}
    wrote: dict[str, set[str]] = {}
    for path in code_files():
        tree = ast.parse(path.read_text())
        constants = constants_of(tree)
        for node in ast.walk(tree):
            name, into = None, read
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "getenv")
                and node.args
                and _is_environment(node.func.value)
            ):
                name = text_of(node.args[0], constants)
            elif isinstance(node, ast.Subscript) and _is_environment(node.value):
                name = text_of(node.slice, constants)
                into = wrote if isinstance(node.ctx, ast.Store) else read
            elif isinstance(node, ast.Compare) and len(node.comparators) == 1:
                if isinstance(node.ops[0], ast.In | ast.NotIn) and _is_environment(
                    node.comparators[0]
                ):
                    name = text_of(node.left, constants)
            elif isinstance(node, ast.Dict):
                for key in node.keys:
                    text = key and text_of(key, constants)
                    if text and VARIABLE.match(text) and text.startswith(OURS):
                        wrote.setdefault(text, set()).add(rel(path))
            if name and VARIABLE.match(name) and name.startswith(OURS):
                into.setdefault(name, set()).add(rel(path))
        for const, value in constants.items():
            # ``KEY_ENV = "LOOP_ANSWER_KEY_FILE"``: a name kept to be read.
            if const.endswith(("_ENV", "_VARIABLE")) and value.startswith(OURS):
                read.setdefault(value, set()).add(rel(path))
    for name in wrote:
        read.pop(name, None)
    return read, wrote


def _is_environment(node: ast.AST) -> bool:
    """``os.environ``, ``environ``, ``env`` (a mapping handed in for os.environ, or one
    being built for a child process), ``os`` (``os.getenv``)."""
    if isinstance(node, ast.Attribute):
        return node.attr in ("environ", "env")
    return isinstance(node, ast.Name) and node.id in ("environ", "env", "os")


def settings_variables() -> dict[str, tuple[str, str]]:
    """Variables ``Settings.from_env`` reads: name → (default, meaning from the field)."""
    from loop.settings import Settings

    source = textwrap.dedent(inspect.getsource(Settings.from_env))
    module = ast.parse(inspect.getsource(inspect.getmodule(Settings)))  # type: ignore[arg-type]
    constants = constants_of(module)
    import loop.hardened.answers as answers

    constants.update({k: v for k, v in vars(answers).items() if isinstance(v, str)})
    docs = attribute_docstrings(Settings)
    defaults = Settings.from_env({})
    found: dict[str, tuple[str, str]] = {}
    tree = ast.parse(source)
    variable_of = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            names = [text_of(n, constants) for n in ast.walk(node.value)]
            names = [n for n in names if n and VARIABLE.match(n)]
            if names and node.targets[0].id == "home":
                variable_of["home"] = names[0]
        if isinstance(node, ast.keyword) and node.arg:
            names = [text_of(n, constants) for n in ast.walk(node.value)]
            names = [n for n in names if n and VARIABLE.match(n)]
            if names:
                variable_of[node.arg] = names[0]
    for field, variable in variable_of.items():
        if field not in docs:
            raise DocsError(f"Settings.{field} ({variable}) has no docstring (loop/settings.py)")
        value = getattr(defaults, field)
        declared = Settings.model_fields[field].default
        if isinstance(value, Path):
            default = f"`./{value.relative_to(Path.cwd())}`"
        elif value in (None, "") or (not declared and declared is not None and value):
            default = "unset" if value in (None, "") else "see meaning"
        else:
            default = f"`{value:g}`" if isinstance(value, float) else f"`{value}`"
        # A docstring may open with the variable's name ("LOOP_HOME: ..."): the row says it.
        meaning = re.sub(rf"^{variable}: ", "", docs[field])
        found[variable] = (default, meaning[:1].upper() + meaning[1:])
    return found


ENVIRONMENT = {
    "LOOP_CODEC_KEY_FILE": (
        "unset",
        "A file holding a 32-byte key: every payload is sealed with AES-GCM before it "
        "reaches the Temporal server (worker, CLI and review page alike).",
    ),
    "LOOP_CODEC_TOKEN": ("unset", "The bearer token `loop codec-server` requires."),
    "LOOP_UI_TOKEN": (
        "unset",
        "`NAME:SECRET[,NAME:SECRET…]`: who may use the review page (`loop ui`); "
        "required with `--bind` beyond loopback, a secret has at least 16 characters.",
    ),
    "LOOP_GITHUB_WEBHOOK_SECRET_FILE": (
        "unset",
        "A file holding the secret of the repository's GitHub webhook: with it (and "
        "`--sources`), `loop ui` takes signed deliveries at `POST /hooks/github` "
        "([On GitHub](../guides/github.md)); at least 16 characters.",
    ),
    "LOOP_HOOKS_TOKEN_FILE": (
        "unset",
        "A file holding the bearer token of `POST /hooks/tasks`: with it (and `--sources`), "
        "`loop ui` starts a task from a tracker's or an alert's JSON body of goal-level "
        "fields ([Triage and schedules](../guides/triage.md#from-any-trackers-webhook)); at "
        "least 16 characters.",
    ),
    "LOOP_SLACK_SIGNING_SECRET_FILE": (
        "unset",
        "A file holding the Slack app's Signing Secret: with it (and "
        "`LOOP_SLACK_BOT_TOKEN_FILE`), `loop ui` takes the buttons and modals of Loopwork's "
        "Slack messages at `POST /hooks/slack`, each request's signature and 5-minute "
        "timestamp checked ([In Slack](../guides/slack.md)).",
    ),
    "LOOP_SLACK_ANSWERERS": (
        "unset: anyone in the channel",
        "Comma-separated Slack member ids (`U012ABCDEF,U034GHIJKL`) whose presses in Slack "
        "answer tasks; anyone else's press changes nothing and they are told why. A value "
        "that is not member ids stops `loop ui` at start (exit 2) "
        "([In Slack](../guides/slack.md#who-may-answer)).",
    ),
    "LOOP_UI_URL": (
        "the Temporal address's port + 1000",
        "The Temporal UI used in printed links.",
    ),
    "LOOP_BWRAP": ("`bwrap` on `PATH`", "Another bubblewrap binary for the strict sandbox."),
    "OPENAI_API_KEY": (
        "unset",
        "The key of the `openai` backend and of `llm_review` gates, read by the worker; it "
        "never enters a task file, a payload, a log or a sandbox. Optional for an endpoint "
        "on loopback.",
    ),
    "OPENAI_BASE_URL": (
        "OpenAI's",
        "The endpoint of the `openai` backend and `llm_review` when the task file names "
        "none (`agent.base_url`).",
    ),
    "GITHUB_TOKEN": (
        "unset",
        "`finalize.pull_request` opens the pull request on GitHub with this token; a "
        "`github` triage source reads issues with it (or with the variable its `token_env` "
        "names), in the worker's environment.",
    ),
    "GITHUB_API_URL": ("`https://api.github.com`", "The GitHub API that token is sent to."),
}
"""What a variable read outside ``Settings`` means: (default, meaning)."""

ENVIRONMENT_SET = {
    "LOOP_TASK_ID": "The task id (agent protocol).",
    "LOOP_ATTEMPT": "The attempt number, from 1 (agent protocol).",
    "LOOP_PROMPT_FILE": "The attempt's prompt, Markdown (agent protocol).",
    "LOOP_FEEDBACK_FILE": (
        "The previous failed verdict as JSON; unset on attempt 1 (agent protocol)."
    ),
    "LOOP_OUTPUT_FILE": "Where the agent may write its final answer (agent protocol).",
    "LOOP_USAGE_FILE": "Where the agent may write what it spent (agent protocol).",
    "LOOP_REPORT_FD": (
        "A `run` gate's test process: the descriptor of the report channel Loopwork's "
        "reporter claims at start."
    ),
    "LOOP_REPORT_DIR": (
        "A `run` gate's command: an empty folder for its JUnit XML (`report: {junit: …}`)."
    ),
    "LOOP_REPORT_ONLY": (
        "A `run` gate's test process, rerunning tests that failed: a file of the test ids "
        "to run; the reporter deselects the rest."
    ),
    "LOOP_WITNESS_FD": (
        "The witness run's test process: the descriptor of its report channel (taken "
        "before any code of the repository runs)."
    ),
    "LOOP_WITNESS_PLAN": (
        "The witness run's test process: the file naming the tests to run again, by file."
    ),
    "LOOP_EGRESS_DIR": "The egress proxy's process: the folder of its tickets and log.",
}
"""What a variable Loopwork sets for a process it starts means."""


def environment() -> str:
    read, wrote = environment_in_code()
    from_settings = settings_variables()
    for name in from_settings:
        read.setdefault(name, set()).add("loop/settings.py")
    twice = sorted(set(from_settings) & set(ENVIRONMENT))
    if twice:
        raise DocsError(f"explained by Settings and in docs/hooks/environment_page.py too: {twice}")
    missing = sorted(set(read) - set(from_settings) - set(ENVIRONMENT))
    missing += sorted(set(wrote) - set(ENVIRONMENT_SET))
    if missing:
        raise DocsError(f"variables read or set in the code without a meaning: {missing}")
    stale = sorted((set(ENVIRONMENT) - set(read)) | (set(ENVIRONMENT_SET) - set(wrote)))
    if stale:
        raise DocsError(
            f"docs/hooks/environment_page.py explains variables the code lacks: {stale}"
        )
    out = [
        "## Read by the worker, the CLI and the review page\n",
        "| variable | default | meaning | read in |",
        "| --- | --- | --- | --- |",
    ]
    for name in sorted(read):
        default, meaning = from_settings.get(name) or ENVIRONMENT[name]
        where = "`loop/settings.py`" if name in from_settings else ""
        where = where or ", ".join(f"`{p}`" for p in sorted(read[name]))
        out.append(f"| `{name}` | {default} | {markdown_text(meaning)} | {where} |")
    out += [
        "",
        "## Set by Loopwork for the processes it starts\n",
        "| variable | for | set in |",
        "| --- | --- | --- |",
    ]
    for name in sorted(wrote):
        where = ", ".join(f"`{p}`" for p in sorted(wrote[name]))
        out.append(f"| `{name}` | {markdown_text(ENVIRONMENT_SET[name])} | {where} |")
    return "\n".join(out) + "\n"
