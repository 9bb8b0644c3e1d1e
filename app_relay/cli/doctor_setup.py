"""`cujo doctor`'s checks past the guard: what a maintainer would otherwise find alone.

Each returns ``(verdict, line)``: ``ok``, ``FAIL`` (the repository is not guarded as the
guide says: doctor exits 1) or ``warn`` (works, but not as well as it could); every line
that is not ``ok`` names the fix. Nothing here writes to GitHub or the record, and no
secret is printed.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata

from sqlalchemy import make_url

from app_relay.github.answers import GitHubError
from app_relay.github.doctor_reads import ActionsPolicy, AppSettings
from app_relay.github.hook_deliveries import DeliveryListing
from app_relay.store.revision import RecordRevision

OK, FAIL, WARN = "ok", "FAIL", "warn"
Line = tuple[str, str]
# The window of webhook deliveries looked at, and how many pages of them at most.
DELIVERIES_WINDOW_S = 24 * 3600
DELIVERY_PAGES = 3
# `uses: OWNER/REPO/.github/workflows/sandbox.yml@SHA # LABEL` in a repository's workflow.
PIN = re.compile(
    r"/\.github/workflows/sandbox\.yml@(?P<ref>[^\s#]+)(?:[ \t]+#[ \t]*(?P<label>[^\n]*?))?[ \t]*$",
    re.MULTILINE,
)
SHA = re.compile(r"[0-9a-f]{40}")
RELEASE = re.compile(r"v(\d+\.\d+\.\d+)")
ACTIONS_TO_ALLOW = (
    "cujo-dev/cujo@*, actions/checkout, actions/setup-python and actions/upload-artifact"
)


@dataclass(frozen=True, slots=True)
class RelayVersion:
    """The Cujo this relay runs: its version, and its commit when known."""

    version: str
    commit: str | None


def relay_version(environ: Mapping[str, str] | None = None) -> RelayVersion:
    """Return this relay's version and commit (``CUJO_RELAY_COMMIT``, or pip's record of a
    ``git+https://…@COMMIT`` install); the commit is None when neither says."""
    env = os.environ if environ is None else environ
    try:
        dist = metadata.distribution("cujo")
    except metadata.PackageNotFoundError:
        return RelayVersion(version="unknown", commit=env.get("CUJO_RELAY_COMMIT") or None)
    said = (env.get("CUJO_RELAY_COMMIT") or "").strip().lower()
    commit = said if SHA.fullmatch(said) else None
    if commit is None:
        # PEP 610: an install from a VCS URL records the commit it resolved.
        try:
            direct = json.loads(dist.read_text("direct_url.json") or "{}")
        except ValueError:
            direct = {}
        vcs = direct.get("vcs_info") if isinstance(direct, dict) else None
        found = vcs.get("commit_id") if isinstance(vcs, dict) else None
        commit = found if isinstance(found, str) and SHA.fullmatch(found) else None
    return RelayVersion(version=dist.version, commit=commit)


def pin_line(workflow_file: str, text: str | None, relay: RelayVersion) -> Line:
    """Compare the commit a repository's workflow pins with the Cujo this relay runs."""
    where = f"`.github/workflows/{workflow_file}`"
    copy = "copy examples/workflow.yml there, its `uses:` line pinned as docs/install.md says"
    if text is None:
        return FAIL, f"{where} could not be read on the default branch. Fix: {copy}."
    found = PIN.search(text)
    if found is None:
        return (
            FAIL,
            f"{where} does not call Cujo's reusable workflow `…/sandbox.yml@…`. Fix: {copy}.",
        )
    ref, label = found["ref"], (found["label"] or "").strip()
    pinned = f"{ref[:12]}" + (f" ({label})" if label else "")
    runs = f"{relay.version}" + (f", commit {relay.commit[:12]}" if relay.commit else "")
    if not SHA.fullmatch(ref):
        return FAIL, (
            f"{where} calls Cujo at `{ref}`, not a commit: a tag or branch can move under it. "
            "Fix: pin the full commit SHA with the release beside it (`@<sha> # vX.Y.Z`)."
        )
    released = RELEASE.fullmatch(label)
    if relay.commit is not None and relay.commit == ref:
        return OK, f"{where} pins {pinned}, the commit this relay runs"
    if relay.commit is None and released and released[1] == relay.version:
        return OK, f"{where} pins {pinned}, the release this relay runs ({runs})"
    if relay.commit is None and not released:
        return WARN, (
            f"{where} pins {pinned}; this relay's commit is unknown ({runs}, installed from a "
            "work tree). Fix: install the relay from the pinned commit "
            "(`pip install 'cujo[relay] @ git+https://github.com/cujo-dev/cujo@<sha>'`) or set "
            "CUJO_RELAY_COMMIT to the commit you deployed."
        )
    return FAIL, (
        f"{where} pins {pinned} but this relay runs {runs}: the workflow's reports may not be "
        "what this relay reads. Fix: pin the relay's commit in the workflow, or install the "
        "relay from the pinned commit."
    )


def actions_lines(repo: str, policy: ActionsPolicy) -> list[Line]:
    """Say whether Actions can run Cujo's workflow there, and how fork pull requests wait."""
    settings = "the repository's Settings → Actions → General"
    lines: list[Line] = []
    if policy.enabled is None:
        lines.append((WARN, (
            f"the Actions policy of {repo} is not readable (the App has no Administration: "
            f"read). Fix: check in {settings} that Actions run and allow {ACTIONS_TO_ALLOW}."
        )))  # fmt: skip
    elif not policy.enabled:
        lines.append((FAIL, f"Actions are disabled on {repo}. Fix: enable them in {settings}."))
    elif policy.allowed_actions == "local_only":
        lines.append((FAIL, (
            f"{repo} lets only its own actions run, so Cujo's reusable workflow cannot. "
            f"Fix: in {settings}, allow {ACTIONS_TO_ALLOW}."
        )))  # fmt: skip
    elif policy.allowed_actions == "selected":
        lines.append((WARN, (
            f"{repo} lets only selected actions run: unless {ACTIONS_TO_ALLOW} are allowed "
            f"every run ends in startup_failure. Fix: allow them in {settings}."
        )))  # fmt: skip
    else:
        lines.append((OK, f"Actions run on {repo} and may use Cujo's workflow and actions"))
    if policy.fork_approval is not None:
        who = policy.fork_approval.replace("_", " ")
        lines.append((OK, (
            f"fork pull requests of {repo}: GitHub holds their own workflows for approval "
            f"({who}); Cujo's runs are dispatched by the relay, which reviews every one"
        )))  # fmt: skip
    return lines


def events_line(app: AppSettings, wanted: list[str]) -> Line:
    """Compare the events the App subscribes to with the manifest's."""
    missing = sorted(set(wanted) - app.events)
    if not missing:
        return OK, f"the App subscribes to every event the relay uses ({len(wanted)})"
    return FAIL, (
        f"the App does not subscribe to {', '.join(missing)}. Fix: tick them in the App's "
        "settings (Permissions and events → Subscribe to events), then accept the change on "
        "each installation."
    )


def deliveries_line(listing: DeliveryListing, now: float | None = None) -> Line:
    """Say how the App's recent webhook deliveries went, and what to do about failures."""
    hours = DELIVERIES_WINDOW_S // 3600
    shown = listing.deliveries
    if not shown:
        return WARN, (
            f"no webhook delivery in the last {hours} hours. Fix: open a pull request to see "
            "one; if none comes, check the App's webhook is active and its URL is the "
            "relay's `/webhook` (the App's settings → General → Webhook)."
        )
    reached = {d.guid for d in shown if d.delivered}
    lost = [d for d in shown if not d.delivered and d.guid not in reached]
    more = "" if listing.complete else f" (the newest {len(shown)} read)"
    if not lost:
        return OK, f"{len(shown)} webhook deliveries in the last {hours} hours{more}, all delivered"
    last = lost[0]
    ago = int(((time.time() if now is None else now) - last.delivered_at) // 60)
    answer = f"HTTP {last.status_code}" if last.status_code else last.status
    return FAIL, (
        f"{len(lost)} of {len(shown)} webhook deliveries in the last {hours} hours{more} never "
        f"reached the relay (newest: {last.event} {ago} min ago, {answer}). Fix: make the "
        "App's webhook URL reach `cujo relay serve` (the TLS proxy, the relay's logs); the "
        "relay's catch-up asks GitHub again for them on start and every "
        "CUJO_CATCH_UP_EVERY_S seconds."
    )


def sign_in_line(environ: Mapping[str, str], app: AppSettings) -> Line:
    """Say whether the board's sign-in is set, is this App's client, and where it returns."""
    client_id = environ.get("CUJO_OAUTH_CLIENT_ID", "").strip()
    has_secret = bool(environ.get("CUJO_OAUTH_CLIENT_SECRET", "").strip())
    board = environ.get("CUJO_BOARD_URL", "").strip().rstrip("/")
    register = "`cujo relay register` writes them; or copy them from the App's settings"
    if not client_id and not has_secret:
        return WARN, (
            "the board's sign-in is not set (CUJO_OAUTH_CLIENT_ID, CUJO_OAUTH_CLIENT_SECRET): "
            f"the board shows nobody a run. Fix: {register}."
        )
    if not client_id or not has_secret:
        unset = "CUJO_OAUTH_CLIENT_SECRET" if client_id else "CUJO_OAUTH_CLIENT_ID"
        return FAIL, f"the board's sign-in has no {unset}. Fix: {register}."
    if app.client_id is not None and client_id != app.client_id:
        return FAIL, (
            f"CUJO_OAUTH_CLIENT_ID is not this App's client (GitHub says {app.client_id}). "
            f"Fix: set it and a client secret of this App ({register})."
        )
    if not board:
        return WARN, (
            "the board's sign-in returns to whatever address a request came by: CUJO_BOARD_URL "
            "is unset. Fix: set it to the relay's public URL, whose `/signin/callback` is the "
            "App's callback URL."
        )
    return OK, (
        f"the board's sign-in is the App's client; its callback is {board}/signin/callback "
        "(a callback URL in the App's settings, as register set it)"
    )


def record_line(database_url: str, revision: RecordRevision | Exception) -> Line:
    """Say which migration the record is at against this relay's newest."""
    shown = make_url(database_url).render_as_string(hide_password=True)
    if isinstance(revision, Exception):
        return FAIL, (
            f"the record ({shown}) cannot be read: {type(revision).__name__}. Fix: check "
            "CUJO_DATABASE_URL and that the database answers."
        )
    if not revision.exists:
        return WARN, (
            f"the record ({shown}) does not exist yet. Fix: `cujo relay migrate` makes it "
            "(`cujo relay serve` does on start)."
        )
    if revision.current_is_head:
        return OK, f"the record is at migration {revision.head}, the newest this relay knows"
    return FAIL, (
        f"the record is at migration {revision.current or 'none'}; this relay's newest is "
        f"{revision.head}. Fix: `cujo relay migrate` (a record newer than the relay needs "
        "the relay that migrated it)."
    )


def model_line(has_key: bool) -> Line:
    """Say whether a model key is set (never the key)."""
    if has_key:
        return OK, "a model key is set (ANTHROPIC_API_KEY): the model judge and diff reviews run"
    return WARN, (
        "no model key (ANTHROPIC_API_KEY): the deterministic judge decides alone. Fix: set "
        "ANTHROPIC_API_KEY in the relay's environment for the model judge."
    )


def safe(read: str, error: GitHubError) -> Line:
    """Turn a read GitHub refused into a failing line."""
    return FAIL, f"GitHub could not be read ({read}): {error}"
