"""Run end-to-end reviews of pull-request cases, each once, with the harness as action.yml
installs it; and read their verdicts.

Shared by the detection suites (``test_detection_e2e.py``, ``test_blind_*_e2e.py``): a
module names its cases, gets a ``reviews`` fixture from ``case_reviews``, and each test
asks for the review of one case; reviews run one at a time (the machine is shared), only
those the selected tests need. They need full isolation (root, ``ip``, ``nft``,
``setpriv``, bubblewrap), as on an Actions runner; elsewhere ``ISOLATION`` skips them with
the reason.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cujorun import Cujo, Pending, Review
from gitrepo import GitRepo

from cujo_action.arm.host import isolation_unavailable
from cujo_action.schema import CHECK_NAMES


def _why_skip() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, nftables, the sandbox user), as on Actions"
    return isolation_unavailable()


REASON = _why_skip()
# pytestmark for a module of end-to-end reviews.
ISOLATION = [
    pytest.mark.root,
    pytest.mark.skipif(REASON is not None, reason=f"full isolation unavailable: {REASON}"),
]


@dataclass(frozen=True)
class Case:
    """A pull request: base files, the head files written over them, and its branch."""

    base: Mapping[str, str]
    head: Mapping[str, str]
    env: Mapping[str, str] = field(default_factory=dict)
    branch: str = "pr"


Cases = Mapping[str, Case | tuple[Mapping[str, str], Mapping[str, str]]]


class CaseReviews:
    """Run the reviews the tests ask for, one at a time, each once."""

    def __init__(
        self,
        cases: Cases,
        prefix: str,
        cujo: Cujo,
        pr_repo: Callable[..., GitRepo],
        scratch: Callable[[str], Path],
        installed: Path,
    ) -> None:
        self._cases, self._prefix = cases, prefix
        self._cujo, self._pr_repo, self._scratch = cujo, pr_repo, scratch
        self._installed = installed
        self._done: dict[str, Review] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> Review:
        """Return the finished review of case ``name`` (run now if it has not been)."""
        with self._lock:
            if name not in self._done:
                self._done[name] = self._run(name)
            return self._done[name]

    def _run(self, name: str) -> Review:
        case = self._cases[name]
        if not isinstance(case, Case):
            case = Case(*case)
        repo = self._pr_repo(f"{self._prefix}-{name}", case.base, case.head, branch=case.branch)
        # The harness as action.yml installs it (a wheel in a venv), not this checkout.
        argv = [str(self._installed), "review", "--repo", str(repo.path)]
        argv += ["--base", "main", f"--head={case.branch}"]
        argv += ["--data-dir", str(self._cujo.data_dir), "--json"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUJO_")}
        env.update(case.env)
        return Pending(argv, env, self._scratch(f"review-{name}"), self._cujo.data_dir).wait()


def case_reviews(cases: Cases, prefix: str) -> Any:
    """Return a module-scoped ``reviews`` fixture over ``cases``."""

    @pytest.fixture(scope="module")
    def reviews(
        cujo: Cujo,
        pr_repo: Callable[..., GitRepo],
        tmp_path_factory: pytest.TempPathFactory,
        installed_cujo: Path,
    ) -> CaseReviews:
        return CaseReviews(cases, prefix, cujo, pr_repo, tmp_path_factory.mktemp, installed_cujo)

    return reviews


# --------------------------------------------------------------------------- reading


def findings(review: Review, rule: str) -> list[dict[str, Any]]:
    """Return the verdict's findings of one rule."""
    return [f for f in review.verdict["findings"] if f["rule"] == rule]


def critical_rules(review: Review) -> set[str]:
    """Return the rules of the verdict's critical findings."""
    return {f["rule"] for f in review.verdict["findings"] if f["severity"] == "critical"}


def assert_blocked(review: Review, *rules: str) -> None:
    """The review is blocked, exactly by ``rules``, with full isolation."""
    verdict = review.verdict
    assert review.code == 1, str(review)
    assert verdict["state"] == "blocked", str(review)
    assert verdict["isolation"] == "full", str(review)
    assert critical_rules(review) == set(rules), verdict["findings"]


def assert_whole(review: Review) -> None:
    """No harness process died and no evidence was lost, in any check."""
    for check in CHECK_NAMES:
        report = review.report(check)
        kinds = {o["kind"] for o in report["observations"]}
        assert not kinds & {"harness_died", "harness_error"}, (check, report["observations"])
        assert report["evidence_complete"] is True, (check, report)
