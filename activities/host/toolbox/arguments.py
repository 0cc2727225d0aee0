"""The model's tool-call arguments, checked against the schema before anything runs."""

from __future__ import annotations

import json
from typing import Any

from activities.host.toolbox.outcome import ToolError
from activities.host.toolbox.schemas import SCHEMA_BY_NAME
from loop.hardened import json_in

_JSON_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,)}


def parse_arguments(name: str, arguments: str | dict[str, Any] | None) -> dict[str, Any]:
    """The call's arguments, checked against the tool's own schema in TOOL_SCHEMAS.

    ``null`` for an optional argument counts as absent (some models send every
    key); an integer given as a string of digits is accepted (so do others).
    Unknown keys are refused, so a misspelt ``start_line`` does not silently mean
    "from the top".
    """
    schema = SCHEMA_BY_NAME[name]["parameters"]
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        args: Any = {}
    elif isinstance(arguments, dict):
        args = arguments
    else:
        try:
            args = json_in.loads(arguments)
        except json_in.Refused as e:
            raise ToolError(f"the arguments of {name} are refused: the JSON {e}") from None
        except json.JSONDecodeError as e:
            raise ToolError(
                f"the arguments of {name} are not valid JSON ({e.msg} at character {e.pos}); "
                "send one JSON object"
            ) from None
    if not isinstance(args, dict):
        raise ToolError(f"the arguments of {name} must be a JSON object, not {type(args).__name__}")
    props: dict[str, Any] = schema["properties"]
    expected = ", ".join(f"{k} ({v['type']})" for k, v in props.items()) or "none"
    unknown = [k for k in args if k not in props]
    if unknown:
        raise ToolError(
            f"unknown argument(s) for {name}: {', '.join(unknown)}; expected: {expected}"
        )
    out: dict[str, Any] = {}
    for key, prop in props.items():
        value = args.get(key)
        if value is None:
            if key in schema["required"]:
                raise ToolError(f"{name} needs the argument {key!r}; expected: {expected}")
            continue
        kind = prop["type"]
        if kind == "integer" and isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, _JSON_TYPES[kind]):
            raise ToolError(
                f"argument {key!r} of {name} must be a {kind}, not {type(value).__name__}"
            )
        out[key] = value
    return out
