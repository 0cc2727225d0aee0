"""The sources file of ``loop triage``: complete templates and absolute paths out.

The shared template and each source's template are merged and validated as a task
here, so a schedule stores a file that was read once and is complete.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from loop.contracts import GitHubIssuesSource, IssueFilesSource, TaskSpec, TriageSources
from loop.errors import TaskFileError
from loop.loaders.common import describe, read, validated
from loop.loaders.task import resolve
from loop.rules.triage import merge


def load_sources(path: str | Path) -> TriageSources:
    """Read, validate and resolve a sources file: complete templates, absolute paths."""
    file = Path(path)
    data = read(file, "sources", "template, policy, sources")
    sources = validated(TriageSources, data, str(file))
    folder = file.resolve().parent
    resolved = [_resolve(s, sources.template, folder, file) for s in sources.sources]
    return sources.model_copy(update={"template": {}, "sources": resolved})


def _resolve(source: Any, shared: dict[str, Any], folder: Path, file: Path) -> Any:
    where = f"{file}: source {source.name}"
    merged = merge(shared, source.template)
    merged.setdefault("autonomy", str(source.autonomy))
    try:
        spec = TaskSpec.model_validate({**merged, "id": "template", "goal": "each item's goal"})
    except ValidationError as e:
        raise TaskFileError(f"{where}: template.{describe(e, TaskSpec)}") from None
    spec = resolve(spec, folder, where)
    # Only what is set: a payload that names no field a worker lacks decodes on any worker.
    template = spec.model_dump(mode="json", exclude={"id", "goal"}, exclude_defaults=True)
    update: dict[str, Any] = {"template": template}
    if isinstance(source, IssueFilesSource | GitHubIssuesSource):
        path = Path(source.path).expanduser()
        path = (path if path.is_absolute() else folder / path).resolve()
        if isinstance(source, IssueFilesSource) and not path.is_dir():
            raise TaskFileError(f"{where}: path: {path} is not a folder of issue files")
        if isinstance(source, GitHubIssuesSource) and not path.is_file():
            raise TaskFileError(f"{where}: path: {path} not found")
        update["path"] = str(path)
    return source.model_copy(update=update)
