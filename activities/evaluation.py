"""write_eval_results: the eval's report, kept in LOOP_HOME/eval-results.json.

The file keeps the latest runs (newest first) so two harness comparisons made on
different days can be read side by side; it is replaced atomically under a lock.
"""

from __future__ import annotations

import asyncio
import json

from temporalio import activity

from activities.host.files import update_atomic
from loop.contracts import WRITE_EVAL, EvalReport, WriteEvalResult
from loop.settings import Settings

KEEP_RUNS = 20


class EvalActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=WRITE_EVAL.name)
    async def write_eval_results(self, report: EvalReport) -> WriteEvalResult:
        path = self.settings.home / "eval-results.json"

        def add(old: str) -> str:
            runs = json.loads(old or "{}").get("runs", [])
            runs = [r for r in runs if r.get("run") != report.run]  # a retry replaces itself
            runs.insert(0, report.model_dump(mode="json") | {"results_path": str(path)})
            return json.dumps({"runs": runs[:KEEP_RUNS]}, indent=2)

        await asyncio.to_thread(update_atomic, path, add)
        return WriteEvalResult(path=str(path))
