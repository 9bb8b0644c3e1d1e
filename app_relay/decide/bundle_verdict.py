"""Decide a validated bundle: the one way the relay and the local review do it.

Pure: the relay (``runs/follow.py``) and the local review (``cli/review.py``) both turn a
bundle into a verdict here, so a bundle means the same on GitHub and on a laptop. Its
evidence is described one line per id by ``words/review_body.py`` (``evidence_lines``).
"""

from __future__ import annotations

from app_relay.decide.hits import PullText, RuleContext
from app_relay.decide.judge import Judge, error_verdict
from app_relay.verdict import Verdict
from cujo_action.evidence.reader import Bundle, BundleError
from cujo_action.schema import CHECK_NAMES, POLICY_FILE, Policy, read_pr_sink


def pull_fields_read(bundle: Bundle) -> list[str]:
    """Return the pull request's own texts the base's workflows read (title, body, branch),
    as the workflows check found them: what the deciding side must read to judge them."""
    found = {
        sink[0]
        for report in bundle.reports
        for obs in report.observations
        if (sink := read_pr_sink(obs.kind)) is not None
    }
    return sorted(found)


def verdict_of(
    bundle: Bundle, judge: Judge, *, policy: Policy | None, pull: PullText | None = None
) -> Verdict:
    """Return the verdict on a bundle: its stated failure is ``error``, else ``judge`` decides.

    ``policy`` is the one the relay read itself at base (docs/design.md invariant 9): a plan run
    under any other is refused with ``BundleError``. None judges under the plan's own
    policy, for the local review, whose sandbox read base's policy from the repository
    the user named. ``pull`` is the pull request's own text as the caller read it (never
    the bundle's word): what ``workflow-injection`` judges where the base's workflows paste it.
    """
    if bundle.failure is not None:
        # The summary ends the reason with its own full stop; the sandbox's often has one.
        reason = bundle.failure.reason.strip().rstrip(".")
        return error_verdict(f"{bundle.failure.stage}: {reason}")
    if bundle.plan is None:
        raise BundleError("the bundle holds neither a plan nor a failure")
    if policy is None:
        policy = bundle.plan.policy
    elif bundle.plan.policy != policy:
        # The bundle is evidence only; a plan that disagrees with what the relay read at
        # base was run under another policy, or forged.
        differ = sorted(
            key
            for key in Policy.model_fields
            if getattr(bundle.plan.policy, key) != getattr(policy, key)
        )
        raise BundleError(
            f"plan.json's policy differs from {POLICY_FILE} as the relay read it at base "
            f"(in {', '.join(differ)})"
        )
    return judge.decide(
        bundle.reports,
        expected=CHECK_NAMES,
        ctx=RuleContext(policy=policy, pull=pull or PullText()),
        plan_unproven=bundle.plan.unproven_reason,
    )
