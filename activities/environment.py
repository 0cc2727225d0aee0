"""build_environment: the repository's environment, found on the task's host or built there.

The first one, at base, must build: a task whose dependencies do not install cannot be
verified, so a setup that fails ends the task (a permanent error, never retried) with
the command, how it ended and its log's tail. One for an attempt whose commit changes
the key files may fail: its verdict says why (``activities/verify.py``), and the next
attempt is told. docs/guides/environment.md is the whole story.
"""

from __future__ import annotations

from pathlib import Path

from temporalio import activity

from activities.host import environments, sandbox
from loop.contracts import BUILD_ENVIRONMENT, BuildEnvironmentInput, BuiltEnvironment
from loop.errors import permanent
from loop.logs import log_for
from loop.settings import Settings


class EnvironmentActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=BUILD_ENVIRONMENT.name)
    async def build_environment(self, inp: BuildEnvironmentInput) -> BuiltEnvironment:
        ws, task = inp.workspace, inp.task
        commit = inp.commit or ws.base_commit
        folder = Path(ws.run_dir) / (f"attempt-{inp.attempt}" if inp.attempt else "")
        builder = environments.Builder(
            home=self.settings.home,
            locks=self.settings.locks,
            spec=task,
            repo=ws.commits,
            commit=commit,
            state_dir=folder / "environment",
            hidden=sandbox.hidden_for(ws),
            host=self.settings.host_id,
            repository=ws.remote or ws.repo,
        )
        try:
            planned = await environments.plan(task, ws.commits, commit)
            found = await builder.find_or_build(planned)
        except environments.SetupFailed as e:
            if not inp.attempt:
                raise permanent(str(e)) from None
            return BuiltEnvironment(
                key="", root="", commit=commit, changed=inp.changed, failed=str(e)
            )
        log_for(task.id, inp.attempt, "environment").info(
            "environment", key=found.key, cached=found.cached, seconds=found.seconds
        )
        return found.model_copy(
            update={"commit": commit, "changed": inp.changed, "host": self.settings.host_id}
        )
