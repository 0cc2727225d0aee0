"""What every file a person writes goes through: parsed, validated, one error line.

Task files, sources files, eval suites and harnesses are YAML or JSON mappings
validated by a pydantic model that refuses unknown keys (a typo must never
silently mean "no limit"). Every problem is one line that names the file, the
field and what is wrong, raised as ``TaskFileError``: the CLI prints it and exits
2, with nothing started.
"""

from __future__ import annotations

import difflib
import json
import types
from pathlib import Path
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from loop.contracts import GATE_KINDS as KINDS
from loop.errors import TaskFileError

M = TypeVar("M", bound=BaseModel)


def read(file: Path, kind: str, shape: str) -> dict[str, Any]:
    """The mapping in ``file``; ``kind`` names the file in errors, ``shape`` says what a
    valid one holds."""
    if not file.is_file():
        raise TaskFileError(f"{kind} file {file} not found")
    import yaml  # here, not at the top: a new worker starts without it

    text = file.read_text(errors="replace")
    try:
        data = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as e:
        raise TaskFileError(f"{file}: not valid JSON (line {e.lineno}: {e.msg})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise TaskFileError(f"{file}: not valid YAML ({where}{problem})") from None
    if not isinstance(data, dict):
        raise TaskFileError(f"{file}: a {kind} file is a mapping with {shape}")
    return data


def validated(model: type[M], data: dict[str, Any], where: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise TaskFileError(f"{where}: {describe(e, model)}") from None


def _without_kind_tags(loc: tuple[int | str, ...]) -> list[int | str]:
    """pydantic names the variant of a tagged union in the path (``verify.0.run.timeout``);
    the file has no such level (``verify.0.timeout``)."""
    return [p for i, p in enumerate(loc) if not (i and isinstance(loc[i - 1], int) and p in KINDS)]


def describe(e: ValidationError, model: type[BaseModel] | None = None) -> str:
    """The first error, as ``field.path: what is wrong``, on one line. An unknown key comes
    first, whatever pydantic met first: a typo (``verfy:``) is the cause of the "required
    field is missing" it also makes. With the ``model`` validated, the key it is closest
    to is named."""
    errors = sorted(e.errors(), key=lambda err: err["type"] != "extra_forbidden")
    err = errors[0]
    loc = ".".join(str(p) for p in _without_kind_tags(err["loc"])) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        msg = "unknown key"
        near = _closest(str(err["loc"][-1]), _keys_at(model, err["loc"][:-1])) if model else ""
        msg += f"; did you mean {near!r}?" if near else " (check the spelling"
        msg += (
            " (see docs/reference/task-file.md)" if near else "; see docs/reference/task-file.md)"
        )
    elif kind == "missing":
        msg = "required field is missing"
    else:
        msg = err["msg"].removeprefix("Value error, ")
        if kind == "string_pattern_mismatch" and loc == "id":
            msg = "must match [a-z0-9][a-z0-9._-]{0,62} (lowercase letters, digits, . _ -)"
    more = len(errors) - 1
    return f"{loc}: {msg}" + (f" (and {more} more problem{'s' * (more > 1)})" if more else "")


def _closest(key: str, known: set[str]) -> str:
    found = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    return found[0] if found else ""


def _keys_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> set[str]:
    """The keys the mapping at ``loc`` may hold: its model's fields, found by walking the
    annotations from ``model`` (lists by index, a gate by its kind's tag)."""
    here: list[Any] = [model]
    for i, part in enumerate(loc):
        if isinstance(part, int):
            here = [item for t in here for item in _list_items(t)]
            continue
        tagged = i and isinstance(loc[i - 1], int) and part in KINDS
        found: list[Any] = []
        for m in (m for t in here for m in _models(t)):
            if tagged:
                found += [m] if getattr(m, "KIND", None) == part else []
            elif part in m.model_fields:
                found.append(m.model_fields[part].annotation)
        here = found
    return {name for t in here for m in _models(t) for name in m.model_fields}


def _models(t: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation may be (through Optional, unions, Annotated)."""
    if get_origin(t) is Annotated:
        return _models(get_args(t)[0])
    if get_origin(t) in (Union, types.UnionType):
        return [m for a in get_args(t) for m in _models(a)]
    return [t] if isinstance(t, type) and issubclass(t, BaseModel) else []


def _list_items(t: Any) -> list[Any]:
    if get_origin(t) is Annotated:
        return _list_items(get_args(t)[0])
    if get_origin(t) in (Union, types.UnionType):
        return [item for a in get_args(t) for item in _list_items(a)]
    return list(get_args(t)[:1]) if get_origin(t) is list else []
