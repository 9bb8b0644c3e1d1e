"""`cujo doctor`: check that Cujo can guard a repository on GitHub, one line per check.

Past the installation, the workflow and the guard (here), the lines of ``doctor_setup.py``:
the workflow's pin against the relay's version, the repository's Actions policy, the App's
events and recent webhook deliveries, the board's sign-in, the record's migration and the
model key.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from app_relay.cli import doctor_setup as more
from app_relay.github.answers import GitHubError
from app_relay.github.app_auth import GitHubApp
from app_relay.github.doctor_reads import read_app
from app_relay.github.hook_deliveries import AppHookCalls
from app_relay.github.manifest import app_manifest
from app_relay.github.protection import read_hold
from app_relay.settings import SettingsError, load_settings
from app_relay.store.revision import RecordRevision, record_revision

# The App's permissions a relay needs (app-manifest.json asks for them). Without
# `administration: read` the guard still reads branch protection through the branch read.
_PERMISSIONS_OPTIONAL = frozenset({"administration"})
_LEVELS = {"read": 1, "write": 2, "admin": 3}


def doctor(args: argparse.Namespace) -> int:
    """Check that Cujo can work on a repository: one line per check, with the fix."""
    try:
        settings = load_settings()
        github = GitHubApp(
            app_id=settings.app_id,
            private_key=settings.private_key.reveal(),
            base_url=settings.github_api_url,
        )
    except (SettingsError, ValueError) as exc:
        print(f"cujo doctor: {exc}", file=sys.stderr)
        return 2
    manifest = app_manifest()
    wanted: dict[str, str] = manifest["default_permissions"]
    results: list[tuple[bool, str]] = []

    def check(passed: bool, line: str) -> None:
        results.append((passed, line))
        print(f"{'ok  ' if passed else 'FAIL'}  {line}", flush=True)

    def say(found: more.Line) -> None:
        # A warning does not fail the doctor: it works, less well than it could.
        verdict, line = found
        results.append((verdict != more.FAIL, line))
        print(f"{verdict:<4}  {line}", flush=True)

    repo = args.repo
    try:
        try:
            installation = github.installation_of(repo)
        except (GitHubError, ValueError) as exc:
            fix = "install the app on this repository (its GitHub page → Install)"
            check(False, f"the Cujo app is installed on {repo}: {exc}. Fix: {fix}.")
            return 1
        check(True, f"the Cujo app is installed on {repo} (installation {installation.id})")
        missing = sorted(
            f"{name}: {level}"
            for name, level in wanted.items()
            if name not in _PERMISSIONS_OPTIONAL
            and _LEVELS.get(installation.permissions.get(name, ""), 0) < _LEVELS[level]
        )
        check(
            not missing,
            "the app has the permissions it needs"
            + (
                f": missing {', '.join(missing)}. Fix: grant them in the app's settings "
                "(Permissions and events), then accept them on the installation."
                if missing
                else ""
            ),
        )
        gw = github.gateway(installation.id)
        try:
            workflow = gw.workflow(repo, settings.workflow)
            where = f"`.github/workflows/{settings.workflow}` on the default branch"
            if workflow is None:
                fix = "add the sandbox workflow there (or set CUJO_WORKFLOW to its file name)"
                check(False, f"{where}: not found. Fix: {fix}.")
            else:
                check(
                    workflow.state == "active",
                    f"{where}: {workflow.state}"
                    + (
                        "" if workflow.state == "active" else ". Fix: enable it in the Actions tab."
                    ),
                )
            default = gw.default_branch(repo)
            branch = args.branch or default
            hold = read_hold(gw, repo, branch, settings.app_id)
            check(hold.answer == "holds", hold.line())
            # The relay dispatches the default branch's copy of the workflow.
            text = gw.file_at(repo, f".github/workflows/{settings.workflow}", default)
            say(more.pin_line(settings.workflow, text, more.relay_version()))
            for line in more.actions_lines(repo, gw.actions_policy(repo)):
                say(line)
        except GitHubError as exc:
            check(False, f"GitHub could not be read: {exc}")
        finally:
            gw.close()
        try:
            app = read_app(github)
            say(more.events_line(app, list(manifest["default_events"])))
            since = time.time() - more.DELIVERIES_WINDOW_S
            listing = AppHookCalls(github).deliveries_since(since, max_pages=more.DELIVERY_PAGES)
            say(more.deliveries_line(listing))
            say(more.sign_in_line(os.environ, app))
        except GitHubError as exc:
            say(more.safe("the App's settings and webhook deliveries", exc))
    finally:
        github.close()
    try:
        revision: RecordRevision | Exception = record_revision(settings.database_url)
    except Exception as exc:  # any driver's error: the line names its type
        revision = exc
    say(more.record_line(settings.database_url, revision))
    say(more.model_line(settings.anthropic_api_key is not None))
    return 0 if all(passed for passed, _ in results) else 1
