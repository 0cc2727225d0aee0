"""The status comment on a task's issue: what it says, and that nothing an agent, a gate
or an issue wrote can mention anyone, make HTML, a link or an image, or break the table."""

from __future__ import annotations

import re

from loop.contracts import WAITING_PULL_REQUEST, Evidence, GateResult, TaskState
from loop.hardened.text import for_github
from loop.rules.status import comment, view

HOSTILE = (
    "@octocat @acme/owners <img src=x onerror=alert(1)> [click](https://evil.example) "
    "![pixel](https://evil.example/p.png) `code` | cell\nnew row \x1b[32mPASS\x1b[0m \u202e"
)


def test_hostile_text_is_one_inert_line():
    shown = for_github(HOSTILE)
    assert "\n" not in shown and "@" not in shown and "<" not in shown and ">" not in shown
    assert "\x1b" not in shown and "\u202e" not in shown
    assert "](" not in shown and "![" not in shown and "`" not in shown.replace("\\`", "")
    assert re.search(r"(?<!\\)\|", shown) is None, "no unescaped cell separator"
    assert shown.startswith("＠octocat ＠acme/owners &lt;img")
    assert len(for_github("x" * 1000)) == 300


def test_the_comment_says_state_attempt_reason_and_each_gate():
    gates = [
        GateResult(name="tests", kind="run", passed=True, evidence=Evidence(exit_code=0)),
        GateResult(
            name="scope", kind="diff_scope", passed=False, evidence=Evidence(detail=HOSTILE)
        ),
    ]
    shown = view(
        "gh-7",
        TaskState.AWAITING_APPROVAL,
        2,
        3,
        f"verified; {HOSTILE}",
        WAITING_PULL_REQUEST,
        gates,
        "https://github.com/acme/app/pull/9",
    )
    assert shown.gates[1].said == HOSTILE, "the view keeps the words; the comment inerts them"
    body = comment(shown, for_github)
    lines = body.split("\n")
    assert lines[0] == "**Loopwork** · task `gh-7` · **AWAITING_APPROVAL** · attempt 2 of 3"
    assert "| tests | pass | exit 0 |" in lines
    (scope,) = [line for line in lines if line.startswith("| scope |")]
    assert scope.startswith("| scope | **fail** | ＠octocat")
    assert len(re.findall(r"(?<!\\)\|", scope)) == 4, "the hostile cell stays one cell"
    assert "Waits for its pull request merged or closed on GitHub" in body
    assert "@" not in body and "<img" not in body and "](https://evil" not in body
    assert "Commit to approve" not in body  # it waits for its pull request, not an approval
    waiting = view("gh-7", TaskState.AWAITING_APPROVAL, 1, 3, "verified", "approve/reject", [],
                   "", "3f2a9c1b7d40" + "0" * 28)  # fmt: skip
    assert "\n\nCommit to approve: `3f2a9c1b7d40" in comment(waiting, for_github)
