"""Bundle retention: old bundles go after CUJO_BUNDLE_DAYS, and the run page says when."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import requests
from boardworld import Served, clean_verdict, demo_exfil_run, pull_request_run

from app_relay.board import board_app
from app_relay.runs.retention import prune_bundles
from app_relay.store import PRUNED, Store
from cujo_action.schema import utcnow

DAY = timedelta(days=1)


class Clock:
    """The record's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> Iterator[Store]:
    with Store(f"sqlite:///{tmp_path}/cujo.db", clock=clock) as opened:
        yield opened


def finished_with_bundle(store: Store, bundles: Path, run_id: str, number: int) -> Path:
    """Record a run that finished now with a bundle folder in ``bundles``."""
    folder = bundles / f"{run_id}-x1"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text("{}")
    pull_request_run(store, "octo/widgets", number, run_id)
    store.finish_run(run_id, clean_verdict(), None, str(folder))
    return folder


def test_bundles_older_than_the_days_set_are_deleted_and_their_runs_say_so(store, clock, tmp_path):
    bundles = tmp_path / "bundles"
    clock.now = utcnow() - 40 * DAY
    old = finished_with_bundle(store, bundles, "run-old", 1)
    clock.now = utcnow() - 10 * DAY
    recent = finished_with_bundle(store, bundles, "run-recent", 2)
    # An unusable bundle's folder no run points at, as old as the first.
    stray = bundles / "run-gone-x2"
    stray.mkdir()
    forty_days_ago = (utcnow() - 40 * DAY).timestamp()
    os.utime(stray, (forty_days_ago, forty_days_ago))
    clock.now = utcnow()

    pruned = prune_bundles(store, bundles, 30, utcnow())

    assert (pruned.runs, pruned.strays) == (1, 1)
    assert not old.exists()
    assert not stray.exists()
    assert recent.exists()
    assert store.get_run("run-old").reports_dir is None
    assert store.get_run("run-recent").reports_dir == str(recent)
    [event] = [e for e in store.events("run-old") if e.kind == PRUNED]
    assert "30 days after the run finished (CUJO_BUNDLE_DAYS)" in event.detail
    assert not [e for e in store.events("run-recent") if e.kind == PRUNED]
    # The verdict stays in the record; a second pass finds nothing more to do.
    assert store.get_run("run-old").state == "clean"
    assert prune_bundles(store, bundles, 30, utcnow()) == type(pruned)(0, 0)


def test_a_bundle_outside_the_relays_folder_is_left_alone(store, clock, tmp_path):
    clock.now = utcnow() - 40 * DAY
    elsewhere = finished_with_bundle(store, tmp_path / "a-local-review", "run-local", 3)
    clock.now = utcnow()

    assert prune_bundles(store, tmp_path / "bundles", 30, utcnow()).runs == 0

    assert elsewhere.exists()
    assert store.get_run("run-local").reports_dir == str(elsewhere)


def test_the_run_page_says_when_its_evidence_was_pruned(store, clock, tmp_path):
    bundles = tmp_path / "bundles"
    clock.now = utcnow() - 40 * DAY
    run = demo_exfil_run(store, bundles / "demo-x3")
    clock.now = utcnow()
    with Served(board_app(store, web_url="https://github.example")) as board:
        before = requests.get(f"{board.url}/runs/{run.run_id}", timeout=10).text
        assert "collector.exfil.test" in before  # the evidence, from the bundle
        prune_bundles(store, bundles, 30, utcnow())
        after = requests.get(f"{board.url}/runs/{run.run_id}", timeout=10).text

    assert "Evidence pruned: the bundle (reports and evidence) was deleted on " in after
    assert f"{utcnow():%Y-%m-%d}" in after
    assert "30 days after the run finished (CUJO_BUNDLE_DAYS)" in after
    # The verdict and its findings are still shown.
    assert 'data-state="blocked">blocked</span>' in after
    assert 'id="finding-F1"' in after
