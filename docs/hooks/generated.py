"""What every generated part of the reference shares: where the code is and how it is
read, how its text goes into a Markdown table, and the error that fails the build."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[2]
"""The project's folder: the code this file reads lives there."""
CODE = ("loop", "activities", "workflows", "worker.py")


class DocsError(Exception):
    """The code and the documentation disagree; the message says where."""


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


def anchor(path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-") or "top"


def code_files() -> Iterator[Path]:
    for name in CODE:
        path = ROOT / name
        yield from sorted(path.rglob("*.py")) if path.is_dir() else [path]


def constants_of(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "text"`` assignments."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    found[target.id] = node.value.value
    return found


def text_of(node: ast.AST, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))
