"""A task's candidates, the task's side: explore once, run them, choose one.

``TaskWorkflow`` runs this instead of its own attempts when its file has ``candidates``
(docs/concepts/candidates.md):

    explore once (in the first candidate's worktree)
      -> each candidate a CandidateWorkflow child (workflows/candidate.py), at most
         max_parallel at once, each its own attempt loop up to a verdict
      -> choose: first (the first to pass; the others stopped at once: the pool on
         their host refuses their next call, and their workflows are cancelled)
                 best (all of them; ranked by loop.rules.candidates)
                 person (every passing one waits, approved by name)
      -> the chosen one's worktree, verdict and attempts become the task's, and the
         task's finalize takes it from there.

No candidate passed: the task stops as a single task would (BLOCKED when every one
blocked, else it waits for a person); an answer starts another round for the ones
that did not block, each from where it stopped. At the task's end each candidate is
closed on its host (``close``): its uid back, its worktree gone (the chosen one's is
the finalize's), its branch deleted once another was chosen (``keep_candidates`` keeps
it). Behind the ``candidates`` patch: a task file with the key is new.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError, WorkflowAlreadyStartedError
from temporalio.workflow import ChildWorkflowHandle, ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    import workflows.environment as environment
    import workflows.hosts as hosts
    from loop.contracts import (
        CANDIDATE_WORKFLOW,
        CLOSE_CANDIDATE,
        COMMIT,
        ENDPOINT_PREFLIGHT_S,
        EXPLORE,
        STOP_CANDIDATES,
        WAITING_APPROVAL,
        ApproveSignal,
        CandidateInput,
        CandidateRecord,
        CloseCandidateInput,
        CommitInput,
        Evidence,
        ExploreInput,
        ExploreResult,
        FinalAction,
        Phase,
        SharedBudget,
        StopCandidatesInput,
        TaskResult,
        TaskSpec,
        TaskState,
        Verdict,
        Workspace,
        workflow_id_for,
    )
    from loop.contracts.step_context import sent_once
    from loop.rules import answers, reasons
    from loop.rules import candidates as rules
    from loop.rules.candidates import Outcome
    from loop.rules.record import commit_message
    from workflows.choice import Choice
    from workflows.record import Decision, Waits
    from workflows.steps import HostLost, StepFailed, act

PATCH = "candidates"


class Answered(Protocol):
    """What of the task an answer to its candidates uses (``workflows.answering``)."""

    spec: TaskSpec
    choice: Choice | None

    def _decide(self, decision: Decision, detail: str) -> None: ...


class Task(Answered, Waits, Protocol):
    """What of the task (``workflows.task.TaskWorkflow``) its candidates' side uses."""

    result: TaskResult
    ws: Workspace | None
    last_verdict: Verdict | None
    phase: Phase | None
    max_attempts: int
    max_tokens: int | None
    max_cost: float | None
    human_feedback: list[str]

    def _event(self, kind: str, detail: str = "") -> None: ...
    def _publish(self) -> None: ...
    def _placed(self, moved_from: str = "") -> None: ...
    def _explored(self, explored: ExploreResult) -> None: ...


async def run(task: Task) -> Outcome | None:
    """One round of the task's candidates, then the choice: None once one is chosen (its
    worktree and verdict are the task's now), else why the task stops."""
    choice = task.choice
    if choice is None:
        members = rules.members(task.spec)
        choice = task.choice = Choice(
            agents=dict(members), key=f"{task.spec.id}-{workflow.info().run_id}"
        )
        for name, agent in members:
            choice.records[name] = CandidateRecord(
                name=name,
                agent=rules.agent_words(agent),
                workflow_id=workflow_id_for(rules.candidate_id(task.spec.id, name)),
            )
        task.result.candidates = list(choice.records.values())
    if choice.explored is None:
        stop = await _explore(task, choice)
        if stop is not None:
            return stop
    if choice.chosen:
        names = [choice.chosen]  # a review of its pull request: it alone goes on
    elif any(r.attempts for r in choice.records.values()):
        names = [r.name for r in rules.continuing(list(choice.records.values()))]
    else:
        names = list(choice.records)
    await _round(task, choice, names)
    return await _choose(task, choice)


def _spec_for(task: Task, choice: Choice, name: str, attempts: int) -> CandidateInput:
    before = choice.records[name]
    spec = rules.member_spec(
        task.spec,
        name,
        choice.agents[name],
        max_attempts=attempts,
        max_tokens=task.max_tokens,
        max_cost_usd=task.max_cost,
    )
    shared = SharedBudget(
        key=choice.key, member=name, tokens=task.max_tokens, cost_usd=task.max_cost
    )
    return CandidateInput(
        spec=spec,
        name=name,
        workspace=before.workspace,
        host=choice.host,
        explored=_by_reference(choice.explored),
        before=before if before.attempts else None,
        human_feedback=list(task.human_feedback),
        shared=shared,
    )


def _by_reference(explored: ExploreResult | None) -> ExploreResult | None:
    """What a candidate needs of the exploration: the brief by its file (every candidate
    works on the host that wrote it), the reproducer by its summary; history holds them
    once, in the task's own explore."""
    if explored is None:
        return None
    said = explored.reproducer
    gates = [g.model_copy(update={"evidence": Evidence(detail="")}) for g in said.gates]
    return explored.model_copy(
        update={"brief": "", "reproducer": said.model_copy(update={"gates": gates})}
    )


async def _explore(task: Task, choice: Choice) -> Outcome | None:
    """The task's exploration, once, in the first candidate's worktree (on whichever host
    takes it: every candidate works there, where the task's pool is)."""
    first = next(iter(choice.records))
    spec = _spec_for(task, choice, first, task.max_attempts).spec
    explore_s = sum(g.seconds() for g in spec.verify) + 60 + ENDPOINT_PREFLIGHT_S
    task.phase = Phase.EXPLORE
    task._publish()
    if environment.wanted(spec):
        ws = await environment.lay(spec, await hosts.prepare(spec), task._event)
        explored = await act(
            EXPLORE,
            sent_once(ExploreInput(task=spec, workspace=ws), ws.run_dir, ""),
            summary=f"explore (in candidate {first}'s worktree)",
            seconds=explore_s,
            ws=ws,
        )
    else:
        prepared = await hosts.prepare_and_explore(spec, explore_s)
        ws, explored = prepared.workspace, prepared.explored
    task.ws = ws
    task._placed()
    task.result.worktree = task.result.branch = ""  # the chosen candidate's, once chosen
    task._explored(explored)
    choice.host, choice.explored = ws, explored
    choice.records[first].workspace = ws
    # As a single task's explore: a person answers before any candidate spends an attempt.
    why, _ = reasons.at_base(spec, explored.reproducer)
    return Outcome(TaskState.NEEDS_HUMAN, why, False) if why else None


async def _round(task: Task, choice: Choice, names: list[str]) -> None:
    """Run ``names``, at most ``max_parallel`` at once, until each has ended (or, for
    ``choose: first``, one has passed)."""
    extra = max(1, task.max_attempts - choice.granted) if choice.granted else task.max_attempts
    choice.granted = task.max_attempts
    task.phase = Phase.MAKE
    at_once = min(task.spec.max_parallel or len(names), len(names))
    task._event("candidates", f"{', '.join(names)}: {at_once} at a time")
    task._publish()
    pending = list(names)
    parallel = task.spec.max_parallel or len(names)
    while pending or choice.running:
        starting = pending[: max(0, parallel - len(choice.running))]
        del pending[: len(starting)]
        handles = await asyncio.gather(*(_start(task, choice, n, extra) for n in starting))
        choice.running.update((n, h) for n, h in zip(starting, handles, strict=True) if h)
        if not choice.running:
            continue
        await workflow.wait(list(choice.running.values()), return_when=asyncio.FIRST_COMPLETED)
        for name, handle in list(choice.running.items()):
            if not handle.done():
                continue
            del choice.running[name]
            record = _took(task, choice, name, await _ended(handle, choice.records[name]))
            if record.passed and task.spec.choose == "first" and not choice.chosen:
                choice.chosen = name
                await _stop_others(task, choice, pending)
                return


async def _start(
    task: Task, choice: Choice, name: str, extra: int
) -> ChildWorkflowHandle[object, CandidateRecord] | None:
    """The candidate's workflow started; None (it waits for a person, with why) where one
    of its id still runs (an earlier run of the task's, terminated, whose candidate lives
    on)."""
    before = choice.records[name]
    inp = _spec_for(task, choice, name, len(before.attempts) + extra)
    before.state, before.reason = TaskState.RUNNING, ""
    task._event("candidate", f"{name} starts: {before.agent}")
    try:
        return await workflow.start_child_workflow(
            CANDIDATE_WORKFLOW,
            inp,
            id=before.workflow_id,
            result_type=CandidateRecord,
            static_summary=f"candidate {name}: {before.agent}",
            # A task that ends (or is cancelled) stops its candidates with it, each
            # settling what it held.
            parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
        )
    except WorkflowAlreadyStartedError:
        why = f"{before.workflow_id} still runs (an earlier run's); cancel it, then answer"
        _took(task, choice, name, before.model_copy(
            update={"state": TaskState.NEEDS_HUMAN, "reason": why}))  # fmt: skip
        return None


async def _ended(
    handle: ChildWorkflowHandle[object, CandidateRecord], before: CandidateRecord
) -> CandidateRecord:
    """What a candidate's workflow returned; one that failed (Loopwork broke) is BLOCKED
    with why, one that was stopped before it could say is CANCELLED."""
    try:
        return await handle
    except ChildWorkflowError as e:
        why = str(e.cause or e)
        return before.model_copy(update={"state": TaskState.BLOCKED, "reason": why})
    except asyncio.CancelledError:
        return before.model_copy(update={"state": TaskState.CANCELLED, "reason": "stopped"})


def _took(task: Task, choice: Choice, name: str, record: CandidateRecord) -> CandidateRecord:
    """A candidate's round is over: its record is the task's, its spend added."""
    kept = choice.records[name]
    record = record.model_copy(
        update={"name": name, "agent": kept.agent, "workflow_id": kept.workflow_id}
    )
    if record.workspace is None:
        record.workspace = kept.workspace
    choice.records[name] = record
    _tally(task, choice)
    said = f": {record.reason}" if record.reason else ""
    task._event("candidate", f"{name} {record.state}{said} ({len(record.attempts)} attempts)")
    task._publish()
    return record


def _tally(task: Task, choice: Choice) -> None:
    """The task's spend is all of its candidates'."""
    records = list(choice.records.values())
    task.result.candidates = records
    task.result.tokens = sum(r.tokens for r in records)
    task.result.cost_usd = sum(r.cost_usd for r in records)
    task.result.tool_calls = sum(r.tool_calls for r in records)


async def _stop_others(task: Task, choice: Choice, pending: list[str]) -> None:
    """``choose: first``: the pool refuses every other candidate's next call from now on,
    and their workflows are cancelled (their agents stop at their next heartbeat); those
    not started never start."""
    stopping = asyncio.create_task(_stop_calls(task, choice))
    for handle in choice.running.values():
        handle.cancel(f"candidate {choice.chosen} passed first")
    for name in pending:
        record = choice.records[name]
        record.state, record.reason = TaskState.CANCELLED, f"not started: {choice.chosen} passed"
    choice.collecting = asyncio.create_task(_collect(task, choice))
    await stopping


async def _collect(task: Task, choice: Choice) -> None:
    """Each stopped candidate's record as its workflow ends (its agent stopped, what it
    held settled), while the chosen one is finalized."""
    for name, handle in list(choice.running.items()):
        record = await _ended(handle, choice.records[name])
        choice.running.pop(name, None)
        _took(task, choice, name, record)


async def _stop_calls(task: Task, choice: Choice) -> None:
    if choice.host is None:
        return
    try:
        await act(
            STOP_CANDIDATES,
            StopCandidatesInput(key=choice.key, chosen=choice.chosen),
            summary=f"stop every candidate but {choice.chosen}",
            ws=choice.host,
        )
    except (StepFailed, HostLost) as e:
        task._event("candidates", f"their calls not stopped at once: {e}")


async def _choose(task: Task, choice: Choice) -> Outcome | None:
    records = list(choice.records.values())
    passed = [r for r in records if r.passed]
    if choice.chosen:  # the first to pass; or chosen before (a review of its pull request)
        winner = choice.records[choice.chosen]
        if not winner.passed:
            return rules.none_passed([winner])
        if not choice.why:
            others = [r for r in records if r.name != winner.name]
            choice.why = rules.why_first(winner, others)
    elif not passed:
        return rules.none_passed(records)
    elif task.spec.choose == "best":
        order = rules.ranked(records)
        for place, r in enumerate(order, 1):
            r.rank = place
        winner, choice.why = order[0], rules.why_best(order)
    else:
        stop = await _ask(task, choice, passed)
        if stop is not None:
            return stop
        winner = choice.records[choice.approved]
    _adopt(task, choice, winner)
    return None


async def _ask(task: Task, choice: Choice, passed: list[CandidateRecord]) -> Outcome | None:
    """``choose: person``: each passing candidate's branch is handed over for review, and
    the task waits for an approval that names one (or a rejection)."""
    committed = await asyncio.gather(*(_hand_over(task, r) for r in passed))
    choice.waiting = {r.name: c for r, c in zip(passed, committed, strict=True)}
    task.result.commit = ""  # several wait: an approval names one
    names = ", ".join(choice.waiting)
    decision = await task._wait_for_person(
        f"verified: {len(passed)} candidates passed ({names}); approve one "
        f"(loop approve {task.spec.id} --candidate NAME)",
        WAITING_APPROVAL,
        state=TaskState.AWAITING_APPROVAL,
    )
    waiting, choice.waiting = list(choice.waiting), {}
    if decision is None:
        choice.kept = True
        task.result.final_action = FinalAction.BRANCH_READY
        kept = ", ".join(r.workspace.branch for r in passed if r.workspace is not None)
        reason = f"verified; no approval within approval_timeout, branches kept: {kept}"
        return Outcome(TaskState.DONE_WITH_EVIDENCE, reason, False)
    if decision.kind == "reject":
        return Outcome(TaskState.REJECTED, decision.text or "rejected", False)
    choice.why = rules.why_person(choice.approved, decision.by, waiting)
    return None


async def _hand_over(task: Task, r: CandidateRecord) -> str:
    """A passing candidate's reviewable commit on its branch, in the repository."""
    assert r.workspace is not None
    verdict = r.attempts[-1].verdict
    assert verdict is not None
    done = await act(
        COMMIT,
        CommitInput(
            task=task.spec,
            workspace=r.workspace,
            artifact=verdict.artifact or r.commit,
            message=commit_message(task.spec, verdict),
        ),
        summary=f"commit candidate {r.name} on its branch",
        ws=r.workspace,
    )
    r.commit = done.commit
    return done.commit


def _adopt(task: Task, choice: Choice, winner: CandidateRecord) -> None:
    """The chosen candidate's worktree, verdict and attempts are the task's now."""
    assert winner.workspace is not None and winner.attempts
    choice.chosen, winner.chosen = winner.name, True
    if not winner.rank:
        winner.rank = 1
    task.ws = winner.workspace
    task.last_verdict = winner.attempts[-1].verdict
    task.result.attempts = list(winner.attempts)
    task.result.commit = winner.commit
    task.result.worktree, task.result.branch = winner.workspace.path, winner.workspace.branch
    if task.last_verdict is not None:
        task.result.evidence = task.last_verdict.gates
    task.result.chosen, task.result.choice = winner.name, choice.why
    _tally(task, choice)
    task._event("chosen", choice.why)
    task._publish()


def approve(task: Answered, payload: ApproveSignal, by: str) -> str:
    """An approval while candidates wait (``choose: person``): the one it names is taken
    (``_unbound`` refused any that names none of them); what it did, in a few words."""
    choice = task.choice
    assert choice is not None
    name, _ = answers.chosen(task.spec.id, payload.candidate, payload.commit, choice.waiting)
    choice.approved = name
    record = choice.records[name]
    note = f"; {payload.note}" if payload.note else ""
    task._decide(Decision("approve", payload.note, by), f"approve: candidate {name}{note}{by}")
    ws = record.workspace
    where = f"{ws.branch} into {ws.base_ref}" if ws is not None else "it"
    return f"approved candidate {name}; merge of {where} requested"


def unapproved(task: Answered, payload: ApproveSignal) -> str | None:
    """Why an approval approves none of the candidates waiting ("" when it approves one);
    None when no candidates wait (the task's own rule applies)."""
    choice = task.choice
    if choice is None or not choice.waiting:
        return None
    return answers.chosen(task.spec.id, payload.candidate, payload.commit, choice.waiting)[1]


async def close(task: Task) -> None:
    """At the task's end, each candidate on its host: still running ones stopped first,
    then its uid back, its worktree removed (the chosen one's is the finalize's), its
    branch deleted when another was chosen (kept with ``keep_candidates``, or when no one
    was). What the pool counted for it stands where its record knew less (an attempt
    cancelled mid-way)."""
    choice = task.choice
    if choice is None:
        return
    if choice.collecting is not None:
        await choice.collecting  # stopped already: their records come in as they end
    for handle in choice.running.values():
        handle.cancel("the task ended")
    for name, handle in list(choice.running.items()):
        _took(task, choice, name, await _ended(handle, choice.records[name]))
    choice.running = {}
    closing = [r for r in choice.records.values() if r.workspace is not None]
    for i, r in enumerate(closing):
        assert r.workspace is not None
        keep = task.spec.keep_candidates or not choice.chosen or (choice.kept and r.passed)
        try:
            closed = await act(
                CLOSE_CANDIDATE,
                CloseCandidateInput(
                    workspace=r.workspace,
                    keep_branch=keep,
                    keep_worktree=r.name == choice.chosen,
                    key=choice.key,
                    last=i == len(closing) - 1,
                ),
                summary=f"close candidate {r.name}",
                ws=r.workspace,
            )
        except (StepFailed, HostLost) as e:
            task._event("candidate", f"{r.name} not closed: {e}")
            continue
        if closed.spent.tokens > r.tokens or closed.spent.cost_usd > r.cost_usd + 1e-9:
            r.tokens = max(r.tokens, closed.spent.tokens)
            r.cost_usd = max(r.cost_usd, closed.spent.cost_usd)
        said = "; ".join(x for x in (closed.branch, "worktree removed" * closed.removed) if x)
        task._event("candidate", f"{r.name} closed" + (f": {said}" if said else ""))
    _tally(task, choice)
