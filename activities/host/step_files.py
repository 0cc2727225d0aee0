"""Where the model loop keeps each step: one JSON file per model call and per tool call,
in the attempt folder. Payloads carry these paths, never the conversation, so a
step's history stays the same size at step 200 as at step 2."""

from __future__ import annotations

from pathlib import Path


def model_artifact(attempt_dir: str | Path, step: int) -> Path:
    return Path(attempt_dir) / f"step-{step:04d}.model.json"


def tool_artifact(attempt_dir: str | Path, step: int, index: int) -> Path:
    return Path(attempt_dir) / f"step-{step:04d}.tool-{index}.json"
