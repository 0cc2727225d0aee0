"""``tool_step``: one tool call of the openai backend's model loop.

The model sees seven tools (``activities.host.toolbox``): ``list_files``,
``read_file``, ``search``, ``write_file``, ``edit_file``, ``run`` and ``finish``.
Each call is one ``tool_step`` activity, so that a crash between two calls loses nothing and
a call that completed is never applied again.

What every call ends as, because the workflow needs to know which way to go:

- a result the model reads (``ok=True``), or a failure it can act on
  (``ok=False``, text starting with ``error:``): bad JSON arguments, an unknown
  tool, a missing argument, a file that is not there, an ambiguous edit, a
  command that exits non-zero or is refused by the task's ``run`` policy. The
  loop goes on; the model tries something else.
- a policy violation (``policy_violation`` set): a path outside the worktree,
  into ``.git``, or a write to a protected path. The workflow ends the attempt
  ``BLOCKED``; the model is not asked to try again.
- ``finish(answer)``: the attempt's claim, recorded and then checked by gates.
- an exception, only for Loopwork's own trouble (the step's model artifact is
  missing, the worktree is gone: permanent; a full disk while writing the
  artifact: retried by Temporal).

History stays small: the text the model reads goes to the tool artifact
``step-NNNN.tool-I.json`` next to the model artifacts in the attempt folder; the
activity returns only its path, its length and the outcome flags.

Idempotency: when the tool artifact exists, ``tool_step`` returns the stored
result and runs nothing. For the window between applying a change and writing
the artifact (a worker killed in between), a pending note is written first:
a retried ``edit_file`` whose edit already landed reports it instead of
editing twice, and a retried ``run`` is not started again (it may have run in
part or in whole; the model is told so and can check). ``write_file`` needs
no note (writing the same content twice is the same as once); the read-only
tools simply run again.
"""

from __future__ import annotations

import json
from pathlib import Path

from temporalio import activity

from activities.host import sandbox
from activities.host.files import write_atomic
from activities.host.proc import heartbeating
from activities.host.step_files import model_artifact, tool_artifact
from activities.host.toolbox import ERROR_CHARS, execute
from activities.make import agent_home
from loop.contracts import TOOL_STEP, ToolStepInput, ToolStepResult
from loop.errors import permanent
from loop.logs import log_for
from loop.settings import Settings


def _call_arguments(inp: ToolStepInput) -> str:
    """The arguments of the call ``inp.call`` names, from the step's model artifact.

    Matched by index when the id there agrees (ids from some endpoints repeat),
    else by a unique id. A missing artifact or call cannot be fixed by retrying.
    """
    path = model_artifact(inp.attempt_dir, inp.step)
    try:
        message = json.loads(path.read_bytes())["message"]
        calls = message.get("tool_calls") or []
    except FileNotFoundError:
        raise permanent(f"missing {path}: the model step of tool call {inp.call.id}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise permanent(f"broken artifact {path}: {type(e).__name__}: {e}") from None
    i = inp.call.index
    if 0 <= i < len(calls) and isinstance(calls[i], dict) and calls[i].get("id") == inp.call.id:
        entry = calls[i]
    else:
        same = [c for c in calls if isinstance(c, dict) and c.get("id") == inp.call.id]
        if len(same) != 1:
            raise permanent(f"{path} has {len(same)} tool calls with id {inp.call.id!r}, not 1")
        entry = same[0]
    function = entry.get("function") or {}
    if function.get("name") != inp.call.name:
        raise permanent(
            f"{path}: call {inp.call.id!r} is {function.get('name')!r}, not {inp.call.name!r}"
        )
    arguments = function.get("arguments")
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _stored_result(path: Path) -> ToolStepResult:
    try:
        return ToolStepResult.model_validate(json.loads(path.read_bytes())["result"])
    except (ValueError, KeyError, TypeError) as e:
        raise permanent(f"broken artifact {path}: {type(e).__name__}: {e}") from None


class ToolActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=TOOL_STEP.name)
    async def tool_step(self, inp: ToolStepInput) -> ToolStepResult:
        """Run one tool call, or return the stored result of a call that already ran.

        The text the model reads goes to ``step-NNNN.tool-I.json`` (``{"message":
        <tool message>, "result": <this result>}``), written atomically; the result
        carries only its path and length, so history does not grow with tool output.
        """
        call = inp.call
        log = log_for(inp.task_id, inp.attempt, "tool_step").bind(
            step=inp.step, index=call.index, tool=call.name
        )
        artifact = tool_artifact(inp.attempt_dir, inp.step, call.index)
        if artifact.exists():
            log.info("tool call already done; returning its stored result, not running again")
            return _stored_result(artifact)
        root = Path(inp.workspace.path)
        if not root.is_dir():
            raise permanent(f"the worktree {root} is gone; start the task again with --rerun")
        arguments = _call_arguments(inp)
        logs = Path(inp.attempt_dir) / "tool-logs"
        name = f"step-{inp.step:04d}.tool-{call.index}"
        journal = logs / f"{name}.pending.json"
        outcome = await heartbeating(
            execute(
                call.name,
                arguments,
                root,
                inp.policy,
                inp.protected,
                logs,
                log_name=name,
                journal=journal,
                sandbox=inp.sandbox,
                task_id=inp.task_id,
                home=self.settings.home,
                agent_home=agent_home(inp.workspace),
                allow_hosts=tuple(sandbox.endpoint_entries(inp.base_url, openai=True)),
                hidden=tuple(sandbox.hidden_for(inp.workspace)),
                environment=sandbox.Laid.of(inp.workspace.environment),
            )
        )
        result = ToolStepResult(
            name=call.name,
            ok=outcome.ok,
            error=outcome.error[:ERROR_CHARS],
            policy_violation=outcome.policy_violation,
            finished=outcome.finished,
            answer=outcome.answer,
            output_chars=len(outcome.text),
            artifact=str(artifact),
        )
        record = {
            "message": {"role": "tool", "tool_call_id": call.id, "content": outcome.text},
            "result": result.model_dump(mode="json"),
        }
        write_atomic(artifact, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
        journal.unlink(missing_ok=True)
        log.info(
            "tool call done",
            ok=result.ok,
            error=result.error or None,
            policy_violation=result.policy_violation or None,
            output_chars=result.output_chars,
        )
        return result
