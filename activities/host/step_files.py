"""Where steps keep what their payloads then name by path: the model loop's one JSON file
per model call and per tool call, in the attempt folder, so a step's history stays the
same size at step 200 as at step 2; and the task file and workspace a host was sent once
(``keep``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from activities.host.files import write_atomic
from loop.contracts.step_context import shared_body


def model_artifact(attempt_dir: str | Path, step: int) -> Path:
    return Path(attempt_dir) / f"step-{step:04d}.model.json"


def tool_artifact(attempt_dir: str | Path, step: int, index: int) -> Path:
    return Path(attempt_dir) / f"step-{step:04d}.tool-{index}.json"


def keep(step: BaseModel, path: str) -> str:
    """Keep the task file and workspace the workflow sent whole at ``path``, for the later
    steps that will send only the path (loop/contracts/step_context.py); the path, for
    the step's result to report."""
    if path and not Path(path).exists():
        write_atomic(Path(path), shared_body(step))
    return path
