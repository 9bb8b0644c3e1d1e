"""What a local review shows: a line per stage, what a quiet review still says, the short report."""

from __future__ import annotations

import io
import subprocess
import sys
from typing import Any

from app_relay.cli.progress import MAX_LINES, WIDTH, Progress, brief, worth_showing
from app_relay.cli.review import summary_object
from app_relay.verdict import ModelUse, Verdict

# --------------------------------------------------------------------------- what is shown


def test_each_stage_starts_and_ends_on_a_line_of_its_own() -> None:
    times = iter([10.0, 11.0, 14.5, 20.0])
    out = io.StringIO()
    progress = Progress(out, clock=lambda: next(times))
    progress.step("install: in_progress")
    progress.step("tests: in_progress")
    progress.step("install: completed (success)")
    progress.step("tests: completed (failure)")
    progress.step("smoke: completed (skipped)")
    assert out.getvalue().splitlines() == [
        "cujo: install ...",
        "cujo: tests ...",
        "cujo: install done (4.5s)",
        "cujo: tests failed (9.0s)",
        "cujo: smoke skipped",
    ]


def test_a_stage_that_began_before_its_mark_arrived_counts_from_then() -> None:
    times = iter([5.0, 5.0])
    out = io.StringIO()
    progress = Progress(out, clock=lambda: next(times), began={"prepare": 2.0})
    progress.step("prepare: in_progress")
    progress.step("prepare: completed (success)")
    assert out.getvalue().splitlines() == ["cujo: prepare ...", "cujo: prepare done (3.0s)"]


def many_findings_object(n: int) -> dict[str, Any]:
    verdict = Verdict(
        state="blocked",
        summary="Blocked by a critical finding. " * 30,
        findings=[
            {
                "id": f"F{i}",
                "rule": "decoy-egress",
                "severity": "critical",
                "check": "install",
                "title": f"finding {i} " + "x" * 150,
                "evidence": [f"install:egress:{i}"],
            }
            for i in range(1, n + 1)
        ],
        unproven=[f"tests: line {i}" for i in range(5)],
        judge="deterministic",
    )
    obj = summary_object(
        run_id="local-1",
        bundle=None,
        verdict=verdict,
        record="sqlite:////data/cujo.db run local-1 (bundle in /data/runs/local-1)",
        base_sha="a" * 40,
        head_sha="b" * 40,
        pull_request={"repo": "octo/widgets", "number": 7, "url": "https://g.test/o/w/pull/7"},
    )
    obj["isolation"] = "full"
    return obj


def test_the_short_report_fits_a_terminal_and_counts_what_it_leaves_out() -> None:
    shown = brief(many_findings_object(20), detail="/data/runs/local-1.log")
    lines = shown.splitlines()
    assert len(lines) <= MAX_LINES
    assert all(len(line) <= WIDTH for line in lines), [len(x) for x in lines]
    assert lines[0].startswith("Cujo verdict: BLOCKED  (run local-1, judge deterministic)")
    assert "pull request octo/widgets#7" in shown
    assert f"head {'b' * 12}" in shown
    assert "isolation full" in shown
    assert "+15 more findings" in shown
    assert "+3 more unproven" in shown
    assert (
        "\n  record: sqlite:////data/cujo.db run local-1\n  bundle: /data/runs/local-1\n" in shown
    )
    assert "detail: /data/runs/local-1.log" in shown


def test_json_names_the_pull_request_and_the_judge_and_why_it_fell_back() -> None:
    obj = many_findings_object(1)
    assert obj["pull_request"] == {
        "repo": "octo/widgets",
        "number": 7,
        "url": obj["pull_request"]["url"],
    }
    assert obj["judge"] == "deterministic"
    assert "judge_fallback" not in obj
    fell_back = Verdict(
        state="clean",
        summary="s",
        findings=[],
        unproven=[],
        judge="deterministic-fallback",
        model_use=ModelUse(model="m", outcome="overloaded", detail="the API was overloaded"),
    )
    again = summary_object(run_id="r", bundle=None, verdict=fell_back, record="x")
    assert (again["judge"], again["judge_fallback"]) == ("deterministic", "the API was overloaded")
    assert "pull_request" not in again


def test_cli_loads_without_the_heavy_libraries_still() -> None:
    probe = (
        "import sys, app_relay.cli.main, app_relay.cli.prfetch\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('sqlalchemy', 'pydantic', 'anthropic', 'fastapi', 'uvicorn')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_quiet_review_still_shows_isolation_the_plan_and_why_it_stopped() -> None:
    shown = [
        "cujo: isolation PARTIAL: bubblewrap is missing\n",
        "cujo: isolation full: bubblewrap, uids 1-6 (one per check), 8 network namespaces\n",
        "cujo: plan (python): install `pip install .`, test `-`, smoke `-`\n",
        "cujo: cannot prepare: /x is not a git repository.\n",
        "Traceback (most recent call last):\n",
    ]
    detail = [
        "cujo: tests: test: $ python -m unittest\n",
        "cujo: detonation: install: exit 0 after 4.9s\n",
        "cujo: timings: warm-up 0.01s\n",
    ]
    assert all(worth_showing(line) for line in shown)
    assert not any(worth_showing(line) for line in detail)
