"""The reference pages, generated from the code each time the site is built.

mkdocs loads this file as a hook (``hooks:`` in ``mkdocs.yml``). A page asks for a
generated part with a marker line, ``<!-- generated: NAME -->``, which
``on_page_markdown`` replaces with what ``GENERATORS[NAME]`` returns; each page's part
is made by a module of its own beside this one (``files_page``, ``cli_page``,
``environment_page``, ``exit_codes_page``, ``home_page``, ``patches_page``, sharing
``generated``). So the field lists, the CLI, the environment variables, the exit
codes, the ``LOOP_HOME`` layout and the workflow patches cannot drift from the code:
they are read from it.

Where the code says what something means (a field's attribute docstring, a command's
help, a ``Settings`` field), that text is used. Where it does not (a variable read deep
in an activity, a file an activity writes under ``LOOP_HOME``), the names are still
found in the code, and the meaning comes from the tables in the page's module; a name
found without a meaning, or a meaning left for a name the code no longer has, fails the
build. That way a new variable or file cannot ship undocumented, and a removed one does
not linger.

``tests/unit/test_docs.py`` calls the same functions, so the checks also run as a test.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from cli_page import cli
from environment_page import environment
from exit_codes_page import exit_codes
from files_page import eval_files, sources_file, task_file
from generated import (
    DocsError,
)
from home_page import loop_home
from patches_page import patches

MARKER = re.compile(r"^<!-- generated: ([a-z-]+)\b[^>]*-->$", re.MULTILINE)

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
