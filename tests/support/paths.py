"""Where things are: the repository's root, whatever folder of ``tests/`` a module is in."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
