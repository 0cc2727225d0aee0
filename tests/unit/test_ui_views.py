"""The review page without a browser or a server: a trace in, the rows and bars out;
the diff's files and colours; ``--bind`` and ``LOOP_UI_TOKEN``; and the guard's answers
to forged and honest requests (the app with a stand-in for Temporal)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.testclient import TestClient

from loop.contracts import (
    AnswerReply,
    AttemptRecord,
    BudgetFigures,
    BudgetStatus,
    DaySpend,
    EvalReport,
    Evidence,
    FailedRequirement,
    Feedback,
    GateResult,
    LedgerState,
    MakeResult,
    PeriodLimits,
    Reservation,
    TaskResult,
    TaskState,
    TaskStatus,
    TraceEvent,
    Verdict,
)
from loop.errors import BadInput
from loop.tasks import payload_for
from loop.ui import diff as diffs
from loop.ui.app import create_app
from loop.ui.config import UiConfig, parse_bind, parse_tokens, ui_config
from loop.ui.source import Diff, TaskPage, git_diff
from loop.ui.views import evals, ledger, spending, task_list, task_panels, timeline
from tests.support.repos import git

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def status(
    task_id: str, state: TaskState, *, waiting_for: str = "", phase: str | None = None
) -> TaskStatus:
    return TaskStatus(
        task_id=task_id,
        state=state,
        phase=phase,
        attempt=2,
        waiting_for=waiting_for,
        reason="verified; loop/x is ready to merge" if waiting_for else "",
        budget=BudgetStatus(
            used=BudgetFigures(attempts=2, seconds=30.0, tokens=800, cost_usd=0.02, tool_calls=3),
            left=BudgetFigures(attempts=1, seconds=90.0, tokens=None, cost_usd=0.08),
        ),
    )


def gate(name: str, passed: bool, **evidence: Any) -> GateResult:
    return GateResult(
        name=name,
        kind="run" if name == "tests" else "diff_scope",
        passed=passed,
        requirement=f"{name} must pass",
        evidence=Evidence(**evidence),
    )


def trace() -> TaskResult:
    """Two attempts: the first fails its tests, the second passes with a person's note."""
    failed = Verdict(
        passed=False,
        gates=[
            gate("tests", False, exit_code=1, output_tail="FAIL: test_runs_of_spaces\n", files=[]),
            gate("scope", True, files=["slugify.py"], detail="1 changed file(s)"),
        ],
    )
    passed = Verdict(passed=True, gates=[gate("tests", True, exit_code=0), gate("scope", True)])
    fed = Feedback(
        after_attempt=1,
        failed=[
            FailedRequirement(
                gate="tests",
                requirement="tests must pass",
                evidence=Evidence(exit_code=1),
                required_correction="make the command exit 0",
            )
        ],
        passing=["scope"],
        human_feedback=["collapse runs of hyphens"],
    )
    return TaskResult(
        task_id="fix-slugify",
        state=TaskState.AWAITING_APPROVAL,
        attempts=[
            AttemptRecord(
                attempt=1,
                make=MakeResult(
                    attempt=1, exit_code=0, claim="All tests pass now.", duration_s=1.5,
                    changed_files=["slugify.py"], ignored_files=["build/x.pyc"],
                ),
                verdict=failed,
                fingerprint="abc",
            ),
            AttemptRecord(
                attempt=2,
                make=MakeResult(attempt=2, exit_code=0, claim="Fixed for real.", commit="c2"),
                verdict=passed,
                feedback=fed,
            ),
        ],
        events=[
            TraceEvent(at="2026-05-01T11:59:00Z", kind="attempt", detail="attempt 1 of 3"),
            TraceEvent(at="2026-05-01T11:59:30Z", kind="signal", detail="approve: ok (by ann)"),
        ],
    )  # fmt: skip


# --------------------------------------------------------------------------- the list


def test_waiting_tasks_come_first_then_running_then_ended() -> None:
    listings = [
        task_list.Listing("done-old", "DONE_WITH_EVIDENCE", False, 1, 0.5, "/r",
                          NOW - timedelta(days=2), max_attempts=3),
        task_list.Listing("running", "RUNNING", True, 1, 0.0, "/r", NOW - timedelta(seconds=20),
                          status=status("running", TaskState.RUNNING, phase="make")),
        task_list.Listing("waits", "AWAITING_APPROVAL", True, 2, 0.02, "/r",
                          NOW - timedelta(hours=3), goal="\n  Fix the slugs\nmore",
                          status=status("waits", TaskState.AWAITING_APPROVAL,
                                        waiting_for="approve/reject")),
        task_list.Listing("done-new", "BLOCKED", False, 2, 1.25, "/q", NOW - timedelta(minutes=5),
                          reason="protected path touched: tests/test_a.py"),
    ]  # fmt: skip
    rows = task_list.task_rows(listings, NOW)
    assert [r.task_id for r in rows] == ["waits", "running", "done-new", "done-old"]
    waits, running, blocked, old = rows
    assert waits.waiting and waits.state == "AWAITING_APPROVAL"
    assert waits.attempt == "2 of 3"  # used 2 + left 1
    assert waits.waits_for == "a person: approval (loop approve, or loop reject)"
    assert waits.reason.startswith("verified") and waits.goal == "Fix the slugs"
    assert waits.age == "3 h" and waits.cost == "$0.0200"
    assert running.waits_for == "the worker (make)" and running.phase == "make"
    assert running.age == "20 s" and not running.waiting
    assert blocked.waits_for == "" and blocked.attempt == "2" and blocked.cost == "$1.25"
    assert blocked.reason == "protected path touched: tests/test_a.py"  # the memo's, listed
    assert old.attempt == "1 of 3" and old.age == "2 d"


def test_an_open_task_that_does_not_answer_says_so() -> None:
    (row,) = task_list.task_rows([task_list.Listing("x", "RUNNING", True, started=NOW)], NOW)
    assert row.waits_for == "a worker (no answer to the status query)"


# --------------------------------------------------------------------------- budget bars


def test_budget_bars_against_limits_in_force() -> None:
    st = status("x", TaskState.NEEDS_HUMAN, waiting_for="feedback/extend_budget/reject")
    limits = spending.limits_of(st)
    assert (limits.attempts, limits.seconds, limits.tokens) == (3, 120.0, None)
    assert limits.cost_usd == pytest.approx(0.10)
    attempts, seconds, tokens, cost = spending.budget_bars(st.budget.used, limits)
    assert (attempts.text, attempts.percent, attempts.level) == ("2 of 3", 66.7, "ok")
    assert (seconds.text, seconds.percent) == ("30.0 s of 120.0 s", 25.0)
    assert (tokens.text, tokens.percent, tokens.level) == ("800 (no limit)", 0.0, "none")
    assert cost.text == "$0.0200 of $0.1000" and cost.percent == 20.0


def test_a_spent_budget_is_full_and_marked_over() -> None:
    spent = spending.bar("attempts", 3, 3)
    assert (spent.percent, spent.level) == (100.0, "over")
    assert spending.bar("cost", 0.9, 1.0).level == "high"
    assert spending.bar("tokens", 5000, 1000).percent == 100.0  # never drawn past the end


def test_a_closed_task_without_a_status_uses_its_trace() -> None:
    used = spending.used_of(trace())
    assert used.attempts == 2 and used.tokens == 0


# --------------------------------------------------------------------------- timeline


def test_timeline_puts_the_claim_next_to_the_verdict_and_the_feedback_between() -> None:
    first, second = timeline.timeline(trace(), open_=True)
    assert first.outcome == "failed" and second.outcome == "passed"
    assert first.claim == "All tests pass now." and first.verdict == "tests FAIL, scope pass"
    tests, scope = first.gates
    assert (tests.verdict, tests.exit_code, tests.log) == ("FAIL", "1", "gate-tests.log")
    assert tests.output_tail == "FAIL: test_runs_of_spaces"
    assert (scope.verdict, scope.files) == ("pass", ["slugify.py"])
    assert scope.detail == "1 changed file(s)"
    assert scope.log == ""  # only run gates keep a log
    assert first.agent.startswith("exit 0 · 1.5 s")
    assert first.notes == ["ignored by git, so not judged: build/x.pyc"]
    # What attempt 1's verdict became is what attempt 2 was given.
    assert first.fed is not None and first.fed == second.took
    assert first.fed.failed == [("tests", "tests must pass", "make the command exit 0")]
    assert first.fed.human == ["collapse runs of hyphens"] and first.fed.passing == ["scope"]
    assert second.fed is None and first.took is None


def test_an_attempt_still_running_and_a_blocked_one() -> None:
    result = trace()
    result.attempts.append(AttemptRecord(attempt=3))
    assert timeline.timeline(result, open_=True)[-1].outcome == "running"
    assert timeline.timeline(result, open_=False)[-1].outcome == "no verdict"
    result.attempts[-1].verdict = Verdict(
        passed=False, gates=[gate("scope", False).model_copy(update={"policy_violation": True})]
    )
    last = timeline.timeline(result)[-1]
    assert last.outcome == "blocked" and last.gates[0].verdict == "BLOCKED"


def test_an_attempt_shows_its_model_calls_as_the_gateway_measured_them() -> None:
    result = trace()
    made = result.attempts[0].make
    assert made is not None
    result.attempts[0].make = made.model_copy(
        update={"metered": True, "model_calls": 2, "gateway_refused": ["GET /v1/files"]}
    )
    calls = "\n".join(json.dumps(c) for c in [
        {"model": "gpt-4o-mini", "status": 200, "tokens_in": 400, "tokens_out": 20,
         "cost_usd": 0.000072, "ms": 12.5},
        {"model": "<b>x</b>", "status": 400, "tokens_in": "9e9", "tokens_out": True},
        "not a call",
    ]) + '\n{"path": "/v1/chat/comp'  # the line a crash cut  # fmt: skip
    rows = timeline.call_rows(calls)
    assert [(r.model, r.status, r.tokens_in, r.tokens_out) for r in rows] == [
        ("gpt-4o-mini", "200", 400, 20), ("<b>x</b>", "400", 0, 0)
    ]  # fmt: skip
    assert (rows[0].cost, rows[0].ms, rows[1].cost) == ("$0.0001", "12 ms", "")
    assert timeline.call_rows("{broken") == [] and timeline.call_rows('{"a": 1}') == []
    first = timeline.timeline(result, calls={1: rows})[0]
    assert first.calls == rows and "2 model calls through the gateway" in first.agent
    assert "refused by the model gateway: GET /v1/files" in first.notes


def test_events_mark_the_decisions_and_who_made_them() -> None:
    attempt, signal = task_panels.events(trace())
    assert not attempt.decision
    assert signal.decision and signal.detail == "approve: ok (by ann)"


# --------------------------------------------------------------------------- decisions


@pytest.mark.parametrize(
    ("state", "waiting_for", "shown"),
    [
        (TaskState.AWAITING_APPROVAL, "approve/reject", "approve,reject"),
        (TaskState.NEEDS_HUMAN, "feedback/extend_budget/reject", "reject,feedback,extend"),
        (TaskState.NEEDS_HUMAN, "approve/reject", "approve,reject"),  # a merge to retry
        (TaskState.RUNNING, "", "feedback,extend"),
    ],
)
def test_decisions_shown_are_the_ones_that_apply(
    state: TaskState, waiting_for: str, shown: str
) -> None:
    d = task_panels.decisions(status("t", state, waiting_for=waiting_for))
    assert d.key == shown
    assert d.hint.startswith("loop ") == bool(waiting_for)


def test_a_closed_task_takes_no_decision() -> None:
    assert task_panels.decisions(None).key == "none" and not task_panels.decisions(None).any


def test_a_form_becomes_a_payload_with_who_decided() -> None:
    form = {"note": " ok ", "commit": " 0a1b2c3d "}
    assert payload_for("approve", form, "ann", "page:ab:approve").model_dump() == {
        "note": "ok",
        "by": "ann",
        "at": "",  # stamped and signed when it is sent (loop.tasks.signed)
        "signature": "",
        "commit": "0a1b2c3d",
        "answer_id": "page:ab:approve",
        "candidate": "",
    }
    chosen = payload_for("approve", {"candidate": " two ", "commit": "0a1b2c3d"}, "ann")
    assert (chosen.candidate, chosen.commit) == ("two", "0a1b2c3d")
    assert payload_for("reject", {"reason": "no"}, "ann").reason == "no"
    ext = payload_for("extend", {"attempts": "2", "cost_usd": "0.5", "tokens": ""}, "bo")
    assert (ext.attempts, ext.cost_usd, ext.tokens, ext.by) == (2, 0.5, 0, "bo")
    for answer, form, words in [
        ("reject", {"reason": "  "}, "say why"),
        ("feedback", {"text": ""}, "feedback text is empty"),
        ("extend", {"attempts": "0"}, "nothing to add"),
        ("extend", {"attempts": "x"}, "not a number"),
        ("extend", {"seconds": "-5"}, "negative"),
    ]:
        with pytest.raises(BadInput, match=words):
            payload_for(answer, form, "ann")


# --------------------------------------------------------------------------- eval, ledgers


def report() -> EvalReport:
    return EvalReport.model_validate(
        {
            "suite": "demo", "suite_hash": "f" * 64, "run": "ab12cd",
            "harnesses": [
                {"harness": "careful", "cases": 2, "accepted": 2, "pass_rate": 1.0,
                 "mean_attempts": 1.5, "tokens": 0, "cost_usd": 0.4, "cost_per_accepted": 0.2,
                 "escalations": 0, "seconds": 9.0},
                {"harness": "hasty", "cases": 2, "accepted": 0, "pass_rate": 0.0,
                 "mean_attempts": 3.0, "tokens": 0, "cost_usd": 0.1, "cost_per_accepted": None,
                 "escalations": 2, "seconds": 4.0},
            ],
            "outcomes": [
                {"harness": "careful", "case": "clamp", "task_id": "ev-c-clamp",
                 "state": "DONE_WITH_EVIDENCE", "accepted": True, "attempts": 2,
                 "fail_to_pass": "2/2"},
                {"harness": "hasty", "case": "clamp", "task_id": "ev-h-clamp",
                 "state": "NEEDS_HUMAN", "accepted": False, "attempts": 3},
            ],
            "flipped": [{"case": "clamp", "before": "DONE_WITH_EVIDENCE", "after": "NEEDS_HUMAN"}],
        }
    )  # fmt: skip


def test_eval_charts_and_flipped_cases_linked_to_their_tasks() -> None:
    v = evals.eval_view(report())
    rate, attempts, cost = v.charts
    assert [(b.label, b.text, b.percent) for b in rate.bars] == [
        ("careful", "100%", 100.0),
        ("hasty", "0%", 0.0),
    ]
    assert [b.percent for b in attempts.bars] == [50.0, 100.0]
    assert [b.text for b in cost.bars] == ["$0.2000", "-"]  # none accepted: no cost per task
    (flip,) = v.flips
    assert flip.tasks == [("careful", "ev-c-clamp"), ("hasty", "ev-h-clamp")]
    assert v.cases == [
        (
            "clamp",
            [
                ("DONE_WITH_EVIDENCE", "2", "ev-c-clamp", "2/2"),
                ("NEEDS_HUMAN", "3", "ev-h-clamp", ""),
            ],
        )
    ]


def test_eval_results_file_is_read_leniently() -> None:
    good = report().model_dump(mode="json")
    text = json.dumps({"runs": [good, {"suite": 1}]})
    assert [r.run for r in evals.eval_runs(text)] == ["ab12cd"]
    assert evals.eval_runs("not json") == [] and evals.eval_runs("") == []


def test_ledger_bars_spent_reserved_left() -> None:
    state = LedgerState(
        repo="/srv/r",
        limits=PeriodLimits(cost_per_day=10.0, tokens_per_day=None),
        days={"2026-05-01": DaySpend(cost_usd=4.0, reserved_cost_usd=1.0, tokens=1000)},
        open={"t-1": Reservation(day="2026-05-01", cost_usd=1.0)},
    )
    v = ledger.ledger_view(state, "2026-05-01")
    cost, tokens = v.bars
    assert [(s.kind, s.text, s.percent) for s in cost.segments] == [
        ("spent", "$4.0000", 40.0),
        ("reserved", "$1.0000", 10.0),
        ("left", "$5.0000", 50.0),
    ]
    assert cost.limit == "$10.0000" and not cost.over
    assert tokens.limit == "no limit" and [s.kind for s in tokens.segments] == ["spent"]
    assert v.open_reservations == 1
    empty = ledger.ledger_view(state, "2026-05-02").bars[0]
    assert [s.percent for s in empty.segments] == [0.0, 0.0, 100.0]


# --------------------------------------------------------------------------- the diff

SLUGIFY_PATCH = """diff --git a/slugify.py b/slugify.py
index 1111111..2222222 100644
--- a/slugify.py
+++ b/slugify.py
@@ -1,4 +1,5 @@
 \"\"\"Turn titles into URL slugs.\"\"\"
+import re
@SPACE@
 def slugify(text: str) -> str:
-    return text.lower()
+    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))
""".replace("@SPACE@", " ")


def slugify_diff(patch: str = SLUGIFY_PATCH) -> list[diffs.DiffFile]:
    return diffs.highlight([diffs.parse_patch(patch, diffs.DiffFile(path="slugify.py"))])


@pytest.fixture
def changed_repo(tmp_path: Path) -> tuple[Path, str, str]:
    """A repository whose second commit modifies, adds, deletes, renames and changes a
    binary file."""
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "slugify.py").write_text(
        '"""Turn titles into URL slugs."""\n\ndef slugify(text: str) -> str:\n'
        "    return text.lower()\n"
    )
    (repo / "old.txt").write_text("bye\n")
    (repo / "a.py").write_text("".join(f"line = {i}\n" for i in range(20)))
    (repo / "logo.png").write_bytes(b"\x89PNG\0\0\1")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "slugify.py").write_text(
        '"""Turn titles into URL slugs."""\nimport re\n\ndef slugify(text: str) -> str:\n'
        '    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))\n'
    )
    (repo / "notes").mkdir()
    (repo / "notes" / "new.md").write_text("# hello")
    (repo / "old.txt").unlink()
    git(repo, "mv", "a.py", "b.py")
    (repo / "logo.png").write_bytes(b"\x89PNG\0\0\2")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "attempt")
    return repo, base, git(repo, "rev-parse", "HEAD")


async def test_a_diff_is_read_per_file_with_line_numbers(changed_repo) -> None:
    repo, base, commit = changed_repo
    diff = await git_diff(str(repo), base, commit)
    files = sorted(diff.files, key=lambda f: f.path)
    assert [(f.path, f.status, f.additions, f.deletions) for f in files] == [
        ("b.py", "renamed", 0, 0),
        ("logo.png", "binary", 0, 0),
        ("notes/new.md", "added", 1, 0),
        ("old.txt", "deleted", 0, 1),
        ("slugify.py", "modified", 2, 1),
    ]
    lines = files[4].lines
    assert [ln.kind for ln in lines] == ["hunk", "ctx", "add", "ctx", "ctx", "del", "add"]
    assert [(ln.old, ln.new) for ln in lines[1:]] == [
        (1, 1), (None, 2), (2, 3), (3, 4), (4, None), (None, 5)
    ]  # fmt: skip
    assert files[2].lines[-1].kind == "note" and files[0].old_path == "a.py"
    assert files[4].anchor == "file-slugify-py"
    assert not any(f.unfaithful for f in files) and not diff.cut


def test_the_diff_is_coloured_by_pygments_and_escaped() -> None:
    (f,) = slugify_diff()
    html = {ln.kind + str(ln.new): ln.html for ln in f.lines}
    assert '<span class="kn">import</span>' in html["add2"]
    assert '<span class="k">def</span>' in html["ctx4"]
    assert '<span class="s2">' in html["add5"] and '<span class="sa">r</span>' in html["add5"]
    (evil,) = slugify_diff(SLUGIFY_PATCH.replace("import re", "<script>alert(1)</script>"))
    assert "<script>" not in evil.lines[2].html and "&lt;" in evil.lines[2].html


def test_a_hunk_takes_exactly_the_lines_its_header_counts() -> None:
    """Form feeds, separators and a fake file header inside a line stay in that line."""
    patch = (
        "diff --git a/s.py b/s.py\n--- a/s.py\n+++ b/s.py\n@@ -1,1 +1,4 @@\n"
        "-x = 1\n+x = 2\n+\x0cdiff --git a/docs/CHANGELOG.md b/docs/CHANGELOG.md\n"
        "+evil = 1\u2028hidden = 2\r\n+\u202etxt.exe\n"
    )
    (f,) = diffs.highlight([diffs.parse_patch(patch, diffs.DiffFile(path="s.py"))])
    assert (f.additions, f.deletions, f.unfaithful) == (4, 1, "")
    assert [ln.kind for ln in f.lines] == ["hunk", "del", "add", "add", "add", "add"]
    assert "diff --git" in f.lines[3].text and "␌" in f.lines[3].html
    assert "⟦U+2028⟧" in f.lines[4].html and "␍" in f.lines[4].html
    assert '<span class="cc" title="U+202E">⟦U+202E⟧</span>' in f.lines[5].html
    short = diffs.parse_patch(patch.replace("+1,4", "+1,6"), diffs.DiffFile(path="s.py"))
    assert short.unfaithful == "the patch ended inside a hunk"


def test_a_string_across_lines_stays_one_colour() -> None:
    out = diffs.highlight_lines(['x = """first', 'second"""', "y = 1"], diffs.lexer_for("a.py"))
    assert len(out) == 3
    assert 'class="s2"' in out[1] or 'class="sd"' in out[1]
    assert '<span class="n">y</span>' in out[2]


def test_unknown_files_are_plain_text_and_css_is_scoped() -> None:
    out = diffs.highlight_lines(["a <b> & c"], diffs.lexer_for("notes.unknownext"))
    assert out == ["a &lt;b&gt; &amp; c"]
    assert ".hl .k" in diffs.css()


# --------------------------------------------------------------------------- bind and tokens


def test_bind_parsing() -> None:
    assert parse_bind("127.0.0.1:8300").loopback
    assert parse_bind("localhost:0").loopback
    assert parse_bind("[::1]:8300").loopback and parse_bind("[::1]:8300").host == "::1"
    assert not parse_bind("0.0.0.0:8300").loopback
    assert not parse_bind("example.org:80").loopback
    for bad in ("8300", "127.0.0.1", "127.0.0.1:99999", ":8300", "[zz]:1", "a b:1"):
        with pytest.raises(BadInput, match="--bind"):
            parse_bind(bad)


def test_tokens_and_who_they_name() -> None:
    secret = "s" * 20
    assert parse_tokens(f"ann:{secret}, bo:{'t' * 16}") == {secret: "ann", "t" * 16: "bo"}
    assert parse_tokens(secret) == {secret: "token"}
    assert parse_tokens("") == {}
    with pytest.raises(BadInput, match="shorter than 16"):
        parse_tokens("ann:short")
    with pytest.raises(BadInput, match="not a token name"):
        parse_tokens(f"a b:{secret}")


def test_beyond_loopback_needs_a_token(tmp_path: Path) -> None:
    kw: dict[str, Any] = {"home": tmp_path, "task_queue": "q", "local_user": "me"}
    with pytest.raises(BadInput, match="LOOP_UI_TOKEN"):
        ui_config("0.0.0.0:8300", {}, **kw)
    assert ui_config("0.0.0.0:8300", {"LOOP_UI_TOKEN": "ann:" + "x" * 16}, **kw).tokens
    assert ui_config("127.0.0.1:8300", {}, **kw).tokens == {}


# --------------------------------------------------------------------------- the guard


class FakeSource:
    """Stands in for Temporal: one task waiting for approval, answers recorded."""

    def __init__(self, refuse: str = "") -> None:
        self.sent: list[tuple[str, str, Any]] = []
        self.refuse = refuse

    async def listings(self, state: str = "", repo: str = "") -> list[task_list.Listing]:
        st = status("t1", TaskState.AWAITING_APPROVAL, waiting_for="approve/reject")
        return [task_list.Listing("t1", "AWAITING_APPROVAL", True, started=NOW, status=st)]

    async def repos(self) -> list[str]:
        return ["/r"]

    async def task(self, task_id: str) -> TaskPage:
        st = status(task_id, TaskState.AWAITING_APPROVAL, waiting_for="approve/reject")
        return TaskPage(
            task_id=task_id, workflow_id=f"task-{task_id}", run_id="r", open=True, closed_as="",
            spec=None, result=trace(), status=st, used=st.budget.used,
            limits=spending.limits_of(st), limits_note="", temporal_ui="http://ui/x", started=NOW,
        )  # fmt: skip

    async def diff(self, page: TaskPage) -> Diff:
        return Diff(files=slugify_diff(), base="b" * 40, commit="c" * 40)

    async def candidate_diffs(self, page: TaskPage, commits: dict[str, str]) -> dict[str, Diff]:
        return {name: await self.diff(page) for name in commits}

    async def answer(self, task_id: str, answer: str, payload: Any) -> AnswerReply:
        if self.refuse:
            raise BadInput(self.refuse)
        self.sent.append((task_id, answer, payload))
        return AnswerReply(did="approved; merge of loop/t1 into main requested")


def app_client(tmp_path: Path, source: FakeSource, tokens: dict[str, str] | None = None):
    config = UiConfig(
        bind=parse_bind("127.0.0.1:8300"),
        home=tmp_path,
        task_queue="q",
        local_user="me",
        tokens=tokens or {},
    )
    client = SimpleNamespace(
        service_client=SimpleNamespace(config=SimpleNamespace(target_host="h:7233")),
        namespace="default",
    )
    app = create_app(config, client, source=source)  # type: ignore[arg-type]
    return TestClient(app, base_url="http://127.0.0.1:8300")


ORIGIN = {"Origin": "http://127.0.0.1:8300"}


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)  # type: ignore[union-attr]


def test_the_task_page_shows_the_answers_that_apply(tmp_path: Path) -> None:
    web = app_client(tmp_path, FakeSource())
    page = web.get("/tasks/t1")
    assert page.status_code == 200
    assert 'action="/tasks/t1/approve"' in page.text and 'action="/tasks/t1/reject"' in page.text
    assert "/feedback" not in page.text and "/extend" not in page.text
    assert '<span class="k">def</span>' in page.text  # the highlighted diff
    assert page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]


def test_an_honest_answer_is_sent_with_who_decided(tmp_path: Path) -> None:
    source = FakeSource()
    web = app_client(tmp_path, source)
    token = csrf_of(web.get("/tasks/t1").text)
    sent = web.post(
        "/tasks/t1/approve", data={"csrf": token, "note": "ok"}, headers=ORIGIN,
        follow_redirects=False,
    )  # fmt: skip
    assert sent.status_code == 303 and sent.headers["location"] == "/tasks/t1"
    ((task_id, answer, payload),) = source.sent
    assert (task_id, answer, payload.note, payload.by) == ("t1", "approve", "ok", "me")
    said = "t1: approved; merge of loop/t1 into main requested"  # what the task said it did
    assert said in web.get("/tasks/t1").text  # shown once, on the next page
    assert said not in web.get("/tasks/t1").text


@pytest.mark.parametrize(
    ("headers", "with_token", "why"),
    [
        ({"Origin": "http://evil.example"}, True, "cross-site"),
        ({"Referer": "http://evil.example/page"}, True, "cross-site"),
        ({}, True, "cross-site"),  # neither Origin nor Referer
        (ORIGIN, False, "token"),
    ],
)
def test_forged_answers_are_refused_and_nothing_is_sent(
    tmp_path: Path, headers: dict[str, str], with_token: bool, why: str
) -> None:
    source = FakeSource()
    web = app_client(tmp_path, source)
    token = csrf_of(web.get("/tasks/t1").text) if with_token else ""
    refused = web.post("/tasks/t1/approve", data={"csrf": token}, headers=headers)
    assert refused.status_code == 403 and why in refused.text
    assert source.sent == []


def test_a_stale_form_gets_the_reason_not_a_signal(tmp_path: Path) -> None:
    source = FakeSource(refuse="task t1 is RUNNING; approve does not apply now")
    web = app_client(tmp_path, source)
    token = csrf_of(web.get("/tasks/t1").text)
    shown = web.post("/tasks/t1/approve", data={"csrf": token}, headers=ORIGIN)
    assert shown.status_code == 200 and "approve does not apply now" in shown.text
    assert source.sent == []


def test_without_a_token_only_loopback_names_are_answered(tmp_path: Path) -> None:
    web = app_client(tmp_path, FakeSource())
    assert web.get("/", headers={"Host": "rebound.example:8300"}).status_code == 403
    assert web.get("/", headers={"Host": "localhost:8300"}).status_code == 200


def test_with_a_token_a_browser_signs_in_and_a_script_sends_a_bearer(tmp_path: Path) -> None:
    secret = "x" * 24
    source = FakeSource()
    web = app_client(tmp_path, source, {secret: "ann"})
    first = web.get("/tasks/t1", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"].startswith("/login?next=")
    assert web.get("/", headers={"X-Live": "1"}).status_code == 401
    wrong = web.post("/login", data={"token": "y" * 24}, headers=ORIGIN)
    assert wrong.status_code == 401 and "wrong token" in wrong.text
    signed = web.post("/login", data={"token": secret, "next": "/tasks/t1"}, headers=ORIGIN)
    assert signed.status_code == 200 and "ann" in signed.text
    token = csrf_of(signed.text)
    web.post("/tasks/t1/reject", data={"csrf": token, "reason": "no"}, headers=ORIGIN)
    assert source.sent[-1][2].by == "ann"
    # A script: no cookie, no form token, no Origin; the bearer header is the proof.
    script = app_client(tmp_path, source, {secret: "ann"})
    bearer = {"Authorization": f"Bearer {secret}"}
    assert script.get("/", headers=bearer).status_code == 200
    done = script.post("/tasks/t1/approve", data={"note": "ci"}, headers=bearer)
    assert done.status_code == 200 and done.json()["sent"] is True
    wrong_bearer = {"Authorization": "Bearer " + "n" * 24}
    assert script.get("/", headers=wrong_bearer, follow_redirects=False).status_code == 303
    assert script.post("/tasks/t1/approve", headers=wrong_bearer).status_code == 403


def test_login_never_redirects_off_site(tmp_path: Path) -> None:
    secret = "x" * 24
    web = app_client(tmp_path, FakeSource(), {secret: "ann"})
    for target in ("//evil.example/", "https://evil.example/", "/\\evil"):
        went = web.post(
            "/login", data={"token": secret, "next": target}, headers=ORIGIN,
            follow_redirects=False,
        )  # fmt: skip
        assert went.headers["location"] == "/"


def test_the_source_reads_an_attempts_calls_and_transcripts_from_the_worker_files(
    tmp_path: Path,
) -> None:
    from loop.ui.source import Source

    source = Source(client=None, home=tmp_path, task_queue="q")  # type: ignore[arg-type]
    attempt = source.runs / "t1" / "attempt-1"
    attempt.mkdir(parents=True)
    (attempt / "calls.jsonl").write_text(json.dumps({"model": "m", "status": 200}) + "\n")
    (attempt / "call-0001.log").write_text("POST /v1/chat/completions")
    (attempt / "call-1.log").write_text("not a transcript's name")
    other = source.runs / "t1" / "attempt-2"
    other.mkdir()
    (tmp_path / "elsewhere.json").write_text(json.dumps({"model": "leak", "status": 200}))
    (other / "calls.jsonl").symlink_to(tmp_path / "elsewhere.json")  # never followed
    assert [r.model for r in source.calls_of("t1")[1]] == ["m"] and 2 not in source.calls_of("t1")
    assert "attempt-1/call-0001.log" in source.logs_of("t1")
    assert "attempt-1/call-1.log" not in source.logs_of("t1")
    assert source.read_log("t1", "attempt-1/call-0001.log")[0] == "POST /v1/chat/completions"


def test_candidates_side_by_side_and_only_the_waiting_ones_approvable() -> None:
    """Each candidate's gates, spend and verdict; while several wait for a person, an
    Approve for each waiting one (its commit) and none for the others; a running one
    shows its own figures so far, from its workflow."""
    from loop.contracts import AttemptRecord, CandidateRecord, CandidateView

    t = trace()
    one, two = t.attempts
    t.candidates = [
        CandidateRecord(name="one", state=TaskState.DONE_WITH_EVIDENCE, attempts=[two],
                        commit="a" * 40, tokens=10, cost_usd=0.01, changed_lines=3),
        CandidateRecord(name="two", state=TaskState.NEEDS_HUMAN, attempts=[one],
                        reason="attempts exhausted"),
        CandidateRecord(name="three", state=TaskState.RUNNING,
                        attempts=[AttemptRecord(attempt=1)]),
    ]  # fmt: skip
    st = status("t1", TaskState.AWAITING_APPROVAL, waiting_for="approve/reject")
    st.candidates = [
        CandidateView(name="one", commit="b" * 40, state=TaskState.DONE_WITH_EVIDENCE),
        CandidateView(name="two", state=TaskState.NEEDS_HUMAN),
        CandidateView(name="three", phase="verify", attempt=2, tokens=500, cost_usd=0.5,
                      last_verdict="tests FAIL"),
    ]  # fmt: skip
    rows = {r.name: r for r in task_panels.candidate_rows(t, st)}
    assert rows["one"].approvable and rows["one"].commit == "b" * 40  # the commit waiting
    assert not rows["two"].approvable and not rows["three"].approvable
    assert [g.name for g in rows["one"].gates] == ["tests", "scope"]
    assert rows["two"].reason == "attempts exhausted" and rows["two"].commit == ""
    three = rows["three"]
    assert (three.state, three.attempts, three.verdict) == ("RUNNING (verify)", 2, "tests FAIL")
    assert "500" in three.spent
    # The task waiting with one commit of its own (no candidates waiting): none approvable.
    st.commit = "c" * 40
    assert not any(r.approvable for r in task_panels.candidate_rows(t, st))
    assert not any(r.approvable for r in task_panels.candidate_rows(t, None))
