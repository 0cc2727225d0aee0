"""The reference pages, generated from the code each time the site is built.

mkdocs loads this file as a hook (``hooks:`` in ``mkdocs.yml``). A page asks for a
generated part with a marker line, ``<!-- generated: NAME -->``, which
``on_page_markdown`` replaces with what ``GENERATORS[NAME]`` returns. So the field
lists, the CLI, the environment variables, the exit codes, the ``LOOP_HOME`` layout and
the workflow patches cannot drift from the code: they are read from it.

Where the code says what something means (a field's attribute docstring, a command's
help, a ``Settings`` field), that text is used. Where it does not (a variable read deep
in an activity, a file an activity writes under ``LOOP_HOME``), the names are still
found in the code, and the meaning comes from the tables below; a name found without a
meaning, or a meaning left for a name the code no longer has, fails the build. That
way a new variable or file cannot ship undocumented, and a removed one does not linger.

``tests/unit/test_docs.py`` calls the same functions, so the checks also run as a test.
"""

from __future__ import annotations

import ast
import enum
import inspect
import json
import re
import textwrap
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import annotated_types
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[2]
"""The project's folder: the code this file reads lives there."""
CODE = ("loop", "activities", "workflows", "worker.py")
MARKER = re.compile(r"^<!-- generated: ([a-z-]+)\b[^>]*-->$", re.MULTILINE)


class DocsError(Exception):
    """The code and the documentation disagree; the message says where."""


# -- pydantic models: the files people write ------------------------------------------


def attribute_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """Each field's attribute docstring (the string right after it), along the MRO.

    The contract models do not set pydantic's ``use_attribute_docstrings`` (their
    ``description`` stays empty), so the docstrings are read from the source, as
    pydantic itself would."""
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0]
        assert isinstance(body, ast.ClassDef)
        for node, after in zip(body.body, [*body.body[1:], None], strict=True):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                found[node.target.id] = inspect.cleandoc(after.value.value)
    return found


def markdown_text(doc: str) -> str:
    """A docstring as one line of a Markdown table cell."""
    text = " ".join(doc.split()).replace("``", "`")
    return text.replace("|", "\\|")


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _anchor(path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-") or "top"


def _literal(value: Any) -> str:
    if isinstance(value, enum.Enum):
        value = value.value
    return f"`{json.dumps(value)}`" if not isinstance(value, str) else f'`"{value}"`'


def type_text(annotation: Any, anchors: dict[type[BaseModel], str]) -> str:
    """A field's type for a person: ``"a"`` \\| ``"b"``, list of …, a link to a model."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is type(None):
        return "`null`"
    if origin is typing.Annotated:
        return type_text(args[0], anchors)
    if origin is typing.Literal:
        return " \\| ".join(_literal(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        kinds = [m for m in _models_in(annotation) if isinstance(m.__dict__.get("KIND"), str)]
        if kinds and len(kinds) == len(args):
            return "gates: " + ", ".join(f"[`{m.KIND}`](#{anchors[m]})" for m in kinds)  # type: ignore[attr-defined]
        return " or ".join(type_text(a, anchors) for a in args)
    if origin is list:
        return f"list of {type_text(args[0], anchors)}"
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " \\| ".join(_literal(m) for m in annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{anchors[annotation]})"
    simple = {str: "string", int: "integer", float: "number", bool: "boolean", object: "any"}
    if annotation in simple:
        return simple[annotation]
    raise DocsError(f"no way to show the type {annotation!r}")


def constraints_text(field: FieldInfo) -> str:
    said = []
    for m in field.metadata:
        for kind, word in (
            (annotated_types.Ge, "≥"),
            (annotated_types.Gt, ">"),
            (annotated_types.Le, "≤"),
            (annotated_types.Lt, "<"),
        ):
            if isinstance(m, kind):
                said.append(f"{word} {getattr(m, kind.__name__.lower())}")
        if isinstance(m, annotated_types.MinLen) and m.min_length:
            said.append(f"at least {m.min_length} long")
        if isinstance(m, annotated_types.MaxLen):
            said.append(f"at most {m.max_length:,} long")
        pattern = getattr(m, "pattern", None)
        if isinstance(pattern, str):
            said.append(f"matches `{pattern}`")
    return ", ".join(said)


def default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "**required**"
    value = field.default_factory() if field.default_factory else field.default  # type: ignore[call-arg]
    if value is PydanticUndefined:
        return "**required**"
    if isinstance(value, BaseModel):
        return "its defaults"
    if isinstance(value, enum.Enum):
        value = value.value
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def sections(root: type[BaseModel], title: str) -> list[tuple[str, type[BaseModel]]]:
    """(key path, model) of ``root`` and every model under it, each once, breadth first."""
    found: list[tuple[str, type[BaseModel]]] = [(title, root)]
    seen = {root}
    queue = [(title, root)]
    while queue:
        path, model = queue.pop(0)
        for name, field in model.model_fields.items():
            models = _models_in(field.annotation)
            many = typing.get_origin(field.annotation) is list
            key = f"{name}[]" if many else name
            key = key if path == title else f"{path}.{key}"
            for sub in models:
                if sub in seen:
                    continue
                seen.add(sub)
                kind = sub.model_fields.get("kind")
                sub_key = key
                if len(models) > 1 and isinstance(sub.__dict__.get("KIND"), str):
                    # A gate kind: named by the one key it gives, not by a ``kind:``.
                    sub_key = f"{key} ({sub.__dict__['KIND']})"
                elif len(models) > 1 and kind is not None:
                    sub_key = f"{key} kind: {typing.get_args(kind.annotation)[0]}"
                found.append((sub_key, sub))
                queue.append((sub_key, sub))
    return found


def field_rows(model: type[BaseModel]) -> Iterator[tuple[str, FieldInfo, str]]:
    """(name, field, docstring) of every field, in the model's order. A discriminator
    (``kind: Literal["ci"]``, one value, required) says what it is by itself."""
    docs = attribute_docstrings(model)
    for name, field in model.model_fields.items():
        doc = docs.get(name, "")
        values = typing.get_args(field.annotation)
        if (
            not doc
            and field.is_required()
            and typing.get_origin(field.annotation) is typing.Literal
        ):
            if len(values) == 1:
                doc = f"Always `{values[0]}`: selects this kind."
        yield name, field, doc


def undocumented(root: type[BaseModel]) -> list[str]:
    """Fields under ``root`` that have no attribute docstring (``Model.field``)."""
    return [
        f"{model.__name__}.{name}"
        for _, model in sections(root, root.__name__)
        for name, _, doc in field_rows(model)
        if not doc.strip()
    ]


def model_reference(root: type[BaseModel], title: str) -> str:
    """One section per model under ``root``: its docstring, then a table of its keys."""
    found = sections(root, title)
    anchors = {model: _anchor(path) for path, model in found}
    out = []
    grouped: set[str] = set()
    for path, model in found:
        kind = model.__dict__.get("KIND")
        if isinstance(kind, str) and path.split(" (")[0] not in grouped:
            out.append(gate_kinds(path.split(" (")[0], found, anchors))
            grouped.add(path.split(" (")[0])
        out.append(f"## `{path}` {{#{anchors[model]}}}\n")
        intro = model.__dict__.get("__doc__")
        if isinstance(model.__dict__.get("KIND"), str):
            intro = inspect.getmodule(model).__doc__  # type: ignore[union-attr]
        if intro:
            out.append(markdown_text(inspect.cleandoc(intro).split("\n\n")[0]) + "\n")
        example = model.__dict__.get("EXAMPLE")
        if isinstance(example, dict):
            written = yaml.safe_dump({"verify": [example]}, sort_keys=False, width=88)
            out.append(f"```yaml\n{written}```\n")
        out.append("| key | type | default | meaning |")
        out.append("| --- | --- | --- | --- |")
        for name, field, doc in field_rows(model):
            if not doc.strip():
                raise DocsError(f"{model.__name__}.{name} has no docstring (loop/contracts)")
            kind = type_text(field.annotation, anchors)
            limits = constraints_text(field)
            kind = f"{kind}, {limits}" if limits else kind
            out.append(f"| `{name}` | {kind} | {default_text(field)} | {markdown_text(doc)} |")
        out.append("")
    return "\n".join(out)


def gate_kinds(
    key: str, found: list[tuple[str, type[BaseModel]]], anchors: dict[type[BaseModel], str]
) -> str:
    """The section above the gate kinds: which kinds there are, each named by the one key
    a gate gives, with the modules that make it (``loop.contracts.gates.KINDS``)."""
    from loop.contracts.gates import KINDS

    listed = {m for _, m in found}
    missing = [k.KIND for k in KINDS if k not in listed]
    if missing:
        raise DocsError(f"gate kinds in KINDS but not under verify: {missing}")
    out = [
        f"## `{key}` {{#{_anchor(key)}}}\n",
        "Each gate is one of these kinds, named by the one key it gives besides `name` "
        "(a gate with none of them, or two, is refused):\n",
        "| kind | model | checked by |",
        "| --- | --- | --- |",
    ]
    for kind in KINDS:
        module = kind.__module__.rsplit(".", 1)[-1]
        where = f"`activities/gates/{module}.py`" if kind.CHECKED_IN_VERIFY else "the review step"
        out.append(
            f"| [`{kind.KIND}`](#{anchors[kind]}) | `{kind.__module__}.{kind.__name__}` | {where} |"
        )
    return "\n".join(out) + "\n"


def task_file() -> str:
    from loop.contracts.task import TaskSpec

    return model_reference(TaskSpec, "task file")


def sources_file() -> str:
    from loop.contracts.triage import TriageSources

    return model_reference(TriageSources, "sources file")


def eval_files() -> str:
    from loop.contracts.eval import Harness, Suite

    return model_reference(Suite, "suite file") + "\n" + model_reference(Harness, "harness file")


# -- the CLI ---------------------------------------------------------------------------


def commands() -> list[tuple[str, Any, Any]]:
    """(``loop …`` path, click command, its context) of every command, groups included."""
    import typer

    from loop.cli.app import app

    root = typer.main.get_command(app)
    found = []

    def walk(cmd: Any, ctx: Any, path: str) -> None:
        found.append((path, cmd, ctx))
        for name in getattr(cmd, "list_commands", lambda _: [])(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                walk(sub, typer.Context(sub, info_name=name, parent=ctx), f"{path} {name}")

    walk(root, typer.Context(root, info_name="loop"), "loop")
    return found


def cli() -> str:
    out = []
    for path, cmd, ctx in commands():
        depth = "##" if path.count(" ") <= 1 else "###"
        out.append(f"{depth} `{path}` {{#{_anchor(path)}}}\n")
        if cmd.help:
            out.append(inspect.cleandoc(cmd.help).replace("\n", " ") + "\n")
        usage = cmd.get_usage(ctx).removeprefix("Usage: ")
        usage = re.sub(r"\{(\w+)\}", lambda m: m.group(1).upper(), usage)
        if path == "loop":
            usage = "loop [--address ADDRESS] [--namespace NAMESPACE] COMMAND [ARGS]..."
        out.append(f"```\n{usage}\n```\n")
        helper = cmd.get_help_option(ctx)
        records = [
            p.get_help_record(ctx)
            for p in cmd.params
            if not getattr(p, "hidden", False) and p is not helper
        ]
        rows = [r for r in records if r]
        if rows:
            out.append("| argument or option | meaning |")
            out.append("| --- | --- |")
            for decl, help_text in rows:
                out.append(f"| `{decl}` | {markdown_text(help_text or '')} |")
            out.append("")
        subs = [p for p, _, _ in commands() if p.startswith(path + " ") and p != path]
        if path != "loop" and subs:
            out.append("Commands: " + ", ".join(f"[`{s}`](#{_anchor(s)})" for s in subs) + ".\n")
    return "\n".join(out)


# -- reading the code ------------------------------------------------------------------


def code_files() -> Iterator[Path]:
    for name in CODE:
        path = ROOT / name
        yield from sorted(path.rglob("*.py")) if path.is_dir() else [path]


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "text"`` assignments."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    found[target.id] = node.value.value
    return found


def _text(node: ast.AST, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# -- environment variables ---------------------------------------------------------------

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
        constants = _constants(tree)
        for node in ast.walk(tree):
            name, into = None, read
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "getenv")
                and node.args
                and _is_environment(node.func.value)
            ):
                name = _text(node.args[0], constants)
            elif isinstance(node, ast.Subscript) and _is_environment(node.value):
                name = _text(node.slice, constants)
                into = wrote if isinstance(node.ctx, ast.Store) else read
            elif isinstance(node, ast.Compare) and len(node.comparators) == 1:
                if isinstance(node.ops[0], ast.In | ast.NotIn) and _is_environment(
                    node.comparators[0]
                ):
                    name = _text(node.left, constants)
            elif isinstance(node, ast.Dict):
                for key in node.keys:
                    text = key and _text(key, constants)
                    if text and VARIABLE.match(text) and text.startswith(OURS):
                        wrote.setdefault(text, set()).add(_rel(path))
            if name and VARIABLE.match(name) and name.startswith(OURS):
                into.setdefault(name, set()).add(_rel(path))
        for const, value in constants.items():
            # ``KEY_ENV = "LOOP_ANSWER_KEY_FILE"``: a name kept to be read.
            if const.endswith(("_ENV", "_VARIABLE")) and value.startswith(OURS):
                read.setdefault(value, set()).add(_rel(path))
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
    constants = _constants(module)
    import loop.hardened.answers as answers

    constants.update({k: v for k, v in vars(answers).items() if isinstance(v, str)})
    docs = attribute_docstrings(Settings)
    defaults = Settings.from_env({})
    found: dict[str, tuple[str, str]] = {}
    tree = ast.parse(source)
    variable_of = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            names = [_text(n, constants) for n in ast.walk(node.value)]
            names = [n for n in names if n and VARIABLE.match(n)]
            if names and node.targets[0].id == "home":
                variable_of["home"] = names[0]
        if isinstance(node, ast.keyword) and node.arg:
            names = [_text(n, constants) for n in ast.walk(node.value)]
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
        raise DocsError(f"explained by Settings and in docs/hooks/reference.py too: {twice}")
    missing = sorted(set(read) - set(from_settings) - set(ENVIRONMENT))
    missing += sorted(set(wrote) - set(ENVIRONMENT_SET))
    if missing:
        raise DocsError(f"variables read or set in the code without a meaning: {missing}")
    stale = sorted((set(ENVIRONMENT) - set(read)) | (set(ENVIRONMENT_SET) - set(wrote)))
    if stale:
        raise DocsError(f"docs/hooks/reference.py explains variables the code lacks: {stale}")
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


# -- exit codes --------------------------------------------------------------------------

EXIT_CODES_ELSEWHERE = {130: "interrupted (Ctrl-C)"}
"""Exit codes the CLI's entry point gives that ``loop.cli.console`` does not list."""


def documented_exit_codes() -> dict[int, str]:
    """The list in ``loop.cli.console``'s docstring, the one place the CLI states them."""
    import loop.cli.console as console

    doc = " ".join((console.__doc__ or "").split())
    listed = re.search(r"Exit codes \([^)]*\): (.*?)\. ", doc)
    if not listed:
        raise DocsError("loop/cli/console.py no longer lists its exit codes")
    codes = {}
    for part in listed.group(1).split("·"):
        number, _, meaning = part.strip().partition(" ")
        codes[int(number)] = meaning
    if codes.get(console.WAITING, "").find("waits for a person") < 0:
        raise DocsError(f"console.WAITING ({console.WAITING}) is not listed as waiting")
    return codes


def exit_codes_in_code() -> set[int]:
    """Literal codes the CLI exits with: ``typer.Exit(N)``, ``code = N``, ``return N``
    of a command's ``main``, and console's ``WAITING``."""
    import loop.cli.console as console

    found = {console.WAITING}
    for path in sorted((ROOT / "loop" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "Exit":
                found |= {a.value for a in node.args if isinstance(a, ast.Constant)}
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                if any(getattr(t, "id", "") == "code" for t in node.targets):
                    found.add(node.value.value)
            if isinstance(node, ast.IfExp) and isinstance(node.orelse, ast.Constant):
                if isinstance(node.orelse.value, int) and isinstance(node.body, ast.Constant):
                    found |= {node.body.value, node.orelse.value}
    return {c for c in found if isinstance(c, int) and not isinstance(c, bool)}


def exit_codes() -> str:
    codes = {**documented_exit_codes(), **EXIT_CODES_ELSEWHERE}
    unexplained = sorted(exit_codes_in_code() - set(codes))
    if unexplained:
        raise DocsError(f"the CLI exits with {unexplained}, which no list explains")
    out = ["| code | meaning |", "| --- | --- |"]
    out += [f"| `{code}` | {markdown_text(codes[code])} |" for code in sorted(codes)]
    return "\n".join(out) + "\n"


# -- LOOP_HOME ---------------------------------------------------------------------------


def home_entries() -> dict[str, set[str]]:
    """Top-level names the code makes under ``LOOP_HOME`` (``home / "runs"`` and the
    like), with the files that name them."""
    found: dict[str, set[str]] = {}
    for path in code_files():
        tree = ast.parse(path.read_text())
        constants = _constants(tree)
        imported = _imported_constants(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                if _is_home(node.left):
                    name = _text(node.right, {**imported, **constants})
                    if name is None and isinstance(node.right, ast.Attribute):
                        name = imported.get(ast.unparse(node.right))
                    if name:
                        found.setdefault(name, set()).add(_rel(path))
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
            if not node.module.startswith(("loop", "activities")):
                continue
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
            "never deleted",
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
            f"docs/hooks/reference.py explains LOOP_HOME entries the code lacks: {stale}"
        )
    out = ["| path | what | named in |", "| --- | --- | --- |"]
    for entry in sorted(LOOP_HOME, key=lambda e: (e.startswith(("eval", "demo", "triage")), e)):
        where = ", ".join(f"`{p}`" for p in sorted(found[entry]))
        for i, (path, what) in enumerate(LOOP_HOME[entry]):
            out.append(f"| `{path}` | {what} | {where if i == 0 else ''} |")
    return "\n".join(out) + "\n"


# -- workflow patches ----------------------------------------------------------------------


def patches_in_code() -> list[tuple[str, str, int, str]]:
    """(patch id, file, line, call) of every ``patched(...)`` (``workflow``'s, and
    ``workflows.patches``' that the release marker answers) and ``deprecate_patch(...)``
    in ``workflows/``, with the function that holds it."""
    found: dict[tuple[str, str, int], str] = {}
    for path in sorted((ROOT / "workflows").rglob("*.py")):
        tree = ast.parse(path.read_text())
        named = {  # an id given by a module-level constant, as period.py's LOCAL
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        # Outer functions come first in the walk: the innermost holder is written last.
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("patched", "deprecate_patch")
                    and node.args
                ):
                    arg = node.args[0]
                    if isinstance(arg, ast.Constant):
                        patch = arg.value
                    elif isinstance(arg, ast.Name) and arg.id in named:
                        patch = named[arg.id]
                    else:
                        continue
                    key = (patch, _rel(path), node.lineno)
                    found[key] = f"{func.name}: {node.func.attr}"
    return sorted(((*key, where) for key, where in found.items()), key=lambda r: (r[1], r[2]))


def patches() -> str:
    rows = patches_in_code()
    if not rows:
        return "No workflow code is behind a patch today.\n"
    out = ["| patch id | where | function: call |", "| --- | --- | --- |"]
    for patch, file, line, where in rows:
        out.append(f'| `"{patch}"` | `{file}:{line}` | `{where}` |')
    return "\n".join(out) + "\n"


# -- the hook ----------------------------------------------------------------------------

GENERATORS: dict[str, Callable[[], str]] = {
    "task-file": task_file,
    "sources-file": sources_file,
    "eval-files": eval_files,
    "cli": cli,
    "environment": environment,
    "exit-codes": exit_codes,
    "loop-home": loop_home,
    "patches": patches,
}

EXTERNAL = re.compile(
    r"""<(?:link|script|img|iframe)\b[^>]*\b(?:href|src)=["']?(?:https?:)?//""", re.IGNORECASE
)
"""A page that loads anything from elsewhere (fonts, scripts, images) does not work
offline; links a reader may follow (``<a href>``) are fine."""


def expand(markdown: str, where: str) -> str:
    """``markdown`` with every generated-part marker replaced by what it names."""

    def one(found: re.Match[str]) -> str:
        name = found.group(1)
        if name not in GENERATORS:
            raise DocsError(f"{where}: no generated part named {name!r}")
        return GENERATORS[name]()

    return MARKER.sub(one, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    from mkdocs.exceptions import PluginError

    try:
        return expand(markdown, page.file.src_uri)
    except DocsError as e:
        raise PluginError(str(e)) from None


def on_post_page(output: str, page: Any, config: Any) -> str:
    from mkdocs.exceptions import PluginError

    found = EXTERNAL.search(output)
    if found:
        raise PluginError(f"{page.file.src_uri} loads from elsewhere: {found.group(0)}")
    return output
