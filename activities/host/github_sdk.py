"""githubkit, imported the first time a step talks to GitHub.

Its import is about a tenth of a worker's start, and a new worker's start is what a
dead worker's step waits for (docs/operations.md, "Durability in practice"); most workers
never call GitHub at all. Use the names as attributes (``gh.RequestFailed`` in an
``except``, ``gh.GitHub(...)``): a module attribute can be looked up late, a name
imported into another module cannot.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from githubkit import GitHub as GitHub
    from githubkit.exception import RateLimitExceeded as RateLimitExceeded
    from githubkit.exception import RequestFailed as RequestFailed

_WHERE = {
    "GitHub": "githubkit",
    "RateLimitExceeded": "githubkit.exception",
    "RequestFailed": "githubkit.exception",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # looked up once
    return value
