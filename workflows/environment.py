"""The repository's own environment in the task loop (docs/guides/environment.md).

A task with ``environment:`` finds or builds it on its host before explore
(``build_environment``, a step of its own: retried, heartbeating, its log kept), and the
workspace carries it from then on, so every sandboxed run of the task (the agent, the
``run`` tool, every gate at the commit, at base and on base with the attempt's tests)
has it laid into its tree. A task that moves to another host builds it there again (a
host uses only its own). An attempt whose commit changes the key files gets one built
for its verdict. Behind the ``environment`` patch: a task file with the key is new.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import workflows.patches as patches
    from loop.contracts import (
        BUILD_ENVIRONMENT,
        BuildEnvironmentInput,
        BuiltEnvironment,
        MakeResult,
        TaskSpec,
        Workspace,
    )
    from loop.contracts.step_context import sent_once
    from loop.rules.environment import changed_key_files
    from workflows.steps import SHORT, Tell, act_kept

PATCH = "environment"


def wanted(spec: TaskSpec) -> bool:
    """Whether the task lays an environment (its file has one, and this run takes the patch)."""
    return spec.environment is not None and patches.patched(PATCH)


async def lay(spec: TaskSpec, ws: Workspace, tell: Tell) -> Workspace:
    """The workspace with base's environment on its host: found there, or built (a setup
    that fails there ends the task BLOCKED, its command, exit code and log tail said)."""
    found = await _build(spec, ws, BuildEnvironmentInput(task=spec, workspace=ws), "", tell)
    tell("environment", found.said())
    return ws.model_copy(update={"environment": found})


async def for_attempt(
    spec: TaskSpec, ws: Workspace, made: MakeResult, kept: str, tell: Tell
) -> BuiltEnvironment | None:
    """The environment the attempt's commit is judged with, where it changes the key files
    and so another one than base's; None when base's is the one."""
    env, laid = spec.environment, ws.environment
    if env is None or laid is None or not made.commit:
        return None
    changed = changed_key_files(env, made.changed_files, made.changed_count)
    if not changed:
        return None
    step = BuildEnvironmentInput(
        task=spec,
        workspace=ws,
        commit=made.commit,
        attempt=made.attempt,
        changed=[c for c in changed if c != "…"],
    )
    found = await _build(spec, ws, step, kept, tell)
    if found.key == laid.key:
        return None  # the key files changed back, or not in what the key reads
    tell("environment", f"attempt {made.attempt}: {found.said()}")
    return found


async def _build(
    spec: TaskSpec, ws: Workspace, step: BuildEnvironmentInput, kept: str, tell: Tell
) -> BuiltEnvironment:
    """The step, by the task file and workspace its host kept where ``kept`` (sent again
    whole where the host lost them)."""
    assert spec.environment is not None
    what = f"attempt {step.attempt}'s commit" if step.attempt else "base"
    return await act_kept(
        BUILD_ENVIRONMENT,
        sent_once(step, ws.run_dir, kept),
        tell=tell,
        summary=f"environment: find or build for {what}",
        seconds=spec.environment.timeout + SHORT.total_seconds(),
        ws=ws,
    )
