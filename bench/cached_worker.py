"""``python worker.py`` with a bounded workflow cache, for bench/parked.py.

Loopwork's worker keeps the SDK's default cache (``max_cached_workflows=1000``).
This wrapper runs the very same ``worker.main`` with ``build_worker`` given a
smaller ``max_cached_workflows``, so the benchmark can show how a parked task's
memory is bounded by the cache without changing ``worker.py``.

    python bench/cached_worker.py 100   # same environment as python worker.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import worker


def main() -> int:
    size = int(sys.argv[1])
    original = worker.build_worker

    def bounded(client, settings, **overrides):  # type: ignore[no-untyped-def]
        return original(client, settings, **{"max_cached_workflows": size, **overrides})

    worker.build_worker = bounded  # serve() looks it up at call time
    return worker.main([])


if __name__ == "__main__":
    sys.exit(main())
