"""`cujo review`: review a local branch (in the sandbox, or its diff), record and print it.

``main`` parses the command line and, for ``cujo review``, starts the sandbox
(``local.start_review``) before this module (the record, the verdict and their
libraries) is loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import signal
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy.exc import SQLAlchemyError

from app_relay.cli.local import (
    UNKNOWN_SHA,
    LocalReview,
    data_dir,
    database_url,
    git_text,
    resolve,
    start_review,
)
from app_relay.cli.progress import Progress, brief
from app_relay.cli.say import reason_of, shown_url
from app_relay.decide.bundle_verdict import verdict_of
from app_relay.decide.hits import PullText
from app_relay.decide.judge import Judge, error_verdict, judge_for
from app_relay.model.fromenv import model_client_from_env
from app_relay.model.port import ModelPort
from app_relay.runs.tamper import described, reconcile, record_verdict, with_tampering
from app_relay.store import LOCAL_BUSY_TIMEOUT_MS, Store
from app_relay.verdict import Verdict, evidence_items
from app_relay.words.review_body import evidence_lines
from cujo_action.evidence.reader import Bundle, BundleError, read_bundle
from cujo_action.schema import POLICY_FILE, PolicyError, Report, load_policy

if TYPE_CHECKING:
    from app_relay.cli.local_board import OpenBoard

# Unproven holds the merge on GitHub; a script gets 4 so it holds too (docs/design.md section 10.1).
EXIT = {"clean": 0, "unproven": 4, "blocked": 1, "error": 3}


def local_judge(env: Mapping[str, str]) -> Judge:
    """Return the judge the relay uses: the model judge with a model key, else the hard rules.

    The relay's own choice (``cli/serve.py``), so a bundle means the same on GitHub and on a
    laptop. Evidence from a sandbox that could be dodged proves nothing: partial isolation
    can block a pull request, but never call it clean.
    """
    return judge_for(model_client_from_env(env), require_full_isolation=True)


def _evidence_index(
    reports: Sequence[Report], described: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """Return each evidence item as JSON with its plain description (``description``)."""
    held = evidence_items(reports)
    items = {eid: item.model_dump(mode="json") for eid, (_, item) in held.items()}
    # Evidence no report holds (what the tamper record kept and the bundle lost) is
    # described all the same.
    for eid, said in described.items():
        items[eid] = {**items.get(eid, {"id": eid}), "description": said}
    return items


def summary_object(
    *,
    run_id: str,
    bundle: Bundle | None,
    verdict: Verdict,
    record: str,
    base_sha: str | None = None,
    head_sha: str | None = None,
    lost: Mapping[str, str] | None = None,
    pull_request: Mapping[str, object] | None = None,
) -> dict[str, Any]:
    """Return the ``--json`` object of docs/design.md section 10.1.

    Each finding's evidence items carry their plain ``description``; ``lost`` describes
    evidence the bundle no longer holds (``tamper.described``). ``judge`` says which
    judge decided (``model`` or ``deterministic``, with ``judge_fallback`` saying why when
    the model was asked and the hard rules decided); ``pull_request`` names the pull
    request reviewed, when one was.

    ``base_sha`` and ``head_sha`` are the commits the CLI resolved itself; they stand in
    when the sandbox wrote no plan (a run that ended ``error`` before settling one).
    """
    plan = bundle.plan if bundle else None
    reports = bundle.reports if bundle else ()
    index = _evidence_index(reports, {**evidence_lines(reports), **(lost or {})})
    isolation = (
        "partial" if any(r.isolation == "partial" for r in reports) or not reports else "full"
    )
    obj: dict[str, Any] = {
        "run_id": run_id,
        "state": verdict.state,
        "mode": "sandbox",
        "base_sha": plan.base_sha if plan else _known(base_sha),
        "head_sha": plan.head_sha if plan else _known(head_sha),
        "isolation": isolation,
        "plan": {
            "install": plan.install,
            "test": plan.test,
            "smoke": plan.smoke,
            "policy_from": plan.policy_from,
        }
        if plan
        else None,
        "checks": {r.check: {"status": r.status, "summary": r.summary} for r in reports},
        "summary": verdict.summary,
        "notes": plan.notes if plan else [],
        "unproven": verdict.unproven,
        "findings": [
            {
                "id": f.id,
                "rule": f.rule,
                "rules": f.rules,
                "severity": f.severity,
                "check": f.check,
                "title": f.title,
                "evidence": [index.get(e, {"id": e}) for e in f.evidence],
            }
            for f in verdict.findings
        ],
        "record": record,
        "judge": "model" if verdict.judge == "model" else "deterministic",
    }
    if verdict.judge == "deterministic-fallback":
        use = verdict.model_use
        obj["judge_fallback"] = (use.detail or use.outcome) if use else "the model was not asked"
    if pull_request is not None:
        obj["pull_request"] = dict(pull_request)
    return obj


def _known(sha: str | None) -> str | None:
    return sha if sha and sha != UNKNOWN_SHA else None


def render(obj: dict[str, Any], evidence: Mapping[str, str] | None = None) -> str:
    """Return the human report of a review; ``evidence`` gives one line per evidence id."""
    evidence = evidence or {}
    state = obj["state"]
    lines = [f"Cujo verdict: {state.upper()}  (run {obj['run_id']})", f"  {obj['summary']}"]
    if pull := obj.get("pull_request"):
        lines.append(f"  pull request {pull['repo']}#{pull['number']}  {pull['url']}")
    if judge := obj.get("judge"):
        why = (
            f" (the model judge gave no usable answer: {fb})"
            if (fb := obj.get("judge_fallback"))
            else ""
        )
        lines.append(f"  judge {judge}{why}")
    if obj["plan"]:
        plan = obj["plan"]
        lines.append(
            f"  base {obj['base_sha'][:12]}  head {obj['head_sha'][:12]}  "
            f"policy from {plan['policy_from'][:12]}  isolation {obj['isolation']}"
        )
        lines.append(
            f"  plan: install `{plan['install'] or '-'}`; test `{plan['test'] or '-'}`; "
            f"smoke `{plan['smoke'] or '-'}`"
        )
    elif obj["base_sha"] and obj["head_sha"]:
        lines.append(f"  base {obj['base_sha'][:12]}  head {obj['head_sha'][:12]}")
    for note in obj.get("notes") or []:
        lines.append(f"  note: {note}")
    if obj["checks"]:
        lines.append("  checks:")
        for name, check in obj["checks"].items():
            first = check["summary"].splitlines()[0] if check["summary"] else ""
            lines.append(f"    {name:<11} {check['status']:<8} {first}")
    for line in obj["unproven"]:
        lines.append(f"  unproven: {line}")
    if obj["findings"]:
        lines.append("  findings:")
        for f in obj["findings"]:
            lines.append(
                f"    {f['id']} {f['severity']:<8} [{f['rule']}, {f['check']}] {f['title']}"
            )
            shown = f["evidence"][:3]
            for item in shown:
                said = evidence.get(item["id"]) or item.get("description", "")
                lines.append(f"       evidence {item['id']}: {said}")
    lines.append(f"  record: {obj['record']}")
    return "\n".join(lines)


# Why a `--mode diff` review ran in the sandbox instead; the summary starts with it.
NO_MODEL_KEY = (
    "A diff review needs a model key (ANTHROPIC_API_KEY) and none is set, so this is the "
    "sandbox review instead."
)


def review(args: argparse.Namespace, started: LocalReview | None = None) -> int:
    """Run a local review of head against base and record it.

    ``started``: the sandbox ``cli.main`` started before this module loaded (a sandbox
    review); otherwise it is started here (a diff review with no model key).
    """
    instead = ""
    if args.mode == "diff":
        client = model_client_from_env(os.environ)
        if client is not None:
            return diff_review(args, client)
        instead = NO_MODEL_KEY
        print(f"cujo review: {instead}", file=sys.stderr)
    boards: list[OpenBoard] = []
    with _patient_interrupt() as interrupted:
        code = _sandbox_review(args, started or start_review(args), instead, interrupted, boards)
    # Past the sandbox, Ctrl-C is the person's again: it stops the board (--open).
    for board in boards:
        board.hold()
    return code


def _open_record(
    folder: Path,
    repo: str,
    run_id: str,
    base_sha: str,
    head_sha: str,
    mode: Literal["sandbox", "diff"],
    pr_number: int | None = None,
) -> Store:
    """Open the local record in ``folder`` and start the run in it (raises OSError or
    SQLAlchemyError: no record, so no run)."""
    folder.mkdir(parents=True, exist_ok=True)
    store = Store(database_url(folder), busy_timeout_ms=LOCAL_BUSY_TIMEOUT_MS)
    session = store.open_session(repo, pr_number, "local")
    store.start_run(session, run_id, base_sha, head_sha, mode)
    return store


def _sandbox_review(
    args: argparse.Namespace,
    started: LocalReview,
    instead: str,
    interrupted: threading.Event,
    boards: list[OpenBoard],
) -> int:
    run_id, repo, folder, out = started.run_id, started.repo, started.folder, started.out
    base_sha, head_sha = started.base_sha, started.head_sha
    try:
        store = _open_record(folder, repo, run_id, base_sha, head_sha, "sandbox", started.pr_number)
    except (OSError, SQLAlchemyError) as exc:
        started.run.stop()  # no record, so no run
        # Say where the record should have been, and why it is not.
        print(
            f"cujo review: cannot open the record in {folder}: {reason_of(exc)}; "
            "give a writable --data-dir (or CUJO_HOME)",
            file=sys.stderr,
        )
        return 3
    record = f"{shown_url(store.url)} run {run_id} (bundle in {out})"
    board = _open_board(store.url, run_id) if getattr(args, "open", False) else None
    # The sandbox began preparing when it started; its first marks reach us together.
    progress = Progress(began={"prepare": started.started_at})

    def on_step(step: str) -> None:
        # The run page follows the stages live, as the relay follows a job's steps.
        store.add_event(run_id, "step", step)
        progress.step(step)

    bundle: Bundle | None = None
    known_base, known_head = _known(base_sha), _known(head_sha)
    lost: dict[str, str] = {}
    try:
        code = started.run.wait(on_step)
        started.close_detail()
        if interrupted.is_set():
            raise KeyboardInterrupt
        if code not in (0, 3):
            verdict = error_verdict(f"the sandbox exited {code} without a bundle")
        else:
            bundle = read_bundle(out, run_id=run_id, head_sha=known_head, base_sha=known_base)
            # Locally the sandbox read base's policy from the repository named here: there is
            # no copy of the relay's to hold the plan to.
            verdict = verdict_of(
                bundle, local_judge(os.environ), policy=None, pull=pull_text(args, started)
            )
            found = reconcile("\n".join(started.printed), bundle, out)
            store.add_event(run_id, "tamper" if found.lost else "log", found.line())
            verdict, lost = with_tampering(verdict, found), described(found)
    except BundleError as exc:
        verdict = error_verdict(f"the sandbox bundle was rejected: {exc}")
        # What the harness printed as it happened still decides a decoy sent (tamper.py).
        from_record, lost = record_verdict("\n".join(started.printed), run_id, str(exc))
        verdict = from_record or verdict
    except OSError as exc:
        verdict = error_verdict(f"the sandbox could not be run or read: {reason_of(exc)}")
    except KeyboardInterrupt:
        started.run.stop()
        store.mark_abandoned(run_id, "interrupted by the user")
        print("cujo: interrupted; the run is recorded as error", file=sys.stderr)
        if board is not None:
            board.stop()
        return 3
    if instead:
        verdict = Verdict.model_validate(
            {**verdict.model_dump(), "summary": f"{instead} {verdict.summary}"}
        )
    plan_json = bundle.plan.model_dump_json(by_alias=True) if bundle and bundle.plan else None
    recorded = True
    try:
        store.finish_run(run_id, verdict, plan_json, str(out))
    except SQLAlchemyError as exc:
        recorded = False
        record = f"not recorded: {reason_of(exc)} ({record})"
        print(f"cujo review: the verdict could not be recorded: {reason_of(exc)}", file=sys.stderr)
    obj = summary_object(
        run_id=run_id,
        bundle=bundle,
        verdict=verdict,
        record=record,
        base_sha=base_sha,
        head_sha=head_sha,
        lost=lost,
        pull_request=started.pull.as_json() if started.pull else None,
    )
    if started.pull is not None:
        obj["notes"] = [*started.pull.notes, *obj["notes"]]
    print(_shown(args, obj, str(started.detail) if started.detail else None), flush=True)
    boards.extend([board] if board is not None else [])
    # A verdict that is not on the record is Cujo falling over, whatever the verdict says.
    return EXIT[verdict.state] if recorded else 3


def pull_text(args: argparse.Namespace, started: LocalReview) -> PullText:
    """Return the text of what is reviewed, as the workflow rules judge it: the pull
    request's as GitHub answered (``cujo review OWNER/REPO#N``), else the local branch's
    name (a branch has no title or body; its commit messages are judged in the sandbox)."""
    if started.pull is not None:
        fetched = started.pull
        return PullText(title=fetched.title, body=fetched.body, branch=fetched.head_ref)
    head = str(getattr(args, "head", "") or "")
    if not head or re.fullmatch(r"[0-9a-f]{40}", head):
        return PullText()
    return PullText(branch=head.removeprefix("refs/heads/"))


def _shown(args: argparse.Namespace, obj: dict[str, Any], detail: str | None) -> str:
    """Return what the review prints: the JSON, the whole report (-v), or the short one."""
    if args.json:
        return json.dumps(obj, indent=2)
    if getattr(args, "verbose", True):
        return render(obj)
    return brief(obj, detail=detail)


def _open_board(record_url: str, run_id: str) -> OpenBoard | None:
    """Serve the board on loopback in this process and open the run page in a browser."""
    from app_relay.cli.local_board import OpenBoard  # noqa: PLC0415  (loads the web stack)

    try:
        board = OpenBoard.start(record_url)
    except OSError as exc:
        print(f"cujo review: cannot open the board: {reason_of(exc)}; run `cujo board`",
              file=sys.stderr)  # fmt: skip
        return None
    board.show(run_id)
    return board


def diff_review(args: argparse.Namespace, client: ModelPort) -> int:
    """Review head's diff against base with the diff model; record it; print the verdict."""
    folder = data_dir(args.data_dir)
    run_id = f"local-{secrets.token_hex(6)}"
    repo = str(Path(args.repo).resolve()) if "://" not in args.repo else args.repo
    base_sha, head_sha = resolve(repo, args.base), resolve(repo, args.head)
    pull = getattr(args, "pull_request", None)
    try:
        store = _open_record(
            folder,
            pull.target.repo if pull else repo,
            run_id,
            base_sha,
            head_sha,
            "diff",
            pull.target.number if pull else None,
        )
    except (OSError, SQLAlchemyError) as exc:
        print(f"cujo review: cannot open the record in {folder}: {reason_of(exc)}", file=sys.stderr)
        return 3
    record = f"{shown_url(store.url)} run {run_id}"
    print(f"cujo: diff review of {repo}: {args.base} → {args.head} (run {run_id})", file=sys.stderr)
    if UNKNOWN_SHA in (base_sha, head_sha):
        verdict = error_verdict(f"{args.base} or {args.head} is not a commit of {repo}")
        evidence: dict[str, str] = {}
        ran: list[str] = []
    else:
        verdict, evidence, ran = _diff_verdict(client, repo, base_sha, head_sha)
    recorded = True
    try:
        store.finish_run(run_id, verdict)
    except SQLAlchemyError as exc:
        recorded = False
        record = f"not recorded: {reason_of(exc)} ({record})"
        print(f"cujo review: the verdict could not be recorded: {reason_of(exc)}", file=sys.stderr)
    obj = summary_object(
        run_id=run_id, bundle=None, verdict=verdict, record=record, base_sha=base_sha,
        head_sha=head_sha, pull_request=pull.as_json() if pull else None,
    )  # fmt: skip
    obj["mode"] = "diff"
    obj["isolation"] = None
    obj["notes"] = ran
    for finding in obj["findings"]:
        finding["evidence"] = [
            {"id": e["id"], "where": evidence[e["id"]]} if e["id"] in evidence else e
            for e in finding["evidence"]
        ]
    if verdict.model_use is not None:
        obj["model_use"] = verdict.model_use.model_dump(mode="json")
    shown = render(obj, evidence) if getattr(args, "verbose", True) else brief(obj)
    print(json.dumps(obj, indent=2) if args.json else shown)
    return EXIT[verdict.state] if recorded else 3


def _diff_verdict(
    client: ModelPort, repo: str, base_sha: str, head_sha: str
) -> tuple[Verdict, dict[str, str], list[str]]:
    """Return the diff review's verdict, where each hunk it cites is, and what ran."""
    from app_relay.model.diffreview import review_diff  # noqa: PLC0415
    from app_relay.model.standards import read_standards  # noqa: PLC0415

    def read_at(path: str, ref: str) -> str | None:
        return git_text(repo, "cat-file", "blob", f"{ref}:{path}")

    # The policy and the standards are read at base, never head (docs/design.md section 4).
    try:
        policy = load_policy(read_at(POLICY_FILE, base_sha))
    except PolicyError as exc:
        return error_verdict(f"the policy at base is unusable: {exc}"), {}, []
    # A pull request's diff is against the merge base, as GitHub shows it (three dots).
    diff = git_text(repo, "diff", "--no-color", "--no-ext-diff", "-M", f"{base_sha}...{head_sha}")
    if diff is None:
        return error_verdict(f"git could not show the diff {base_sha}...{head_sha}"), {}, []
    title, _, body = (git_text(repo, "log", "-1", "--format=%B", head_sha) or "").partition("\n")
    done = review_diff(
        client,
        diff=diff,
        standards=read_standards(read_at, base_sha),
        policy=policy,
        title=title,
        body=body.strip(),
    )
    return done.verdict, done.evidence(), done.ran()


@contextmanager
def _patient_interrupt() -> Iterator[threading.Event]:
    """Let the first Ctrl-C reach the sandbox alone, and wait while it stops its checks.

    Ctrl-C signals the whole foreground process group, the sandbox included. Raising
    here at once would make the runner kill the sandbox a moment later, before it has
    killed the pull request's commands (which run in sessions of their own) and removed
    its work folder. The event says a Ctrl-C came; a second one stops the wait.
    """
    interrupted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return

    def first(signum: int, frame: FrameType | None) -> None:
        if interrupted.is_set():
            raise KeyboardInterrupt
        interrupted.set()
        print(
            "cujo: interrupted; stopping the sandbox (Ctrl-C again to stop waiting)",
            file=sys.stderr,
            flush=True,
        )

    previous = signal.signal(signal.SIGINT, first)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)
