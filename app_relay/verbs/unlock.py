"""Apply `/cujo dismiss` and `/cujo reinstate` from comments (docs/design.md section 8).

The thin I/O around ``parse`` and ``decision`` (which read verbs and decide who may,
purely): read the comment from the webhook, record it once in the commands table, read
the commenter's permission from GitHub at that moment (never for a bot), and either move
the pull request's newest run (with the dismissal, the reinstated review, the check's new
face and a ``+1`` as effects of that same transaction) or refuse it with ``confused`` and
a short reply saying why. Every outcome speaks; a redelivered comment is applied once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from app_relay.github.answers import GitHubError
from app_relay.github.client import GitHubGateway
from app_relay.github.event import Event, MalformedEvent, payload_reader
from app_relay.github.payloads import OnComment
from app_relay.runs.desk import RunDesk
from app_relay.runs.effects import (
    check_intent,
    comment_intent,
    dismiss_intent,
    reaction_intent,
    review_intent,
)
from app_relay.runs.finish import RunFinisher
from app_relay.runstate.machine import guard_for
from app_relay.store import CommandRecord, Intent, RunRecord
from app_relay.verbs.decision import change_for, decide, dismissal_message, refusal_reply
from app_relay.verbs.parse import Verb, parse_verbs
from app_relay.verdict import Verdict
from app_relay.words.inert import code_span
from app_relay.words.review_body import render_review
from cujo_action.schema import Policy

log = logging.getLogger(__name__)
# A login, an account type or a time: anything longer is no field GitHub sends.
_MAX_TEXT = 256


class CommentCommand:
    """A comment's fields as a command needs them, read fail-closed from the payload."""

    def __init__(self, event: Event) -> None:
        p = payload_reader(event)
        comment, issue = p.obj("comment"), p.obj("issue")
        user, author = comment.obj("user"), issue.obj("user")
        if event.repo is None or event.installation_id is None:
            raise MalformedEvent("the issue_comment event names no repository or installation")
        self.repo: str = event.repo
        self.installation_id: int = event.installation_id
        self.delivery_id = event.delivery_id
        body = comment.data.get("body")
        self.body = body if isinstance(body, str) else ""
        self.comment_id = comment.positive("id")
        self.number = issue.positive("number")
        self.is_pull_request = isinstance(issue.data.get("pull_request"), Mapping)
        self.login = user.text("login", max_len=_MAX_TEXT)
        self.user_type = user.text("type", max_len=_MAX_TEXT)
        self.pr_author = author.text("login", max_len=_MAX_TEXT)
        created = comment.text("created_at", max_len=_MAX_TEXT)
        try:
            self.created_at = datetime.fromisoformat(created.replace("Z", "+00:00"))
        except ValueError:
            raise MalformedEvent(f"comment.created_at {created[:40]!r} is not a time") from None
        if self.created_at.tzinfo is None:
            raise MalformedEvent("comment.created_at carries no time zone")


@dataclass(frozen=True)
class Unlock:
    """Take verbs from comments to a lifted or reinstated hold, or a refusal that says why."""

    desk: RunDesk  # the coordinator's own: a verb moves a run as the coordinator does
    finisher: RunFinisher

    def command(self, event: Event) -> None:
        """Handle one ``issue_comment`` delivery; only a new comment is ever a command."""
        if event.action != "created":
            return  # an edit is never a command: what was read is what counts
        raw_body = event.payload.get("comment")
        body = raw_body.get("body") if isinstance(raw_body, Mapping) else None
        verbs = parse_verbs(body) if isinstance(body, str) else []
        if not verbs:
            return  # most comments are conversation, not commands: say nothing
        cmd = CommentCommand(event)
        if not cmd.is_pull_request:
            return  # on an issue there is nothing to hold
        gh = self.desk.github_for(cmd.installation_id)
        session_id = self.desk.store.open_session(cmd.repo, cmd.number, "github")
        with self.desk.leases.session(session_id):
            record = self.desk.store.record_command(
                delivery_id=cmd.delivery_id,
                repo=cmd.repo,
                pr_number=cmd.number,
                comment_id=cmd.comment_id,
                author=cmd.login,
                author_type=cmd.user_type,
                verb=verbs[0].value,
                created_at=cmd.created_at,
            )
            if record.outcome != "pending":
                return  # a redelivery of a comment already answered
            run = self.desk.store.newest_run(session_id)
            decision = decide(
                verbs,
                event="issue_comment",
                action="created",
                is_pull_request=True,
                commenter_login=cmd.login,
                commenter_type=cmd.user_type,
                pr_author=cmd.pr_author,
                # Read from GitHub now, never cached; never read at all for a bot.
                permission_reader=lambda: gh.permission(cmd.repo, cmd.login),
            )
            if decision.outcome != "allowed" or decision.verb is None:
                self._refuse(gh, cmd, record, run, decision.verb, decision.reason)
                return
            if run is None:
                reason = "Cujo has not reviewed this pull request, so there is nothing to lift."
                self._refuse(gh, cmd, record, None, decision.verb, reason)
                return
            with self.desk.leases.acting(run.run_id):
                self._apply(gh, cmd, record, decision.verb)

    def _apply(
        self, gh: GitHubGateway, cmd: CommentCommand, record: CommandRecord, verb: Verb
    ) -> None:
        session_id = self.desk.store.open_session(cmd.repo, cmd.number, "github")
        run = self.desk.store.newest_run(session_id)
        assert run is not None
        pr = gh.pull_request(cmd.repo, cmd.number)
        policy = Policy.model_validate_json(run.policy_json) if run.policy_json else None
        on_unproven = policy.on_unproven if policy is not None else "hold"
        on_error: Literal["hold", "pass"] = "pass" if run.on_error == "pass" else "hold"
        hold_state = run.lifted if run.state == "dismissed" else run.state
        held = {"unproven": on_unproven == "hold", "error": on_error == "hold"}.get(
            hold_state or "", True
        )
        change = change_for(
            verb,
            state=run.state,
            held=held,
            dismissed_from=run.lifted,
            run_head_sha=run.head_sha,
            pr_head_sha=pr.head_sha,
            # GitHub's time of the verdict (or dismissal), never the relay's clock: the
            # comment's created_at is GitHub's, so a skewed relay cannot refuse anyone.
            posted_at=self.desk.store.verdict_posted_at(run.run_id),
            comment_created_at=cmd.created_at,
        )
        if not change.applies or change.to_state is None:
            self._refuse(gh, cmd, record, run, verb, change.reason)
            return
        effects: list[Intent] = []
        if change.review == "dismiss" and run.review_id is not None:
            message = dismissal_message(cmd.login, run.head_sha)
            effects.append(dismiss_intent(run.review_id, message, key=f"dismiss:{record.id}"))
        elif change.review == "block":
            effects.append(self._reinstated_review(run, cmd.login, record.id))
        hold = self.finisher.hold(run)
        view = guard_for(
            change.to_state,
            summary=run.summary,
            on_error=on_error,
            on_unproven=on_unproven,
            holds=hold.answer,
            holds_line=hold.line(),
            dismissed_by=cmd.login,
        )
        effects.append(check_intent(view, run.head_sha))
        effects.append(reaction_intent("+1", comment_id=cmd.comment_id))
        detail = f"/cujo {verb.value} by {cmd.login}"
        applied = self.desk.store.move(
            run.run_id, change.to_state, detail, effects=effects, command=(record.id, detail)
        )
        if not applied:  # the run moved between reading it and now
            self._refuse(gh, cmd, record, run, verb, "The review changed while this was read.")
            return
        self.desk.outbox.drain(run.run_id)

    def _reinstated_review(self, run: RunRecord, login: str, command_id: int) -> Intent:
        verdict = Verdict(
            state="blocked",
            summary=run.summary,
            findings=list(run.findings),
            unproven=list(run.unproven),
            judge=run.judge or "deterministic",
        )
        body = render_review(verdict, head_sha=run.head_sha, mode=run.mode)
        body += f"\n\nThe block was reinstated on this commit by a maintainer ({code_span(login)})."
        return review_intent(run.run_id, "blocking", body, run.head_sha, key=f"review:{command_id}")

    def _refuse(
        self,
        gh: GitHubGateway,
        cmd: CommentCommand,
        record: CommandRecord,
        run: RunRecord | None,
        verb: Verb | None,
        reason: str,
    ) -> None:
        reply = refusal_reply(verb, reason)
        if run is None:
            # No run to hang the effects on: answer directly, once (the record says so).
            if self.desk.store.decide_command(record.id, "refused", reason):
                try:
                    gh.add_reaction(cmd.repo, OnComment(cmd.comment_id), "confused")
                    gh.comment(cmd.repo, cmd.number, reply)
                except (GitHubError, ValueError) as exc:
                    log.warning("could not answer comment %s: %s", cmd.comment_id, exc)
            return
        effects = [
            reaction_intent("confused", comment_id=cmd.comment_id),
            comment_intent(run.run_id, cmd.number, reply, key=f"reply:{record.id}"),
        ]
        if self.desk.store.decide_command(
            record.id, "refused", reason, run_id=run.run_id, effects=effects
        ):
            self.desk.outbox.drain(run.run_id)
