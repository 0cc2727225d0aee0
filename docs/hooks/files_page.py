"""The task file, sources file and eval files pages: one section per pydantic model under
the file's root model, with a table of its keys from the fields' attribute docstrings."""

from __future__ import annotations

import enum
import inspect
import json
import types
import typing
from collections.abc import Iterator
from typing import Any

import annotated_types
import yaml
from generated import (
    DocsError,
    anchor,
    attribute_docstrings,
    markdown_text,
)
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


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
    anchors = {model: anchor(path) for path, model in found}
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
        f"## `{key}` {{#{anchor(key)}}}\n",
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
