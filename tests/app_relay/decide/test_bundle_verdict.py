"""A bundle comes to the same verdict in the relay and the local review."""

from __future__ import annotations

import pytest
from bundlefactory import make_plan

from app_relay.decide.bundle_verdict import verdict_of
from app_relay.decide.judge import DeterministicJudge
from cujo_action.evidence.reader import Bundle, BundleError
from cujo_action.schema import CHECK_NAMES, Failure, Policy

RUN_ID, BASE, HEAD = "run-1", "b" * 40, "a" * 40


def bundle_of(make, *, policy: Policy | None = None, **by_check) -> Bundle:
    plan = make_plan(run_id=RUN_ID, base_sha=BASE, head_sha=HEAD, policy=policy or Policy())
    reports = tuple(make.report(c, **by_check.get(c, {})) for c in CHECK_NAMES)
    return Bundle(run_id=RUN_ID, plan=plan, reports=reports, failure=None)


def test_a_stated_failure_is_an_error_verdict_whatever_the_policy():
    failure = Failure(run_id=RUN_ID, stage="prepare", reason="no such commit.")
    bundle = Bundle(run_id=RUN_ID, plan=None, reports=(), failure=failure)

    verdict = verdict_of(bundle, DeterministicJudge(), policy=Policy())

    assert verdict.state == "error"
    assert "`prepare: no such commit`" in verdict.summary


def test_a_plan_run_under_another_policy_is_refused_naming_what_differs(make):
    forged = bundle_of(make, policy=Policy(egress_allow=["*.test"]))

    with pytest.raises(BundleError, match=r"differs from \.cujo\.yml .* \(in egress_allow\)"):
        verdict_of(forged, DeterministicJudge(), policy=Policy())


def test_without_a_relay_policy_the_plan_s_own_decides(make):
    # The install reached a host only the plan's policy allows.
    reached = {"install": {"egress": [make.egress("install", "mirror.test")]}}
    bundle = bundle_of(make, policy=Policy(egress_allow=["mirror.test"]), **reached)

    assert verdict_of(bundle, DeterministicJudge(), policy=None).state == "clean"
    assert verdict_of(bundle, DeterministicJudge(), policy=bundle.plan.policy).state == "clean"
