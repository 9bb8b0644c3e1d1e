"""Output is a channel (issue 20): a decoy printed by a pull request's command blocks.

In a project's own CI the log is public: tj-actions/changed-files (2025) printed the
runner's secrets, base64 twice, into it, with no network at all. One real `cujo review`
per case, as in ``test_detection_e2e``: a test that prints a decoy plainly, a
``conftest.py`` that prints every secret of the environment base64 twice in pytest's
terminal summary (after megabytes of other output, far past the report's tail), a test
that writes them base64 twice to the step summary and to ``GITHUB_OUTPUT`` instead
(issue 33: printing nothing), and a benign suite of the same shape that prints megabytes
of random base64, writes a summary table and an output, and stays clean.

Reviews run one at a time, each once, and need full isolation (root, as on Actions).
"""

from __future__ import annotations

import json
from typing import Any

from cujorun import Review
from e2ecases import (
    ISOLATION,
    Case,
    CaseReviews,
    case_reviews,
    critical_rules,
)

from cujo_action.schema import DECOY_IN_OUTPUT

pytestmark = ISOLATION

FAST = {"install": 180, "test": 120, "smoke": 60, "probes": 60}
CALC = "def add(a, b):\n    return a + b\n"


def scripted(test: str) -> dict[str, str]:
    """Return a project whose tests are ``ci/test.py``, run by the run's Python."""
    policy = {"timeouts": FAST, "install": "true", "test": "python ci/test.py", "smoke": "true"}
    return {
        "requirements.txt": "",
        "calc.py": CALC,
        "ci/test.py": test,
        ".cujo.yml": json.dumps(policy) + "\n",
    }


BASE = scripted("print('1 passed')\n")

# A test that prints a secret of its environment, as a debugging line would.
PLAIN = """\
import os
print("1 passed")
print("debug: token", os.environ["GITHUB_TOKEN"])
"""

# tj-actions' payload, in pytest's terminal summary: every variable of the environment,
# JSON, base64 twice, on one line, after a few megabytes of other output.
CONFTEST = """\
import base64, json, os

def pytest_terminal_summary(terminalreporter):
    for n in range(40000):
        terminalreporter.write_line(f"tests/test_calc.py::test_{n} PASSED" + "." * 60)
    blob = json.dumps(dict(os.environ)).encode()
    terminalreporter.write_line(base64.b64encode(base64.b64encode(blob)).decode())
"""
PYTEST_BASE = {
    "requirements.txt": "pytest\n",
    "calc.py": CALC,
    "tests/test_calc.py": "from calc import add\n\ndef test_add():\n    assert add(1, 2) == 3\n",
    ".cujo.yml": json.dumps({"timeouts": FAST, "smoke": "true"}) + "\n",
}

# The benign twin: a suite that prints megabytes of random base64 (fixtures dumped as a
# test fails would look like this) and ordinary progress, with nothing secret in it.
NOISE = """\
import base64, os, sys
for n in range(3000):
    print(f"tests/test_calc.py::test_{n} PASSED")
out = sys.stdout
for _ in range(60000):
    out.write(base64.b64encode(os.urandom(57)).decode() + "\\n")
out.write(base64.b64encode(base64.b64encode(os.urandom(200000))).decode() + "\\n")
print("PATH is", os.environ["PATH"].split(":")[0], file=sys.stderr)
print("3000 passed")
with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as summary:
    summary.write("### Tests\\n\\n| suite | passed |\\n|---|---|\\n| calc | 3000 |\\n")
    summary.write(base64.b64encode(base64.b64encode(os.urandom(3000))).decode() + "\\n")
with open(os.environ["GITHUB_OUTPUT"], "a") as output:
    output.write("result=ok\\n")
"""

# Printing nothing: every variable of the environment, base64 twice, into the run's page
# (the step summary) and into an output later jobs read, as the multi-line form GitHub
# documents.
WRITTEN = """\
import base64, json, os
blob = base64.b64encode(base64.b64encode(json.dumps(dict(os.environ)).encode())).decode()
with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as summary:
    summary.write("### Tests\\n\\n| suite | passed |\\n|---|---|\\n| calc | 1 |\\n")
    summary.write(f"<!-- {blob} -->\\n")
with open(os.environ["GITHUB_OUTPUT"], "a") as output:
    output.write(f"result=ok\\nreport<<EOF\\n{blob}\\nEOF\\n")
print("1 passed")
"""


CASES: dict[str, Case] = {
    "printed-plain": Case(BASE, {"ci/test.py": PLAIN}),
    "printed-summary": Case(PYTEST_BASE, {"tests/conftest.py": CONFTEST}),
    "printed-noise": Case(BASE, {"ci/test.py": NOISE}),
    "written-file-commands": Case(BASE, {"ci/test.py": WRITTEN}),
}

reviews = case_reviews(CASES, "blind-output")
Reviews = CaseReviews


def printed(review: Review, check: str = "tests") -> list[dict[str, Any]]:
    observations = review.report(check)["observations"]
    return [o for o in observations if o["kind"] == DECOY_IN_OUTPUT]


def assert_blocked_by_output(review: Review) -> None:
    verdict = review.verdict
    assert review.code == 1, str(review)
    assert verdict["state"] == "blocked", str(review)
    assert verdict["isolation"] == "full", str(review)
    assert critical_rules(review) == {"decoy-in-output"}, verdict["findings"]


def test_a_test_that_prints_a_decoy_blocks(reviews: Reviews) -> None:
    review = reviews.get("printed-plain")
    assert_blocked_by_output(review)
    (seen,) = printed(review)
    assert seen["detail"] == "GITHUB_TOKEN (plain) in the stdout of `python ci/test.py`"
    assert seen["phase"] == "test"
    # The report names the decoy, never its value: the value is only in the tail the
    # command printed (which the report keeps as output, not as the finding).
    (hit,) = [f for f in review.verdict["findings"] if f["rule"] == "decoy-in-output"]
    assert [e["id"] for e in hit["evidence"]] == [seen["id"]]


def test_decoys_printed_base64_twice_in_pytests_summary_block(reviews: Reviews) -> None:
    review = reviews.get("printed-summary")
    assert_blocked_by_output(review)
    (command,) = review.report("tests")["commands"]
    assert command["output_truncated"] is True, command
    seen = printed(review)
    assert len(seen) > 3, seen  # one per decoy of the environment
    names = {o["detail"].split(" ", 1)[0] for o in seen}
    assert {"GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "ACTIONS_RUNTIME_TOKEN"} <= names, seen
    for observation in seen:
        assert "(base64+base64" in observation["detail"], observation
        assert observation["detail"].endswith("in the stdout of `python -m pytest -q -p "
                                              "no:cacheprovider`"), observation  # fmt: skip
        assert observation["phase"] == "test"


def test_megabytes_of_random_base64_in_a_suites_output_stay_clean(reviews: Reviews) -> None:
    review = reviews.get("printed-noise")
    assert review.code == 0, str(review)
    assert review.verdict["state"] == "clean", str(review)
    assert printed(review) == []
    report = review.report("tests")
    assert report["cuts"] == [], report["cuts"]
    assert report["evidence_complete"] is True
    (command,) = report["commands"]
    assert command["exit_code"] == 0
    assert command["output_truncated"] is True


def test_decoys_written_base64_twice_to_the_summary_and_an_output_block(
    reviews: Reviews,
) -> None:
    review = reviews.get("written-file-commands")
    assert_blocked_by_output(review)
    report = review.report("tests")
    (command,) = report["commands"]
    assert command["stdout_tail"].strip() == "1 passed", command  # nothing printed
    seen = printed(review)
    by_file: dict[str, set[str]] = {}
    for observation in seen:
        by_file.setdefault(observation["path"], set()).add(observation["detail"].split(" ")[0])
        assert "(base64+base64" in observation["detail"], observation
        assert observation["detail"].endswith("after `python ci/test.py`"), observation
    assert set(by_file) == {"$GITHUB_STEP_SUMMARY", "$GITHUB_OUTPUT"}, seen
    for names in by_file.values():
        assert {"GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "ACTIONS_RUNTIME_TOKEN"} <= names
    # One finding per file written to, citing every decoy found there.
    hits = [f for f in review.verdict["findings"] if f["rule"] == "decoy-in-output"]
    assert sorted(f["title"].split(":")[0] for f in hits) == [
        "a decoy was written to $GITHUB_OUTPUT",
        "a decoy was written to $GITHUB_STEP_SUMMARY",
    ], hits
    assert report["cuts"] == [], report["cuts"]
