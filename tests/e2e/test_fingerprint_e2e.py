"""The sandbox reads as a hosted runner, but for the differences the profile accepts (issue 22).

One real `cujo review` of a tiny project whose test command is the fingerprint probe, so
it runs inside the sandbox as a pull request's test (its network reads reach the proxy
and the logging resolver only). The test fails on any difference from the runner profile
that the profile does not accept, and if the probe itself looks like an attack.
"""

from __future__ import annotations

from cujorun import Review
from e2ecases import ISOLATION, CaseReviews, assert_whole, case_reviews, critical_rules

from cujo_action.arm import fingerprint

pytestmark = ISOLATION

CASES = {
    "probe": (
        fingerprint.project_files(fingerprint.PROBE_PATH.read_text()),
        {"calc.py": '"""Add numbers."""\n\n\ndef add(a, b):\n    return a + b\n'},
    )
}

reviews = case_reviews(CASES, "fingerprint")


def probe_review(reviews: CaseReviews) -> Review:
    return reviews.get("probe")


def test_the_probe_is_no_attack(reviews: CaseReviews) -> None:
    review = probe_review(reviews)
    assert review.code == 0, str(review)
    assert review.verdict["state"] == "clean", review.verdict["findings"]
    assert review.verdict["isolation"] == "full", str(review)
    assert not critical_rules(review), review.verdict["findings"]
    assert review.report("tests")["status"] == "ok", review.report("tests")
    assert_whole(review)


def test_every_difference_from_a_hosted_runner_is_accepted(reviews: CaseReviews) -> None:
    review = probe_review(reviews)
    reading = fingerprint.reading_from_report(review.report("tests"))
    assert reading is not None, review.report("tests")["commands"]
    assert reading["network"] is True
    assert not any(key.startswith("error.") for key in reading), reading
    profile = fingerprint.load_profile()
    found = fingerprint.differences(reading, profile)
    assert not fingerprint.unexpected(found), "\n".join(fingerprint.summary(found, profile))
