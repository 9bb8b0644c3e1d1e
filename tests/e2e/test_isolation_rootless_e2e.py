"""The isolation suite again, as an ordinary user: full isolation without root (issue 25).

The attacks and most tests are test_isolation_e2e.py's own, imported: each review runs
as ``nobody`` (``unprivileged.py``) with the harness installed where that account can run
it, and each property asserted as root must hold here too, with ``isolation: full``. What
differs without root is asserted here: decoy reads are seen by inotify (no pid, no exe);
``sudo`` is seen by inotify on the check's own copy of the tool, so it names the check
and the phase but no process or caller; one account runs every check (separate mounts
stand where separate uids stand), so the escapes probe also tries the guard's table, the
holder's namespaces, the evidence and another check's files; the fork bomb runs beside
the other reviews (its process limit is counted in its own user namespace, not the
account's), and its test waits for every one of them before looking for what the
account left running; and
the planted symlinks aim at that account's own key, HOME and data dir, which the harness
could reach as no root-run harness could. Every attack is here: none is root-only.
"""

from __future__ import annotations

import secrets
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import test_isolation_e2e as root_suite
import unprivileged
from cujorun import Pending, Review
from gitrepo import GitRepo
from test_isolation_e2e import (
    ATTACKS,
    ESCAPES,
    PARALLEL,
    READ_DECOY,
    Attack,
    Canary,
    Ran,
    assert_harness_whole,
    assert_sudo_blocked,
    base_files,
    fill,
    sandbox_processes,
    test_a_gigabyte_of_output_is_cut_off_and_unproven,
    test_a_hang_past_the_timeout_is_unproven_not_error,
    test_a_reverse_shell_connect_is_blocked,
    test_dns_exfiltration_is_blocked,
    test_http_exfiltration_ignoring_the_proxy_is_blocked,
    test_https_exfiltration_ignoring_the_proxy_is_blocked_by_sni,
    test_killing_the_proxy_fails_and_the_exfil_is_still_logged,
    test_raw_tcp_to_an_address_is_blocked_as_a_bypass,
    test_raw_udp_is_refused_counted_and_blocked,
    test_writing_bashrc_is_blocked,
    tree_digest,
    uses,
    wanted_attacks,
)

from cujo_action.schema import CHECK_NAMES

REASON = unprivileged.why_not()
pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(REASON is not None, reason=f"{REASON}"),
]

# The root suite's tests, each on a review run as the ordinary user.
REUSED = (
    test_http_exfiltration_ignoring_the_proxy_is_blocked,
    test_https_exfiltration_ignoring_the_proxy_is_blocked_by_sni,
    test_dns_exfiltration_is_blocked,
    test_raw_tcp_to_an_address_is_blocked_as_a_bypass,
    test_raw_udp_is_refused_counted_and_blocked,
    test_a_reverse_shell_connect_is_blocked,
    test_killing_the_proxy_fails_and_the_exfil_is_still_logged,
    test_writing_bashrc_is_blocked,
    test_a_gigabyte_of_output_is_cut_off_and_unproven,
    test_a_hang_past_the_timeout_is_unproven_not_error,
)

# Beyond the root suite's escapes: the guard's table, the namespace's holder, the run's
# evidence and another check's files, each looked for where the harness keeps them.
ROOTLESS_ESCAPES = (
    ESCAPES
    + """\
nft list ruleset >/dev/null 2>&1 && echo nft_read=open || echo nft_read=closed
nft add table inet cujo_x >/dev/null 2>&1 && echo nft_edit=open || echo nft_edit=closed
ip link set docker0 up >/dev/null 2>&1 && echo link_edit=open || echo link_edit=closed
echo "evidence=$(ls -d @RUNS@/*/evidence @TMP@/cujo-*/*/evidence 2>/dev/null | wc -l)"
echo "other_homes=$(ls -d @TMP@/cujo-*/*/checks/*/home 2>/dev/null | wc -l)"
"""
)

LOCAL_ATTACKS: dict[str, Attack] = {
    **ATTACKS,
    "decoy-read": Attack(READ_DECOY),
    "escapes-rootless": Attack({"ci/test.sh": ROOTLESS_ESCAPES}),
}


@dataclass(frozen=True)
class UserCanary(Canary):
    """The ordinary user's own files (its HOME, a folder in its data dir) and its harness.

    Without root the harness runs as the very user whose HOME holds ``~/.ssh``: a link
    that led it astray would reach these, not a root-owned canary.
    """

    kept: Path = Path()  # the folder in the data dir
    secret: str = ""  # the user's key's text: never in anything the review wrote

    def now(self) -> dict[str, str]:
        """Return the HOME's, the data dir folder's and the harness's digests now."""
        return _user_digest(self.folder, self.harness, self.kept)


def _user_digest(home: Path, harness: Path, kept: Path) -> dict[str, str]:
    # The harness's own state in HOME (its made-up search domain) is not the user's file.
    own = f"{home}/.cache/cujo/"
    files = {k: v for k, v in tree_digest(home).items() if not k.startswith(own)}
    return {**files, **tree_digest(harness), **tree_digest(kept)}


def user_canary(user: unprivileged.Account, data: Path) -> UserCanary:
    """Fill the user's HOME and data dir with files of its own, as a laptop has them."""
    secret = f"-----BEGIN OPENSSH PRIVATE KEY----- canary-{secrets.token_hex(8)}"
    key = user.home / ".ssh" / "id_ed25519"
    key.parent.mkdir(mode=0o700)
    key.write_text(secret + "\n")
    key.chmod(0o600)
    (user.home / ".bashrc").write_text("# the user's own profile\n")
    kept = data / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("the user's notes\n")
    unprivileged.give(user.home)
    unprivileged.give(kept)
    (harness,) = Path(user.python).parent.parent.glob("lib/python*/site-packages/cujo_action")
    socket = user.root / "no-service.sock"  # none: every review is the user's own
    digest = _user_digest(user.home, harness, kept)
    return UserCanary(key, user.home, harness, socket, digest, kept, secret)


class RootlessRuns:
    """The reviews the selected tests need, each run as the ordinary account."""

    def __init__(self, user: unprivileged.Account, wanted: list[str]) -> None:
        self.user = user
        self.data = unprivileged.owned(user.root / "data")
        self.canary = user_canary(user, self.data)
        places = {
            "RUNS": str(self.data / "runs"),
            "TMP": "/tmp",
            "CANARY": str(self.canary.file),
            # The links aim at the user's key and at the folder in its data dir; the
            # profile swapped for a link leads to the key.
            "CANARY_DIR": str(self.canary.kept),
            "HARNESS_PKG": str(self.canary.harness),
            "HARNESS": str(self.canary.harness),
            "SOCK": str(self.canary.socket),
        }
        self._repos: dict[str, GitRepo] = {}
        for name in wanted:
            repo = GitRepo(user.root / "repos" / name)
            repo.write(base_files(LOCAL_ATTACKS[name].timeouts)).commit("base")
            repo.branch("pr").checkout("pr")
            head = {p: fill(t, places) for p, t in LOCAL_ATTACKS[name].head.items()}
            repo.write(head).commit("the pull request")
            repo.checkout("main")
            unprivileged.give(repo.path)
            self._repos[name] = repo
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="rootless")
        self._futures: dict[str, Future[Ran]] = {
            name: self._pool.submit(self._run, name) for name in wanted
        }

    def _run(self, name: str) -> Ran:
        attack, repo = LOCAL_ATTACKS[name], self._repos[name]
        argv = self.user.cujo(
            "review", "--repo", str(repo.path), "--base", "main", "--head", "pr",
            "--data-dir", str(self.data), "--json",
        )  # fmt: skip
        out = self.user.root / "out" / name
        out.mkdir(parents=True)
        review = Pending(argv, self.user.env(attack.env), out, self.data).wait()
        return Ran(review, repo, [])

    def get(self, name: str) -> Ran:
        """Return the finished review of attack ``name``."""
        return self._futures[name].result()

    def finished(self) -> list[Ran]:
        """Wait for every review and return them."""
        return [future.result() for future in self._futures.values()]

    def close(self) -> None:
        self._pool.shutdown(wait=True)


@pytest.fixture(scope="module")
def user() -> Iterator[unprivileged.Account]:
    made = unprivileged.account()
    yield made
    made.close()


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, user: unprivileged.Account) -> Iterator[RootlessRuns]:
    wanted = wanted_attacks(request, sys.modules[__name__])
    started = RootlessRuns(user, wanted)
    yield started
    started.close()


def _report_says(review: Review) -> Mapping[str, str]:
    (command,) = review.report("tests")["commands"]
    return dict(line.split("=", 1) for line in command["stdout_tail"].splitlines() if "=" in line)


@uses("decoy-read")
def test_as_an_ordinary_user_a_decoy_read_is_seen_under_full_isolation(
    runs: RootlessRuns,
) -> None:
    review = runs.get("decoy-read").review
    verdict = review.verdict
    assert review.code == 0, str(review)
    assert (verdict["state"], verdict["isolation"]) == ("clean", "full"), str(review)
    assert "isolation full: bubblewrap, without root" in review.stderr
    assert verdict["unproven"] == []
    # The read is the only finding: the harness's own unpacking into HOME, which inotify
    # cannot tell from a command's, is no probe of the decoy folders (watcher.own_work).
    (hit,) = verdict["findings"]
    assert (hit["rule"], hit["severity"], hit["check"]) == ("decoy-read", "warn", "tests")
    for item in hit["evidence"]:
        assert (item.get("pid"), item.get("exe")) == (None, None), item  # inotify: no process
    for item in hit["evidence"]:
        assert (item["path"], item["phase"]) == ("~/.docker/config.json", "test")
    # The command ran as the sandbox's own account, never as the user's uid.
    said = _report_says(review)
    assert said["uid"] == "1001", said
    assert_harness_whole(review)
    for check in CHECK_NAMES:
        assert review.report(check)["egress"] == [], check


@uses("escapes-rootless")
def test_as_an_ordinary_user_every_way_out_is_closed(runs: RootlessRuns) -> None:
    review = runs.get("escapes-rootless").review
    said = _report_says(review)
    assert said["uid"].split()[0] == "1001", said
    assert said["userns"] == "closed", said  # --disable-userns: no nested namespace
    assert said["harness_procs"] == "0", said  # own PID namespace: no harness process
    assert said["harness_files"] == "hidden", said
    assert said["shadow"] == "denied", said
    assert said["socket"] == "unreachable", said
    assert said["cross_writes"] == "0", said
    assert said["fds"].split() == ["0", "1", "2", "3"], said
    # The namespace's guard and links belong to the holder's user namespace, not the
    # command's: it can neither read nor change them.
    assert (said["nft_read"], said["nft_edit"], said["link_edit"]) == ("closed",) * 3, said
    # Evidence and the other checks' areas are out of sight, wherever the harness keeps them.
    assert said["evidence"] == "0", said
    assert said["other_homes"] == "0", said
    assert review.verdict["state"] == "clean", str(review)
    assert review.verdict["isolation"] == "full", str(review)
    assert_harness_whole(review)
    # The run's bundle is there all the same, outside every sandbox.
    assert list((Path(review.data_dir) / "runs").glob("*/manifest.json"))


def _reused(test: Callable[..., None]) -> Callable[..., None]:
    def run(runs: RootlessRuns) -> None:
        test(runs)

    run.attack = test.attack  # type: ignore[attr-defined]
    run.__name__ = f"{test.__name__}_as_an_ordinary_user"
    run.__doc__ = test.__doc__
    return run


for _test in REUSED:
    globals()[f"{_test.__name__}_as_an_ordinary_user"] = _reused(_test)
# The originals are imported for the loop above, not collected twice under their names.
for _test in REUSED:
    del globals()[_test.__name__]
del _test


@uses("sudo")
def test_as_an_ordinary_user_sudo_is_powerless_and_blocked(runs: RootlessRuns) -> None:
    item = assert_sudo_blocked(runs.get("sudo"))
    # Seen by inotify on the check's own copy of the tool: the check and the phase are
    # certain (nothing else opens that copy), the process is not known.
    assert item["detail"] == (
        "/usr/bin/sudo was executed during install (seen without root: no pid, exe or caller)"
    ), item


@uses("symlinks")
def test_symlinks_planted_everywhere_never_lead_the_harness_to_the_users_files(
    runs: RootlessRuns,
) -> None:
    # The root suite's attack and asserts, aimed at the user's own key, HOME and data dir.
    root_suite.test_symlinks_planted_everywhere_never_lead_root_astray(runs, runs.canary)  # type: ignore[arg-type]
    review = runs.get("symlinks").review
    # Nothing the review wrote holds the user's key: no link was read out.
    written = [review.stdout, review.stderr]
    written += [p.read_text(errors="replace") for p in review.bundle.rglob("*") if p.is_file()]
    assert not [text for text in written if runs.canary.secret in text]
    assert_harness_whole(review)


@uses("fork-bomb")
def test_a_fork_bomb_is_blocked_and_the_machine_survives_as_an_ordinary_user(
    runs: RootlessRuns,
) -> None:
    root_suite.test_a_fork_bomb_is_blocked_and_the_machine_survives(runs)  # type: ignore[arg-type]
    # One account runs every check here (the root test's uids are the run's own): what
    # the bomb left would be the account's `bash ci/test.sh`. Once every review beside it
    # has ended (each one finished: the machine survived), none is left.
    for ran in runs.finished():
        assert ran.review.code in (0, 1, 4), str(ran.review)
    left = [p for p in sandbox_processes({unprivileged.UID}) if " ci/test.sh" in p]
    assert left == []
