"""Loading the files people write, one loader per kind, one error style (``common``)."""

from loop.loaders.common import describe
from loop.loaders.evals import load_harness, load_suite, snapshot
from loop.loaders.sources import load_sources
from loop.loaders.task import load_task

__all__ = ["describe", "load_harness", "load_sources", "load_suite", "load_task", "snapshot"]
