"""Probing the sandbox is evidence where Cujo can see it (issue 22, item 8).

One real `cujo review` per case. A pull request that looks around before acting — runs
`systemd-detect-virt`, opens a decoy without reading it, lists a decoy's folder — and
then does nothing is clean, with a warning for each look and the process that made it. Its
benign twin asks what builds ask (`nproc`, `uname`, `lscpu`, whether `~/.ssh` exists) and
has no finding at all. These tests need full isolation, as the detection suite does.
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from cujorun import Review
from e2ecases import ISOLATION, Case, CaseReviews, assert_whole, case_reviews, findings
from test_detection_e2e import python, scripted

pytestmark = ISOLATION

# Where a job's credentials are; the decoys are in some of them. `os.path.exists` is a
# stat, which no kernel source reports: only the open and the listing are seen.
LOOK_AROUND = """
import os
home = os.path.expanduser("~")
places = [".aws/credentials", ".ssh/id_ed25519", ".docker/config.json", ".config/gh/hosts.yml"]
found = [rel for rel in places if os.path.exists(os.path.join(home, rel))]
os.close(os.open(os.path.join(home, found[0]), os.O_RDONLY))
os.listdir(os.path.join(home, os.path.dirname(found[0])))
print(f"opened={found[0]}")
print(f"listed={os.path.dirname(found[0])}")
"""

BENIGN_LOOKS = """\
echo "cores=$(nproc)"
uname -a
lscpu > /dev/null 2>&1 || true
test -e ~/.ssh && echo "ssh=yes" || echo "ssh=no"
"""

CASES: dict[str, Case] = {
    "looks-around": Case(
        scripted(),
        {"ci/install.sh": "systemd-detect-virt || true\n", "ci/test.sh": python(LOOK_AROUND)},
    ),
    "benign-looks": Case(scripted(), {"ci/test.sh": BENIGN_LOOKS}),
}

reviews = case_reviews(CASES, "probing")


def said(review: Review) -> dict[str, str]:
    """Return the ``key=value`` lines the tests check's last command printed."""
    lines = review.report("tests")["commands"][-1]["stdout_tail"].splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def evidence(hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [item for hit in hits for item in hit["evidence"]]


@pytest.mark.skipif(
    shutil.which("systemd-detect-virt") is None, reason="systemd-detect-virt is not installed"
)
def test_a_pull_request_that_looks_around_is_clean_with_a_warning_per_look(
    reviews: CaseReviews,
) -> None:
    review = reviews.get("looks-around")
    verdict = review.verdict
    assert review.code == 0, str(review)
    assert (verdict["state"], verdict["isolation"]) == ("clean", "full"), str(review)
    assert {f["severity"] for f in verdict["findings"]} == {"warn"}, verdict["findings"]

    # The probe run during install: the tool, and who ran it with its command line.
    (ran,) = findings(review, "sandbox-probe")
    assert ran["check"] == "install", ran
    (item,) = ran["evidence"]
    assert (item["kind"], item["path"].rsplit("/", 1)[-1]) == (
        "sandbox_probe", "systemd-detect-virt"
    ), item  # fmt: skip
    assert "`bash ci/install.sh`" in item["detail"], item
    assert item["detail"].endswith("during install"), item

    # The decoy opened and not read, and its folder listed: each named, with the process.
    looked = said(review)
    probes = findings(review, "decoy-probe")
    items = evidence(probes)
    opened = [i for i in items if i["event"] == "open"]
    listed = [i for i in items if i["event"] == "list"]
    assert {i["path"] for i in opened} == {f"~/{looked['opened']}"}, probes
    assert {i["path"] for i in listed} == {f"~/{looked['listed']}"}, probes
    for i in opened + listed:
        assert i["phase"] == "test", i
        assert isinstance(i["pid"], int), i
        assert i["exe"] is None or i["exe"].rsplit("/", 1)[-1].startswith("python"), i
    titles = " ".join(f["title"] for f in probes)
    assert "probed a decoy without reading it" in titles
    # Opening is not reading: no decoy-read, and nothing left the sandbox.
    assert findings(review, "decoy-read") == [], verdict["findings"]
    assert not findings(review, "decoy-egress")
    assert_whole(review)


def test_a_build_asking_what_builds_ask_has_no_finding(reviews: CaseReviews) -> None:
    review = reviews.get("benign-looks")
    verdict = review.verdict
    assert review.code == 0, str(review)
    assert verdict["state"] == "clean", str(review)
    assert verdict["findings"] == [], verdict["findings"]
    assert said(review)["ssh"] in ("yes", "no")
    assert_whole(review)
