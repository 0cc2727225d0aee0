"""An attempt's activity inputs go without their models' defaults and without what a
step on the same host kept, and come back whole.

``MakeInput`` and ``VerifyInput`` are sent once per attempt; the task file in them
(with its sandbox limits, tool policy and every other default) was most of an
attempt's history. What the activity reads must be exactly what the workflow meant.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic_core import to_json
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

import workflows.steps as steps
from activities.host.step_files import keep
from loop.cli.demo import demo_task
from loop.contracts import (
    INPUT_GONE,
    PREVIOUS_OUTPUT_CHARS,
    AgentLimits,
    Evidence,
    FailedRequirement,
    Feedback,
    GateResult,
    MakeInput,
    MakeResult,
    PromptParts,
    TaskSpec,
    Verdict,
    VerifyInput,
    Workspace,
    gate,
)
from loop.contracts.gates import KINDS
from loop.contracts.step_context import MADE_FILE, digest, input_gone, sent_once
from loop.rules import feedback as fb


def inputs() -> tuple[MakeInput, VerifyInput]:
    spec = TaskSpec.model_validate(
        {**demo_task(Path("/r"), Path("/a.py"), {"mode": "strict"}),
         "budget": {"max_attempts": 3, "max_tokens": 5000},
         "agent": {"command": ["a"], "provider": {"api": "openai"}, "timeout": 60}}
    )  # fmt: skip
    ws = Workspace(task_id=spec.id, repo="/r", path="/w", branch="loop/x", base_ref="main",
                   base_commit="c" * 40, run_dir="/runs/x", byproducts=[".aider*"])  # fmt: skip
    feedback = Feedback(
        after_attempt=1, previous_output="fixed it",
        failed=[FailedRequirement(gate="tests", requirement="tests must pass",
                                  evidence=Evidence(exit_code=1, output_tail="FAIL: test_a"),
                                  required_correction="make test_a pass")],
        passing=["scope"],
    )  # fmt: skip
    prompt = PromptParts(goal=spec.goal, gates=["tests: ..."], feedback=feedback)
    made = MakeResult(attempt=2, commit="d" * 40, changed_files=["slugify.py"])
    return (
        MakeInput(task=spec, workspace=ws, attempt=2, prompt=prompt, limits=AgentLimits(tokens=9)),
        VerifyInput(task=spec, workspace=ws, attempt=2, make=made),
    )


def test_the_activity_reads_what_the_workflow_sent() -> None:
    for sent in inputs():
        payload = pydantic_data_converter.payload_converter.to_payloads([sent])[0]
        [read] = pydantic_data_converter.payload_converter.from_payloads([payload], [type(sent)])
        assert read == sent


def test_the_defaults_stay_out_of_the_payload() -> None:
    make, verify = inputs()
    sent = json.loads(to_json(make))
    assert "limits" not in sent["task"]["sandbox"] and "tools" not in sent["task"]["agent"]
    assert sent["task"]["sandbox"] == {"mode": "strict"}
    assert sent["task"]["budget"] == {"max_tokens": 5000}  # what was given, even a default
    assert sent["limits"] == {"tokens": 9} and sent["attempt"] == 2
    assert len(json.dumps(sent["task"])) < len(make.task.model_dump_json()) * 0.6
    assert "outside_writes" not in json.loads(to_json(verify))["make"]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.KIND)
def test_every_gate_kind_is_still_itself_without_its_defaults(kind: type) -> None:
    """A gate's kind is told by its keys: none may be lost with the defaults."""
    make, verify = inputs()
    # A run gate with per-test results, as regression_test needs, named apart from the example.
    tests = make.task.verify[0].model_copy(update={"name": "unit"})
    spec = make.task.model_copy(update={"verify": [tests, gate(kind.EXAMPLE)]})
    for sent in (make.model_copy(update={"task": spec}), verify.model_copy(update={"task": spec})):
        [read] = pydantic_data_converter.payload_converter.from_payloads(
            pydantic_data_converter.payload_converter.to_payloads([sent]), [type(sent)]
        )
        assert type(read.task.verify[1]) is kind and read == sent


def _sent(step: MakeInput | VerifyInput) -> dict:
    return json.loads(pydantic_data_converter.payload_converter.to_payloads([step])[0].data)


def _read(step: MakeInput | VerifyInput) -> MakeInput | VerifyInput:
    converter = pydantic_data_converter.payload_converter
    [read] = converter.from_payloads(converter.to_payloads([step]), [type(step)])
    return read


def test_the_task_file_and_workspace_go_once_per_host(tmp_path: Path) -> None:
    """The first step on a host sends them and keeps them; later ones send only the path,
    and the activity reads back exactly what the workflow meant."""
    make, verify = inputs()
    ws = make.workspace.model_copy(update={"run_dir": str(tmp_path)})
    make, verify = (
        make.model_copy(update={"workspace": ws}),
        verify.model_copy(update={"workspace": ws}),
    )
    first = sent_once(make, ws.run_dir, kept="")
    assert not first.by_reference and {"task", "workspace"} <= _sent(first).keys()
    assert keep(_read(first), first.context) == first.context  # the activity's side
    later = sent_once(verify, ws.run_dir, kept=first.context)
    assert later.context == first.context and later.by_reference
    payload = _sent(later)
    assert "task" not in payload and "workspace" not in payload
    assert _read(later) == verify.model_copy(update={"context": first.context})


def test_a_changed_task_file_or_workspace_is_never_read_from_an_older_copy(
    tmp_path: Path,
) -> None:
    """The cheapest way to a wrong verdict here would be a stale copy: another host's
    workspace or an edited task under the name of the kept one. The name is their digest."""
    make, _ = inputs()
    kept = sent_once(make, str(tmp_path), kept="")
    moved = make.workspace.model_copy(update={"host": "elsewhere", "path": "/other/w"})
    for changed in (
        make.model_copy(update={"workspace": moved}),
        make.model_copy(update={"task": make.task.model_copy(update={"goal": "other"})}),
    ):
        step = sent_once(changed, str(tmp_path), kept=kept.context)
        assert step.context != kept.context and not step.by_reference
        assert "task" in _sent(step)


def test_a_kept_copy_that_is_gone_is_a_permanent_failure_naming_it(tmp_path: Path) -> None:
    make, _ = inputs()
    step = sent_once(make, str(tmp_path), kept="")
    step = step.model_copy(update={"by_reference": True})
    with pytest.raises(Exception) as caught:
        _read(step)
    cause = caught.value
    while cause.__cause__ is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    assert isinstance(cause, ApplicationError) and cause.non_retryable
    assert step.context in str(cause) and "--rerun" in str(cause)


def test_a_link_in_place_of_a_kept_copy_is_not_followed(tmp_path: Path) -> None:
    """The cheapest forgery of a kept copy: a link where it was, to a file that says
    something else. The activity reads the worker's own file or fails, never the target."""
    make, _ = inputs()
    first = sent_once(make, str(tmp_path), kept="")
    keep(_read(first), first.context)
    forged = tmp_path / "forged.json"
    forged.write_text(Path(first.context).read_text().replace(make.task.goal, "rm -rf /"))
    Path(first.context).unlink()
    Path(first.context).symlink_to(forged)
    later = sent_once(make, str(tmp_path), kept=first.context)
    with pytest.raises(Exception) as caught:
        _read(later)
    cause = caught.value
    while cause.__cause__ is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    assert isinstance(cause, ApplicationError) and cause.non_retryable


def test_the_feedback_cites_the_kept_verdict_for_its_evidence(tmp_path: Path) -> None:
    """History holds a failed gate's evidence once (verify's result): the next make names
    the verdict file verify kept and reads the evidence there, whole."""
    make, _ = inputs()
    assert make.prompt.feedback is not None
    evidence = make.prompt.feedback.failed[0].evidence
    verdict = Verdict(
        passed=False,
        gates=[GateResult(name="tests", kind="run", passed=False, requirement="r",
                          evidence=evidence)],
    )  # fmt: skip
    kept = tmp_path / "verdict.json"
    kept.write_text(verdict.model_dump_json())
    review = FailedRequirement(gate="review", requirement="a reviewer's",
                               evidence=Evidence(detail="unclear naming"),
                               required_correction="rename")  # fmt: skip
    feedback = make.prompt.feedback.model_copy(
        update={"failed": [*make.prompt.feedback.failed, review]}
    )
    prompt = make.prompt.model_copy(
        update={"feedback": feedback, "evidence_from": str(kept), "evidence_of": ["tests"]}
    )
    step = make.model_copy(update={"prompt": prompt})
    failed = _sent(step)["prompt"]["feedback"]["failed"]
    assert "evidence" not in failed[0]  # in the verdict file
    assert failed[1]["evidence"] == {"detail": "unclear naming"}  # not in it: by its text
    assert _read(step) == step


def _kept(folder: Path, made: MakeResult) -> MakeResult:
    """``made`` as a make keeps it on its host (activities/make.py, ``keep_made``)."""
    made = made.model_copy(update={"kept": str(folder / MADE_FILE)})
    record = {"run_id": "r", "activity_id": "1", "made": made.model_dump(mode="json")}
    (folder / MADE_FILE).write_text(json.dumps(record))
    return made


def _gone(step: MakeInput | VerifyInput) -> ApplicationError:
    with pytest.raises(Exception) as caught:
        _read(step)
    cause: BaseException | None = caught.value
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    assert isinstance(cause, ApplicationError) and cause.non_retryable, caught.value
    assert cause.type == INPUT_GONE, cause
    return cause


def test_verify_is_sent_makes_result_by_where_make_kept_it(tmp_path: Path) -> None:
    """History holds make's result once: verify names the file make kept and the attempt
    and commit it must hold; the activity reads the whole result there."""
    _, verify = inputs()
    made = _kept(tmp_path, verify.make.model_copy(update={"claim": "I fixed it " * 300}))
    step = verify.model_copy(update={"make": made, "make_from": made.kept})
    # No attempt in it: a worker from before, to which it was required, refuses the payload
    # instead of judging a record without the attempt's changed files and claim.
    assert _sent(step)["make"] == {"commit": made.commit}
    assert len(json.dumps(_sent(step))) < len(json.dumps(_sent(verify))) + 200
    assert _read(step) == step


def test_a_kept_result_of_another_commit_is_refused(tmp_path: Path) -> None:
    """The cheapest way to a wrong verdict here: the file where the kept result was now
    holding another attempt's (a rerun, an older copy). It must be the commit sent."""
    _, verify = inputs()
    made = _kept(tmp_path, verify.make)
    _kept(tmp_path, made.model_copy(update={"commit": "e" * 40}))
    step = verify.model_copy(update={"make": made, "make_from": made.kept})
    assert "another attempt's" in str(_gone(step))
    (tmp_path / MADE_FILE).unlink()
    assert "unreadable on this host" in str(_gone(step))
    (tmp_path / MADE_FILE).write_text("{not json")
    _gone(step)


def test_the_feedback_quotes_the_last_claim_where_make_kept_it(tmp_path: Path) -> None:
    """The feedback's previous output is the end of the last claim, which history holds in
    make's result: the next make names that result and the quote's digest instead."""
    make, _ = inputs()
    assert make.prompt.feedback is not None
    claim = "line\r\n" + "é" * 2_000  # longer than quoted, with what a re-encoding changes
    made = _kept(tmp_path, MakeResult(attempt=1, commit="d" * 40, claim=claim))
    quote = claim[-PREVIOUS_OUTPUT_CHARS:]
    feedback = make.prompt.feedback.model_copy(update={"previous_output": quote})
    prompt = make.prompt.model_copy(
        update={"feedback": feedback, "previous_from": made.kept, "previous_digest": digest(quote)}
    )
    step = make.model_copy(update={"prompt": prompt})
    assert "previous_output" not in _sent(step)["prompt"]["feedback"]
    assert _read(step) == step
    # A kept result that says something else now (another try's claim) is refused.
    _kept(tmp_path, made.model_copy(update={"claim": claim + "!"}))
    assert "no longer says what was sent" in str(_gone(step))


def test_the_task_files_parts_of_the_prompt_go_with_the_task_file() -> None:
    """The goal, the gates, the instructions and the backend are the task file's: the make
    activity fills them in from the task it was given (or kept), so the prompt it renders
    is the one the workflow built before, and none of them is in the payload."""
    make, _ = inputs()
    spec = make.task.model_copy(update={"instructions": "Keep it short."})
    whole = make.prompt.model_copy(update=fb.from_task(spec))
    by_task = make.prompt.model_copy(
        update={"goal": "", "gates": [], "instructions": "", "from_task": True}
    )
    sent = _sent(make.model_copy(update={"task": spec, "prompt": by_task}))["prompt"]
    # No goal at all: a worker from before, to which it was required, refuses the payload
    # instead of prompting its agent without one.
    assert not {"goal", "gates", "instructions", "backend"} & sent.keys() and sent["from_task"]
    filled = by_task.model_copy(update=fb.from_task(spec))
    assert fb.render_prompt(filled, 2) == fb.render_prompt(whole, 2)
    assert spec.goal in fb.render_prompt(filled, 2) and "Keep it short." in fb.render_prompt(
        filled, 2
    )


def test_a_lost_input_is_told_from_any_other_failure() -> None:
    """The task sends a step again whole only when its host lost a file the input names,
    raised by the activity or while its input was read (wrapped by the SDK)."""
    lost = input_gone("this task's saved step input /r/c.json is unreadable on this host")
    wrapped = ApplicationError("Failed decoding arguments")
    wrapped.__cause__ = lost
    assert steps._gone(lost) and steps._gone(wrapped)
    other = ApplicationError("a permanent failure", type="LoopPermanent", non_retryable=True)
    wrapped_other = ApplicationError("Failed decoding arguments")
    wrapped_other.__cause__ = other
    assert not steps._gone(other) and not steps._gone(wrapped_other)
    assert not steps._gone(ApplicationError("LoopInputGone"))  # the words alone are not it
