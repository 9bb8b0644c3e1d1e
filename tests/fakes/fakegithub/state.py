"""Hold what the fake GitHub knows, and what it was asked, for tests to set and assert."""

from __future__ import annotations

import base64
import io
import json
import re
import secrets
import threading
import time
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# GitHub's legacy `permission` folds maintain into write and triage into read.
# https://docs.github.com/en/rest/collaborators/collaborators#get-repository-permissions-for-a-user
LEGACY_PERMISSION = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
    "none": "none",
}


def iso(ts: float) -> str:
    """Format a Unix time the way GitHub does."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fake_sha() -> str:
    """Return a random 40-hex commit SHA."""
    return secrets.token_hex(20)


def zip_bytes(files: Mapping[str, bytes | str]) -> bytes:
    """Zip files in memory, as an artifact archive."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data.encode() if isinstance(data, str) else data)
    return buf.getvalue()


@dataclass(frozen=True)
class Recorded:
    """One request the fake received; ``auth`` names the credential, never its value."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    headers: dict[str, str]
    auth: str
    host: str = "api"


@dataclass(frozen=True)
class Unknown:
    """A request the fake refused because GitHub (or Cujo's rules) would not accept it."""

    method: str
    path: str
    reason: str


@dataclass
class Fault:
    """An answer forced on the next matching requests, instead of the modelled one."""

    method: str | None
    path: re.Pattern[str] | None
    times: int
    status: int = 502
    body: bytes | None = None
    delay_s: float = 0.0
    then_serve: bool = False  # after the delay, answer normally
    drop_after: bool = False  # serve (the write is applied), then hang up unanswered
    headers: dict[str, str] = field(default_factory=dict)  # sent with the forced answer

    def matches(self, method: str, path: str) -> bool:
        """Say whether this fault applies to a request."""
        return (self.method is None or self.method == method) and (
            self.path is None or bool(self.path.search(path))
        )


@dataclass(frozen=True)
class Token:
    """An installation token the fake issued."""

    value: str
    installation_id: int
    serial: int
    expires_at: float


@dataclass(frozen=True)
class Dispatch:
    """A workflow dispatch, as handed to the registered Actions behaviour."""

    repo: str
    workflow_file: str
    ref: str
    inputs: dict[str, Any]
    run_id: int
    head_sha: str


@dataclass
class Workflow:
    """A workflow file on the default branch; ``run_name`` renders its run-name."""

    id: int
    path: str
    name: str
    run_name: Callable[[Mapping[str, Any]], str] | None = None


@dataclass
class RepoState:
    """One repository: its refs, files, pull requests and everything posted on it."""

    full_name: str
    id: int
    default_branch: str = "main"
    branches: dict[str, str] = field(default_factory=dict)
    files: dict[tuple[str, str], bytes] = field(default_factory=dict)
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)
    pull_files: dict[int, list[str]] = field(default_factory=dict)
    # The hunks GitHub shows for each listed file (no entry: binary or too large).
    pull_patches: dict[int, dict[str, str]] = field(default_factory=dict)
    check_runs: dict[int, dict[str, Any]] = field(default_factory=dict)
    reviews: dict[int, dict[str, Any]] = field(default_factory=dict)
    reactions: list[dict[str, Any]] = field(default_factory=list)
    comments: dict[int, dict[str, Any]] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)
    workflows: dict[str, Workflow] = field(default_factory=dict)
    runs: dict[int, dict[str, Any]] = field(default_factory=dict)
    artifacts: dict[int, dict[str, Any]] = field(default_factory=dict)
    job_logs: dict[int, bytes] = field(default_factory=dict)  # by job id
    archives: dict[int, bytes] = field(default_factory=dict)
    rules: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    protection: dict[str, dict[str, Any]] = field(default_factory=dict)
    # How the protection read is refused to a token without admin rights, if it is.
    protection_refusal: tuple[int, str] | None = None
    # The merge methods the repository allows (allow_merge_commit, _squash_, _rebase_).
    merge_methods: dict[str, bool] = field(
        default_factory=lambda: {"merge": True, "squash": True, "rebase": True}
    )


class FakeState:
    """Everything the fake GitHub holds, behind one lock."""

    def __init__(
        self,
        *,
        app_id: int,
        public_key_pem: str,
        clock: Callable[[], float] = time.time,
        web_url: str = "https://github.com",
    ) -> None:
        self.lock = threading.RLock()
        self.app_id = app_id
        self.public_key_pem = public_key_pem
        self.clock = clock
        self.web_url = web_url
        self.api_url = ""  # set by the server once it listens
        self.blob_url = ""
        self.installations: dict[int, set[str]] = {}
        # What every installation was granted (app_relay/github/app-manifest.json asks for these).
        self.installation_permissions: dict[str, str] = {
            "metadata": "read", "contents": "read", "pull_requests": "write", "checks": "write",
            "issues": "write", "actions": "write", "administration": "read", "members": "read",
        }  # fmt: skip
        self.tokens: dict[str, Token] = {}
        self.repos: dict[str, RepoState] = {}
        self.requests: list[Recorded] = []
        self.unknown_requests: list[Unknown] = []
        self.faults: list[Fault] = []
        # after_request: [method, path, times left, what to do] (a test's moment of change).
        self.request_hooks: list[list[Any]] = []
        self.dispatch_returns_details = True
        # GitHub Enterprise Server up to 3.20 answers this status (400, or 422) to a
        # dispatch naming return_run_details, a field it does not know (ACTIONS.md).
        self.dispatch_refuses_run_details: int | None = None
        # The App manifest flow: code → (manifest, owner, when GitHub handed it out).
        self.manifest_codes: dict[str, tuple[dict[str, Any], str, float]] = {}
        self.manifest_app_pem = ""  # the private key a conversion hands back
        self.token_lifetime_s = 3600.0
        self.blobs: dict[str, tuple[bytes, float]] = {}
        self.blob_declares_length = True  # False: stream the archive until the socket closes
        self.hooks: list[tuple[Callable[[Dispatch], None], bool]] = []
        self._pending = 0  # background hooks not yet returned
        self._idle = threading.Condition(self.lock)
        self.hook_errors: list[BaseException] = []
        self.release = threading.Event()  # set at teardown: ends every injected delay
        self._next_id = 1000
        # -- webhooks GitHub sends when a test edits a repository's rules (issue 23) --
        # Each sink gets (event name, payload), as the App's webhook would; what was sent
        # is kept for assertions. No sink: nothing is delivered (most tests need none).
        self.webhook_sinks: list[Callable[[str, dict[str, Any]], None]] = []
        self.sent_webhooks: list[tuple[str, dict[str, Any]]] = []

        # The primary rate limit: an hour's window per credential (rate_headers).
        self.rate_limit_per_hour = 5000
        self.rate_windows: dict[str, RateWindow] = {}
        self.not_modified_answers = 0  # 304s to conditional requests: free

    # -- ids and records --

    def next_id(self) -> int:
        """Return a fresh id, unique across every kind of object."""
        with self.lock:
            self._next_id += 1
            return self._next_id

    def record(self, entry: Recorded) -> None:
        """Keep a request for assertions."""
        with self.lock:
            self.requests.append(entry)

    def refuse(self, method: str, path: str, reason: str) -> None:
        """Note a request GitHub would not know or Cujo must never send; the test fails."""
        with self.lock:
            self.unknown_requests.append(Unknown(method, path, reason))

    def calls(self, method: str | None = None, path: str | None = None) -> list[Recorded]:
        """Return the recorded requests matching a method and a path regex."""
        with self.lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method)
                and (path is None or re.search(path, r.path))
            ]

    # -- setting the world up --

    def add_installation(self, installation_id: int, repos: set[str] | None = None) -> None:
        """Install the App somewhere."""
        with self.lock:
            self.installations.setdefault(installation_id, set()).update(repos or set())

    def add_repo(
        self, full_name: str, *, installation_id: int | None = None, default_branch: str = "main"
    ) -> RepoState:
        """Create a repository (with its default branch) and install the App on it."""
        with self.lock:
            repo = RepoState(full_name, self.next_id(), default_branch)
            repo.branches[default_branch] = fake_sha()
            self.repos[full_name] = repo
            if installation_id is not None:
                self.add_installation(installation_id, {full_name})
            return repo

    def add_pull(
        self,
        repo: str,
        number: int,
        *,
        head_sha: str | None = None,
        base_sha: str | None = None,
        base_ref: str = "main",
        head_ref: str = "feature",
        author: str = "alice",
        author_type: str = "User",
        draft: bool = False,
        state: str = "open",
        head_repo: str | None = "",
        association: str = "MEMBER",
    ) -> dict[str, Any]:
        """Open a pull request; ``head_repo`` "" means the same repository, None a deleted fork.

        ``association`` is the author's ``author_association`` (written from the
        documentation: https://docs.github.com/en/rest/pulls/pulls#get-a-pull-request).
        """
        r = self.repos[repo]
        head_full = repo if head_repo == "" else head_repo
        user = {"login": author, "id": self.next_id(), "type": author_type}
        pr_id = self.next_id()
        pr = {
            "id": pr_id,
            "node_id": f"PR_kwDO{pr_id}",
            "number": number,
            "state": state,
            "draft": draft,
            # Merge facts (merging.py): `mergeable` is worked out per read there.
            "merged": False,
            "mergeable": True,
            "merged_by": None,
            "merge_commit_sha": None,
            "title": f"Pull request {number}",
            "user": user,
            "author_association": association,
            "html_url": f"{self.web_url}/{repo}/pull/{number}",
            # Listing pull requests sorts by these (catchup.py); opening again moves both.
            "created_at": iso(self.clock()),
            "updated_at": iso(self.clock()),
            "head": {
                "ref": head_ref,
                "sha": head_sha or fake_sha(),
                "label": f"{author}:{head_ref}",
                "repo": None if head_full is None else {"full_name": head_full, "id": 1},
            },
            "base": {
                "ref": base_ref,
                "sha": base_sha or r.branches.get(base_ref) or fake_sha(),
                "repo": {"full_name": repo, "id": r.id},
            },
        }
        with self.lock:
            r.pulls[number] = pr
        return pr

    def set_pull_files(
        self, repo: str, number: int, paths: list[str], patches: dict[str, str] | None = None
    ) -> None:
        """Set the paths a pull request changes (and their patches), as its files list answers."""
        with self.lock:
            self.repos[repo].pull_files[number] = list(paths)
            self.repos[repo].pull_patches[number] = dict(patches or {})

    def put_file(self, repo: str, ref: str, path: str, content: bytes | str) -> None:
        """Place a file at a ref (a branch name or a commit SHA)."""
        data = content.encode() if isinstance(content, str) else content
        with self.lock:
            self.repos[repo].files[(ref, path)] = data

    def set_role(self, repo: str, login: str, role: str) -> None:
        """Give a user a role: admin, maintain, write, triage, read, none, or a custom one."""
        with self.lock:
            self.repos[repo].roles[login] = role

    def add_workflow(
        self,
        repo: str,
        path: str,
        name: str = "Cujo",
        run_name: Callable[[Mapping[str, Any]], str] | None = None,
    ) -> Workflow:
        """Put a workflow file on the default branch."""
        wf = Workflow(self.next_id(), path, name, run_name)
        with self.lock:
            self.repos[repo].workflows[path] = wf
        return wf

    def add_run(
        self,
        repo: str,
        workflow_file: str,
        *,
        head_sha: str | None = None,
        display_title: str | None = None,
        status: str = "queued",
        conclusion: str | None = None,
        created_at: float | None = None,
        event: str = "workflow_dispatch",
        head_branch: str | None = None,
        inputs: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Create a workflow run, as a dispatch (or a test) does."""
        r = self.repos[repo]
        wf = r.workflows[workflow_file]
        run_id = self.next_id()
        title = display_title or (wf.run_name(inputs or {}) if wf.run_name else wf.name)
        run = {
            "id": run_id,
            "name": wf.name,
            "display_title": title,
            "path": f".github/workflows/{wf.path}",
            "workflow_id": wf.id,
            "event": event,
            "status": status,
            "conclusion": conclusion,
            "head_sha": head_sha or r.branches[r.default_branch],
            "head_branch": head_branch or r.default_branch,
            "run_attempt": 1,
            "run_number": len(r.runs) + 1,
            "created_at": iso(created_at if created_at is not None else self.clock()),
            "html_url": f"{self.web_url}/{repo}/actions/runs/{run_id}",
            "url": f"{self.api_url}/repos/{repo}/actions/runs/{run_id}",
            "_workflow_file": workflow_file,
            "_created": created_at if created_at is not None else self.clock(),
            "_inputs": dict(inputs or {}),
        }
        with self.lock:
            r.runs[run_id] = run
        return run

    def set_run(
        self, repo: str, run_id: int, *, status: str, conclusion: str | None = None
    ) -> dict[str, Any]:
        """Move a workflow run (queued, in_progress, waiting, completed with a conclusion)."""
        with self.lock:
            run = self.repos[repo].runs[run_id]
            run["status"] = status
            run["conclusion"] = conclusion
            return run

    def set_jobs(self, repo: str, run_id: int, steps: list[tuple[str, str, str | None]]) -> None:
        """Give a workflow run one job whose steps are (name, status, conclusion)."""
        with self.lock:
            run = self.repos[repo].runs[run_id]
            run["_jobs"] = [
                {
                    "id": run_id * 10 + 1,
                    "run_id": run_id,
                    # A reusable workflow's job, as GitHub names it: "<caller job> / <name>".
                    "name": "sandbox / cujo sandbox",
                    "status": run["status"],
                    "conclusion": run.get("conclusion"),
                    "steps": [
                        {"name": n, "status": st, "conclusion": c, "number": i + 1}
                        for i, (n, st, c) in enumerate(steps)
                    ],
                }
            ]

    def set_job_log(self, repo: str, run_id: int, text: str) -> int:
        """Give the run's sandbox job (made if it has none) a log; return the job's id."""
        with self.lock:
            run = self.repos[repo].runs[run_id]
        if not run.get("_jobs"):
            self.set_jobs(repo, run_id, [])
        with self.lock:
            job = run["_jobs"][0]
            self.repos[repo].job_logs[job["id"]] = text.encode()
            return int(job["id"])

    def add_artifact(
        self,
        repo: str,
        run_id: int,
        name: str = "cujo-reports",
        *,
        files: Mapping[str, bytes | str] | None = None,
        archive: bytes | None = None,
        expired: bool = False,
    ) -> dict[str, Any]:
        """Upload an artifact to a run: ``files`` zipped, or a raw ``archive``."""
        data = archive if archive is not None else zip_bytes(files or {})
        r = self.repos[repo]
        run = r.runs[run_id]
        art_id = self.next_id()
        now = self.clock()
        art = {
            "id": art_id,
            "node_id": f"MDg6QXJ0aWZhY3Q{art_id}",
            "name": name,
            "size_in_bytes": len(data),
            "url": f"{self.api_url}/repos/{repo}/actions/artifacts/{art_id}",
            "archive_download_url": f"{self.api_url}/repos/{repo}/actions/artifacts/{art_id}/zip",
            "expired": expired,
            "created_at": iso(now),
            "updated_at": iso(now),
            "expires_at": iso(now + 90 * 86400),
            "workflow_run": {
                "id": run_id,
                "repository_id": r.id,
                "head_repository_id": r.id,
                "head_branch": run["head_branch"],
                "head_sha": run["head_sha"],
            },
        }
        with self.lock:
            r.artifacts[art_id] = art
            r.archives[art_id] = data
        return art

    def set_rules(self, repo: str, branch: str, rules: list[dict[str, Any]]) -> None:
        """Set the active ruleset rules GitHub reports for a branch; send ``repository_ruleset``."""
        with self.lock:
            before = self.repos[repo].rules.get(branch)
            self.repos[repo].rules[branch] = rules
        action = "created" if not before else "deleted" if not rules else "edited"
        self.send_webhook("repository_ruleset", self.ruleset_event(repo, branch, rules, action))

    def set_protection(self, repo: str, branch: str, protection: dict[str, Any] | None) -> None:
        """Set (or, with None, remove) a branch's classic protection; send its webhook."""
        with self.lock:
            before = self.repos[repo].protection.get(branch)
            if protection is None:
                self.repos[repo].protection.pop(branch, None)
            else:
                self.repos[repo].protection[branch] = protection
        if before is None and protection is None:
            return  # nothing changed: GitHub sends nothing
        action = "created" if before is None else "deleted" if protection is None else "edited"
        payload = self.protection_rule_event(repo, branch, protection or before or {}, action)
        self.send_webhook("branch_protection_rule", payload)

    # -- webhooks (issue 23): written from the documentation --

    def on_webhook(self, sink: Callable[[str, dict[str, Any]], None]) -> None:
        """Deliver the webhooks this fake sends to ``sink`` (the relay's intake, in a test)."""
        with self.lock:
            self.webhook_sinks.append(sink)

    def send_webhook(self, name: str, payload: dict[str, Any]) -> None:
        """Keep a webhook as sent and hand it to every sink (outside the lock)."""
        with self.lock:
            self.sent_webhooks.append((name, payload))
            sinks = list(self.webhook_sinks)
        for sink in sinks:
            sink(name, payload)

    def _hook_context(self, repo: str) -> dict[str, Any]:
        """The ``repository``, ``installation`` and ``sender`` every repository webhook carries."""
        r = self.repos[repo]
        owner, _, name = repo.partition("/")
        installation = next((i for i, repos in self.installations.items() if repo in repos), None)
        context: dict[str, Any] = {
            "repository": {
                "id": r.id,
                "name": name,
                "full_name": repo,
                "private": False,
                "owner": {"login": owner, "id": 1, "type": "Organization"},
                "default_branch": r.default_branch,
            },
            "sender": {"login": "octo-admin", "id": 2, "type": "User"},
        }
        if installation is not None:
            context["installation"] = {"id": installation, "node_id": f"MDIz{installation}"}
        return context

    def ruleset_event(
        self, repo: str, branch: str, rules: list[dict[str, Any]], action: str
    ) -> dict[str, Any]:
        """Return a ``repository_ruleset`` webhook for a branch's rules (from the documentation).

        https://docs.github.com/en/webhooks/webhook-events-and-payloads#repository_ruleset
        """
        ruleset_id = next((r["ruleset_id"] for r in rules if "ruleset_id" in r), 43)
        now = iso(self.clock())
        ruleset = {
            "id": ruleset_id,
            "name": f"protect {branch}",
            "target": "branch",
            "source_type": "Repository",
            "source": repo,
            "enforcement": "active",
            "bypass_actors": [],
            "conditions": {"ref_name": {"include": [f"refs/heads/{branch}"], "exclude": []}},
            "rules": [{k: v for k, v in r.items() if k in ("type", "parameters")} for r in rules],
            "node_id": f"RRS_{ruleset_id}",
            "created_at": now,
            "updated_at": now,
        }
        return {"action": action, "repository_ruleset": ruleset, **self._hook_context(repo)}

    def protection_rule_event(
        self, repo: str, branch: str, protection: dict[str, Any], action: str
    ) -> dict[str, Any]:
        """Return a ``branch_protection_rule`` webhook, written from the documentation.

        https://docs.github.com/en/webhooks/webhook-events-and-payloads#branch_protection_rule
        """
        rsc = protection.get("required_status_checks") or {}
        now = iso(self.clock())
        rule = {
            "id": self.next_id(),
            "repository_id": self.repos[repo].id,
            "name": branch,
            "created_at": now,
            "updated_at": now,
            "admin_enforced": bool((protection.get("enforce_admins") or {}).get("enabled")),
            "required_status_checks": list(rsc.get("contexts", [])),
            "required_status_checks_enforcement_level": "non_admins" if rsc else "off",
            "strict_required_status_checks_policy": bool(rsc.get("strict")),
        }
        return {"action": action, "rule": rule, **self._hook_context(repo)}

    def refuse_protection(self, repo: str, status: int, message: str) -> None:
        """Answer every protection read this way: a token without admin rights."""
        with self.lock:
            self.repos[repo].protection_refusal = (status, message)

    # -- faults --

    def fail_next(
        self,
        times: int = 1,
        *,
        status: int = 502,
        method: str | None = None,
        path: str | None = None,
    ) -> None:
        """Answer the next ``times`` matching requests with ``status`` and no useful body."""
        body = b'{"message": "Server Error"}'
        self._add_fault(Fault(method, _rx(path), times, status, body))

    def answer_next(
        self,
        method: str,
        path: str,
        body: bytes | str,
        *,
        status: int = 200,
        times: int = 1,
    ) -> None:
        """Answer the next matching requests with this exact body (e.g. malformed JSON)."""
        raw = body.encode() if isinstance(body, str) else body
        self._add_fault(Fault(method, _rx(path), times, status, raw))

    def delay_next(
        self, seconds: float, *, method: str | None = None, path: str | None = None
    ) -> None:
        """Hold the next matching request this long (or until teardown) before answering."""
        self._add_fault(Fault(method, _rx(path), 1, delay_s=seconds, then_serve=True))

    def drop_next(self, *, method: str, path: str, times: int = 1) -> None:
        """Apply the next matching requests, then close the connection without answering.

        The client sees a lost connection although GitHub did the write: what a retry
        must not do twice.
        """
        self._add_fault(Fault(method, _rx(path), times, then_serve=True, drop_after=True))

    def after_request(
        self, fn: Callable[[], None], *, method: str, path: str, times: int = 1
    ) -> None:
        """Call ``fn`` once each of the next ``times`` matching requests has been answered.

        GitHub changing between two reads (a push, a ruleset edit) at a chosen moment.
        """
        with self.lock:
            self.request_hooks.append([method, re.compile(path), times, fn])

    def answered(self, method: str, path: str) -> None:
        """Run the hooks waiting for this request (the server calls it after answering)."""
        due = []
        with self.lock:
            for hook in list(self.request_hooks):
                if hook[0] == method and hook[1].search(path):
                    hook[2] -= 1
                    due.append(hook[3])
                    if hook[2] <= 0:
                        self.request_hooks.remove(hook)
        for fn in due:
            fn()

    def _add_fault(self, fault: Fault) -> None:
        with self.lock:
            self.faults.append(fault)

    def take_fault(self, method: str, path: str) -> Fault | None:
        """Consume one use of the first fault that matches a request."""
        with self.lock:
            for fault in self.faults:
                if fault.matches(method, path):
                    fault.times -= 1
                    if fault.times <= 0:
                        self.faults.remove(fault)
                    return fault
        return None

    # -- Actions behaviour --

    def on_dispatch(self, hook: Callable[[Dispatch], None], *, background: bool = True) -> None:
        """Call ``hook`` for every workflow dispatch: Actions, as the test wants it to behave.

        In the background (the default) the hook starts once the dispatch is answered and
        may take as long as a real run; ``wait_for_actions`` joins it. Otherwise it runs
        before the dispatch is answered. Either way its exceptions fail the test.
        """
        with self.lock:
            self.hooks.append((hook, background))

    def hooks_before_answer(self, dispatch: Dispatch) -> None:
        """Run the foreground hooks and count the background ones as pending."""
        with self.lock:
            hooks = list(self.hooks)
            self._pending += sum(1 for _, background in hooks if background)
        for hook, background in hooks:
            if not background:
                self._guarded(hook, dispatch)

    def hooks_after_answer(self, dispatch: Dispatch) -> None:
        """Start the background hooks once the dispatch has been answered."""
        for hook, background in list(self.hooks):
            if background:
                t = threading.Thread(
                    target=self._guarded,
                    args=(hook, dispatch, True),
                    name="fake-actions",
                    daemon=True,
                )
                t.start()

    def _guarded(
        self, hook: Callable[[Dispatch], None], dispatch: Dispatch, pending: bool = False
    ) -> None:
        try:
            hook(dispatch)
        except BaseException as exc:  # surfaced at teardown
            with self.lock:
                self.hook_errors.append(exc)
        finally:
            if pending:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def wait_for_actions(self, timeout_s: float = 60.0) -> None:
        """Wait until every background Actions hook has returned."""
        with self._idle:
            if not self._idle.wait_for(lambda: self._pending == 0, timeout=timeout_s):
                raise TimeoutError(f"{self._pending} Actions hooks still running")

    # -- rate limits --
    # Written from the documentation, not recorded: every answer carries x-ratelimit-limit,
    # -remaining, -used, -reset (epoch seconds) and -resource; an installation token has
    # 5,000 requests an hour; a request over the primary limit is answered 403 with
    # x-ratelimit-remaining 0; a 304 to a conditional request does not count.
    # https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api

    def _window(self, key: str) -> RateWindow:
        """Return the credential's window, a fresh hour's once the last one reset."""
        with self.lock:
            now = self.clock()
            window = self.rate_windows.get(key)
            if window is None or window.reset <= now:
                window = RateWindow(self.rate_limit_per_hour, 0, int(now) + 3600)
                self.rate_windows[key] = window
            return window

    def over_limit(self, auth: str) -> dict[str, str] | None:
        """Return the headers of a 403 when this credential's budget is spent, else None."""
        with self.lock:
            window = self._window(rate_key(auth))
            return None if window.used < window.limit else window.headers()

    def spend(self, auth: str, *, counted: bool = True) -> dict[str, str]:
        """Count one answer against the credential's budget; return its rate-limit headers."""
        with self.lock:
            window = self._window(rate_key(auth))
            if not counted:
                self.not_modified_answers += 1
            elif window.used < window.limit:
                window.used += 1
            return window.headers()

    def exhaust_rate_limit(self, installation_id: int | None, *, reset_in_s: float) -> None:
        """Spend an installation's budget (None: the App's JWT budget) until ``reset_in_s``."""
        key = "app" if installation_id is None else f"installation:{installation_id}"
        with self.lock:
            limit = self.rate_limit_per_hour
            self.rate_windows[key] = RateWindow(limit, limit, int(self.clock() + reset_in_s))

    def limit_secondary_next(
        self,
        times: int = 1,
        *,
        status: int = 403,
        retry_after: int | None = 60,
        method: str | None = None,
        path: str | None = None,
    ) -> None:
        """Answer the next matching requests as GitHub's secondary rate limit (403 or 429).

        With ``Retry-After`` when ``retry_after`` is given; the message is GitHub's.
        """
        body = json.dumps(
            {
                "message": "You have exceeded a secondary rate limit. Please wait a few "
                "minutes before you try again. If you reach out to GitHub Support for "
                "help, please include the request ID 0400:1A2B:3C4D.",
                "documentation_url": "https://docs.github.com/free-pro-team@latest/rest/"
                "overview/rate-limits-for-the-rest-api#about-secondary-rate-limits",
            }
        ).encode()
        headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
        self._add_fault(Fault(method, _rx(path), times, status, body, headers=headers))

    # -- tokens and blobs --

    def issue_token(self, installation_id: int) -> Token:
        """Mint an installation token."""
        with self.lock:
            serial = sum(1 for t in self.tokens.values() if t.installation_id == installation_id)
            token = Token(
                "ghs_" + secrets.token_urlsafe(27),
                installation_id,
                serial + 1,
                self.clock() + self.token_lifetime_s,
            )
            self.tokens[token.value] = token
            return token

    def expire_tokens(self) -> None:
        """Make every issued token expired, as if an hour had passed."""
        with self.lock:
            for value, token in list(self.tokens.items()):
                self.tokens[value] = Token(
                    token.value, token.installation_id, token.serial, self.clock() - 1
                )

    def blob_for(self, data: bytes) -> str:
        """Return a one-minute download URL on the blob host for some bytes."""
        key = secrets.token_urlsafe(16)
        with self.lock:
            self.blobs[key] = (data, self.clock() + 60)
        return f"{self.blob_url}/blob/{key}"


@dataclass
class RateWindow:
    """One credential's primary rate limit for the hour until ``reset`` (epoch seconds)."""

    limit: int
    used: int
    reset: int

    def headers(self) -> dict[str, str]:
        """Return the rate-limit headers GitHub sends with every answer."""
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(max(self.limit - self.used, 0)),
            "X-RateLimit-Used": str(self.used),
            "X-RateLimit-Reset": str(self.reset),
            "X-RateLimit-Resource": "core",
        }


def rate_key(auth: str) -> str:
    """Return whose budget a request spends: its installation, the App (JWT), a user, an IP."""
    if auth.startswith("installation:"):
        return auth.split("#", maxsplit=1)[0]
    if auth == "jwt":
        return "app"
    if auth.startswith("user:"):
        return auth
    return "anonymous"


def required_checks_rules(
    repo: str, *checks: Mapping[str, Any], strict: bool = True
) -> list[dict[str, Any]]:
    """Return a branch's active rules as GitHub lists them: a deletion rule and ``checks``.

    https://docs.github.com/en/rest/repos/rules#get-rules-for-a-branch; each check is
    ``{context, integration_id?}``.
    """
    source = {"ruleset_source_type": "Repository", "ruleset_source": repo}
    return [
        {"type": "deletion", **source, "ruleset_id": 42},
        {
            "type": "required_status_checks",
            **source,
            "ruleset_id": 43,
            "parameters": {
                "strict_required_status_checks_policy": strict,
                "required_status_checks": [dict(c) for c in checks],
            },
        },
    ]


def classic_protection(
    repo: str, branch: str, *checks: Mapping[str, Any], admins: bool = False, strict: bool = True
) -> dict[str, Any]:
    """Return classic branch protection requiring ``checks`` (``{context, app_id}``).

    https://docs.github.com/en/rest/branches/branch-protection#get-branch-protection
    """
    return {
        "url": f"https://api.github.com/repos/{repo}/branches/{branch}/protection",
        "required_status_checks": {
            "strict": strict,
            "contexts": [c["context"] for c in checks],
            "checks": [dict(c) for c in checks],
        },
        "enforce_admins": {"enabled": admins},
    }


def _rx(path: str | None) -> re.Pattern[str] | None:
    return None if path is None else re.compile(path)


def b64(data: bytes) -> str:
    """Encode content the way the contents API does (wrapped at 60 characters)."""
    text = base64.b64encode(data).decode()
    return "\n".join(text[i : i + 60] for i in range(0, len(text), 60)) + "\n"
