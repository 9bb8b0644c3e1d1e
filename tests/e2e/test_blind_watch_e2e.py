"""Cujo cannot be blinded (issue 20): crowding the persistence snapshot or the decoy
watcher hides nothing. One real `cujo review` per case, each run once and shared.

A .pth written to the user site blocks, plain or behind thousands of junk files; a
sender that reads the decoy credentials after twenty other readers, then opens a TLS
channel refusing the run's CA, blocks; a project that writes thousands of ordinary files
under ~/.local stays clean and proven. Targets are `.test` names the resolver sinks.
"""

from __future__ import annotations

from collections.abc import Mapping

from cujorun import Review
from e2ecases import (
    ISOLATION,
    CaseReviews,
    assert_blocked,
    assert_whole,
    case_reviews,
    critical_rules,
)
from test_detection_e2e import (
    PINNED_TLS,
    STEAL,
    python,
    scripted,
)

pytestmark = ISOLATION

# A .pth in the user site: every later Python runs its import line.
PTH = r"""
import pathlib, site
user_site = pathlib.Path(site.getusersitepackages())
user_site.mkdir(parents=True, exist_ok=True)
@CROWD@
(user_site / "zz_telemetry.pth").write_text("import os; os.environ.setdefault('ZZ', '1')\n")
print("planted")
"""
# Two thousand five hundred junk files beside the user site and inside it, written first.
CROWD = """\
junk = user_site.parent.parent / "aaa-junk"
junk.mkdir(parents=True, exist_ok=True)
for n in range(2_500):
    (junk / f"{n:05}").write_text("x")
    (user_site / f"a{n:05}_junk.py").write_text("x = 1\\n")
"""
# Twenty other processes read the decoy credentials first.
READERS = 'for i in $(seq 20); do cat ~/.docker/config.json > /dev/null; done\necho "read"\n'
# The benign twin: a data tree and a package's many modules under ~/.local.
DATA_TREE = r"""
import pathlib, site
user_site = pathlib.Path(site.getusersitepackages())
share = pathlib.Path.home() / ".local" / "share" / "calc-data"
for n in range(1_500):
    folder = share / f"set{n % 30:02}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"row{n:05}.csv").write_text("a,b\n1,2\n")
package = user_site / "calcdata"
package.mkdir(parents=True, exist_ok=True)
for n in range(1_500):
    (package / f"part{n:05}.py").write_text(f"VALUE = {n}\n")
(package / "__init__.py").write_text("")
print("ok")
"""

CASES: dict[str, tuple[Mapping[str, str], Mapping[str, str]]] = {
    "pth-plain": (scripted(), {"ci/install.sh": python(PTH.replace("@CROWD@", ""))}),
    "pth-crowded": (scripted(), {"ci/install.sh": python(PTH.replace("@CROWD@", CROWD))}),
    "readers-crowd": (
        scripted(),
        {"ci/test.sh": READERS + python(PINNED_TLS.replace("@READ@", STEAL))},
    ),
    "local-data": (scripted(), {"ci/install.sh": python(DATA_TREE)}),
}

reviews = case_reviews(CASES, "blind-watch")
Reviews = CaseReviews


def startup_writes(review: Review, check: str = "install") -> list[str]:
    return [
        o["path"]
        for o in review.report(check)["observations"]
        if o["kind"] == "python_startup_write"
    ]


def test_a_pth_written_during_install_blocks(reviews: Reviews) -> None:
    review = reviews.get("pth-plain")
    assert_blocked(review, "python-startup-write")
    assert any(p.endswith("/site-packages/zz_telemetry.pth") for p in startup_writes(review))


def test_a_pth_behind_thousands_of_junk_files_still_blocks(reviews: Reviews) -> None:
    review = reviews.get("pth-crowded")
    assert_blocked(review, "python-startup-write")
    assert any(p.endswith("/site-packages/zz_telemetry.pth") for p in startup_writes(review))
    # The execution points are listed, not walked: the junk filled no limit.
    assert review.report("install")["cuts"] == []


def test_a_sender_behind_twenty_readers_of_the_decoy_still_blocks(reviews: Reviews) -> None:
    review = reviews.get("readers-crowd")
    report = review.report("tests")
    assert "pinned: SSLCertVerificationError" in report["commands"][-1]["stdout_tail"], report
    assert_blocked(review, "decoy-then-opaque-channel")
    (channel,) = [e for e in report["egress"] if e["method"] == "TLS"]
    readers = {r["pid"] for r in report["decoy_readers"] if r["path"] == "~/.docker/config.json"}
    assert len(readers) >= 21
    assert channel["pid"] in readers  # the sender's read was kept


def test_thousands_of_ordinary_files_under_local_stay_clean(reviews: Reviews) -> None:
    review = reviews.get("local-data")
    assert review.code == 0, str(review)
    assert review.verdict["state"] not in ("blocked", "unproven"), str(review)
    assert critical_rules(review) == set()
    assert startup_writes(review) == []
    assert all(not r["cuts"] for r in map(review.report, ("install", "tests"))), str(review)
    assert_whole(review)
