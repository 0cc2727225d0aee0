"""The eval page: an eval run's charts per harness, its cases and the cases that flipped."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from loop.contracts import EvalReport


@dataclass
class ChartBar:
    label: str
    value: float | None
    text: str
    percent: float
    link: str = ""


@dataclass
class Chart:
    title: str
    bars: list[ChartBar]
    note: str = ""


def chart(
    title: str, values: list[tuple[str, float | None]], fmt: str, *, top: float | None = None
) -> Chart:
    """Horizontal bars scaled to ``top`` (default: the largest value)."""
    known = [v for _, v in values if v is not None and math.isfinite(v)]
    scale = top if top is not None else (max(known) if known else 0.0)
    bars = []
    for label, v in values:
        if v is None:
            bars.append(ChartBar(label, None, "-", 0.0))
            continue
        pct = 0.0 if scale <= 0 else min(100.0, 100.0 * v / scale)
        bars.append(ChartBar(label, v, fmt.format(v), round(pct, 1)))
    return Chart(title, bars)


@dataclass
class FlipRow:
    case: str
    before: str
    after: str
    tasks: list[tuple[str, str]]
    """(harness, task id) of the case under each harness."""


@dataclass
class EvalView:
    suite: str
    run: str
    suite_hash: str
    harnesses: list[str]
    charts: list[Chart]
    cases: list[tuple[str, list[tuple[str, str, str, str]]]]
    """Per case: (state, attempts, task id, FAIL_TO_PASS passed/required) under each
    harness."""
    flips: list[FlipRow]


def eval_runs(text: str) -> list[EvalReport]:
    """The runs kept in ``eval-results.json`` (newest first); a run that does not decode
    is left out rather than hiding the others."""
    try:
        data = json.loads(text or "{}")
    except ValueError:
        return []
    runs = data.get("runs", []) if isinstance(data, dict) else []
    found = []
    for r in runs:
        try:
            found.append(EvalReport.model_validate(r))
        except ValueError:
            continue
    return found


def eval_view(r: EvalReport) -> EvalView:
    names = [h.harness for h in r.harnesses]
    charts = [
        chart("pass rate", [(h.harness, h.pass_rate) for h in r.harnesses], "{:.0%}", top=1.0),
        chart("mean attempts", [(h.harness, h.mean_attempts) for h in r.harnesses], "{:.2f}"),
        chart(
            "cost per accepted task",
            [(h.harness, h.cost_per_accepted) for h in r.harnesses],
            "${:.4f}",
        ),
    ]
    if any(h.cost_per_accepted is None for h in r.harnesses):
        charts[2].note = "-: no task accepted, so no cost per accepted task"
    if any(h.k > 1 for h in r.harnesses):  # a harness with candidates: k tries per case
        charts += [
            chart("pass@1", [(h.harness, h.pass_at_1) for h in r.harnesses], "{:.0%}", top=1.0),
            chart(
                "pass@k",
                [(f"{h.harness} (k={h.k})", h.pass_at_k) for h in r.harnesses],
                "{:.0%}",
                top=1.0,
            ),
        ]
    by_case: dict[str, dict[str, tuple[str, str, str, str]]] = {}
    for o in r.outcomes:
        cell = (str(o.state), str(o.attempts), o.task_id, o.fail_to_pass)
        by_case.setdefault(o.case, {})[o.harness] = cell
    cases = [
        (case, [cells.get(h, ("-", "", "", "")) for h in names]) for case, cells in by_case.items()
    ]
    flips = [
        FlipRow(
            f.case,
            str(f.before),
            str(f.after),
            [(h, by_case.get(f.case, {}).get(h, ("", "", "", ""))[2]) for h in names],
        )
        for f in r.flipped
    ]
    return EvalView(r.suite, r.run, r.suite_hash[:12], names, charts, cases, flips)
