"""Triage sources files for tests: a task template, sources, issue files."""

from __future__ import annotations

import uuid
from pathlib import Path

import yaml

from tests.support.tasks import task

NOTHING = "pass\n"
"""An agent body that changes nothing."""


def template(repo: Path, agent: list[str], *, approval_timeout: int = 3_600) -> dict:
    """Task-file fields for every item: one attempt, then wait (or end, when short)."""
    spec = task(
        repo,
        agent,
        budget={"max_attempts": 1, "max_stalled_attempts": 1},
        approval_timeout=approval_timeout,
    )
    del spec["id"], spec["goal"]
    return spec


def write_sources(folder: Path, tmpl: dict, sources: list[dict], **policy_fields) -> Path:
    """A sources file in ``folder``: the template, the policy fields and the sources."""
    file = folder / f"sources-{uuid.uuid4().hex[:6]}.yaml"
    data = {"template": tmpl, "policy": policy_fields, "sources": sources}
    file.write_text(yaml.safe_dump(data, sort_keys=False))
    return file


def issue(folder: Path, name: str, front: dict, body: str = "Make it so.") -> None:
    """An issue file: YAML front matter, then the body."""
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(f"---\n{yaml.safe_dump(front, sort_keys=False)}---\n{body}\n")
