"""Triage without a server: the policy (task ids, whether to attempt an item, autonomy
caps) and the sources file. Discovery and the workflow on a real server are in
tests/e2e/test_triage.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loop.contracts import (
    Autonomy,
    ExistingTask,
    LabelFilter,
    TaskSpec,
    TriageItem,
    TriagePolicy,
    is_valid_task_id,
    workflow_id_for,
)
from loop.errors import TaskFileError
from loop.loaders import load_sources
from loop.rules import triage as policy
from tests.support.agents import write_agent
from tests.support.triage import NOTHING, template, write_sources

# --------------------------------------------------------------------------- pure policy


def test_task_ids_are_valid_stable_and_distinct():
    assert policy.task_id_for("issues", "42") == "issues-42"
    long = policy.task_id_for("issues", "x" * 200)
    assert len(long) <= 63 and is_valid_task_id(long)
    assert long == policy.task_id_for("issues", "x" * 200)
    a, b = policy.task_id_for("gh", "Fix Login"), policy.task_id_for("gh", "fix-login")
    assert a != b and is_valid_task_id(a) and b == "gh-fix-login"
    assert workflow_id_for(policy.task_id_for("issues", "42")) == "task-issues-42"


def test_a_github_sources_task_ids_name_its_repository():
    """Two sources named ``gh`` in two repositories: issue 42 of each is its own task."""
    app, lib = (
        policy.task_id_for("gh", "42", "acme/app"),
        policy.task_id_for("gh", "42", "acme/lib"),
    )
    assert (app, lib) == ("gh-acme-app-42", "gh-acme-lib-42")
    assert policy.task_id_for("gh", "42", "Acme/App") == app  # GitHub's names ignore case
    long = policy.task_id_for("gh", "42", "an-organisation/" + "r" * 90)
    assert len(long) <= 63 and is_valid_task_id(long)
    assert long != policy.task_id_for("gh", "42", "an-organisation/" + "r" * 91)


def test_an_items_former_id_is_the_one_before_ids_named_the_repository():
    from activities.discover import github_item
    from loop.contracts import GitHubSource

    source = GitHubSource(name="gh", kind="github", repo="acme/app", template={"repo": "/r"})
    item = github_item(source, {"number": 7, "title": "t", "state": "closed"})
    assert (item.task_id, item.former_id) == ("gh-acme-app-7", "gh-7")


def test_should_attempt_running_cooldown_done():
    now = datetime(2026, 1, 2, tzinfo=UTC)
    spec = TaskSpec.model_validate(
        {
            "id": "s-1",
            "goal": "g",
            "repo": "/r",
            "agent": {"command": ["a"]},
            "verify": [{"name": "t", "run": "true"}],
        }
    )
    item = TriageItem(source="s", key="1", task_id="s-1", labels=["bug"], spec=spec)
    rule, pol = LabelFilter(), TriagePolicy(cooldown=3_600)

    def ended(state: str, ago: timedelta, status: str = "COMPLETED") -> ExistingTask:
        return ExistingTask(task_id="s-1", status=status, state=state, closed_at=now - ago)

    assert policy.should_attempt(item, rule, None, pol, now) == (True, "new item")
    running = ExistingTask(task_id="s-1", status="RUNNING", state="NEEDS_HUMAN")
    assert policy.should_attempt(item, rule, running, pol, now) == (
        False,
        "task open (NEEDS_HUMAN)",
    )
    ok, why = policy.should_attempt(item, rule, ended("BLOCKED", timedelta(minutes=5)), pol, now)
    assert not ok and why == "task ended BLOCKED 5m ago; cool-down 60m"
    ok, why = policy.should_attempt(item, rule, ended("BLOCKED", timedelta(hours=2)), pol, now)
    assert ok and "cool-down over" in why
    done = ended("DONE_WITH_EVIDENCE", timedelta(days=3))
    assert policy.should_attempt(item, rule, done, pol, now) == (
        False,
        "already done (DONE_WITH_EVIDENCE)",
    )
    assert policy.should_attempt(item, rule, done, TriagePolicy(retry_done=True), now)[0]
    killed = ended("RUNNING", timedelta(seconds=10), status="TERMINATED")
    assert "ended TERMINATED" in policy.should_attempt(item, rule, killed, pol, now)[1]
    assert policy.should_attempt(item, LabelFilter(include=["docs"]), None, pol, now) == (
        False,
        "needs a label of: docs",
    )
    assert policy.should_attempt(item, LabelFilter(exclude=["BUG"]), None, pol, now) == (
        False,
        "label 'bug' is excluded",
    )


def test_autonomy_is_capped_at_the_source():
    assert policy.cap_autonomy(Autonomy.UNATTENDED, Autonomy.REPORT) == Autonomy.REPORT
    assert policy.cap_autonomy(Autonomy.REPORT, Autonomy.UNATTENDED) == Autonomy.REPORT
    assert policy.cap_autonomy(Autonomy.UNATTENDED, Autonomy.ASSISTED) == Autonomy.ASSISTED


# --------------------------------------------------------------------------- the sources file


def test_sources_file_is_strict(demo_repo: Path, tmp_path: Path):
    tmpl = template(demo_repo, write_agent(tmp_path, NOTHING))
    ci = {"name": "ci", "kind": "ci", "run": "true"}

    def error(tmpl: dict, sources: list[dict], **pol) -> str:
        with pytest.raises(TaskFileError) as info:
            load_sources(write_sources(tmp_path, tmpl, sources, **pol))
        return str(info.value)

    assert "sources.0.ci.zzz: unknown key" in error(tmpl, [{**ci, "zzz": 1}])
    assert "policy.max_runing: unknown key" in error(tmpl, [ci], max_runing=2)
    assert "unknown task-file key 'gates'" in error({**tmpl, "gates": []}, [ci])
    no_agent = {k: v for k, v in tmpl.items() if k != "agent"}
    assert "source ci: template.agent: required field is missing" in error(no_agent, [ci])
    assert "does not exist" in error({**tmpl, "repo": str(tmp_path / "nowhere")}, [ci])
    assert "appears twice" in error(tmpl, [ci, ci])
    bad_regex = {"name": "t", "kind": "todo", "pattern": "(unclosed"}
    assert "not a regular expression" in error(tmpl, [bad_regex])
    missing = {"name": "i", "kind": "issue_files", "path": "no-such-folder"}
    assert "not a folder of issue files" in error(tmpl, [missing])
    assert "does not match any of the expected tags" in error(tmpl, [{**ci, "kind": "email"}])

    relative = {**tmpl, "repo": "repo", "base": None}
    del relative["autonomy"]  # so the source's level applies
    loaded = load_sources(write_sources(tmp_path, relative, [{**ci, "autonomy": "assisted"}]))
    source = loaded.sources[0]
    assert source.template["repo"] == str(demo_repo) and source.template["base"] == "main"
    assert source.template["autonomy"] == "assisted" and loaded.template == {}
    assert "instructions" not in source.template, "only the fields that are set travel"
