"""Judge whether a run's reviewed head may be merged now, from what GitHub answered; pure.

docs/design.md section 12: the person (never a Bot, write or more), the pull
request (open, not a draft, into the reviewed base, at the reviewed head, no conflict),
the run's verdict (clean, or its block or unproven hold lifted on this head), every
required check from rulesets and classic protection passing on the head (a check pinned
to an App counted only when that App reported it), and a server-side guard that the
base cannot move under the reviewed head (strict required checks or a merge queue).
Every answer that is missing, malformed or late blocks, saying why: there is no "merge
anyway". ``reading.py`` makes the reads; this module only judges plain values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Final, Literal, get_args

from app_relay.github.branch_rules import (
    MERGE_QUEUE,
    REQUIRED_CHECKS,
    Branch,
    BranchProtection,
    BranchRules,
    RequiredCheck,
    Unreadable,
    classic_checks,
)
from app_relay.github.merge_facts import CheckRunSeen, GateAnswers, Person, PullFacts, StatusSeen
from app_relay.github.vocab import MERGE_METHODS
from app_relay.runstate.machine import RunState
from app_relay.words.inert import code_span

# The answer types live in github/merge_facts.py; the gate's interface names them here too.
__all__ = [
    "BLOCKER_CODES",
    "Blocker",
    "BlockerCode",
    "CheckRunSeen",
    "GateAnswers",
    "GateReading",
    "Person",
    "PullFacts",
    "RunFacts",
    "StatusSeen",
    "judge_gate",
]

BlockerCode = Literal[
    "bot",
    "no-write",
    "not-open",
    "draft",
    "base-changed",
    "head-moved",
    "verdict",
    "conflict",
    "mergeable-unknown",
    "check-missing",
    "check-failing",
    "check-pinned",
    "base-guard",
    "queue-unknown",
    "unreadable",
    "deadline",
]
BLOCKER_CODES: Final[frozenset[str]] = frozenset(get_args(BlockerCode))
WRITE: Final = frozenset({"admin", "maintain", "write"})
# A check run passes with these conclusions; a commit status only with success.
# https://docs.github.com/en/pull-requests/collaborating-with-pull-requests/collaborating-on-repositories-with-code-quality-features/about-status-checks#check-statuses-and-conclusions
PASSING_CONCLUSIONS: Final = frozenset({"success", "neutral", "skipped"})
# The run's verdicts a merge may follow: clean, or a hold a maintainer lifted on this head.
# An errored run that was dismissed reviewed nothing, so it is not among them.
LIFTABLE: Final = frozenset({"blocked", "unproven"})
_NOT_READ: Final = "Cujo did not read "
BASE_GUARD_WORDS: Final = (
    "the base can move under the reviewed head: require branches to be up to date, or a merge queue"
)


@dataclass(frozen=True, slots=True)
class Blocker:
    """One reason the merge may not happen now, in one plain sentence for a person.

    Text from the pull request or GitHub is inert (``words.inert.code_span``).
    """

    code: BlockerCode
    words: str


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What the run's record says it reviewed (``RunRecord``: state, lifted, base_ref)."""

    repo: str
    number: int
    head_sha: str
    base_ref: str
    state: RunState
    lifted: RunState | None


# ---- the reading ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GateReading:
    """The gate's answer from one pass: what blocks, and what a merge would pin."""

    blockers: tuple[Blocker, ...]
    head_sha: str
    base_ref: str
    base_sha: str
    methods: tuple[str, ...]  # merge methods the repository allows ("merge","squash","rebase")
    queue: bool  # the base has a merge queue: enqueue instead of PUT merge
    pull_node_id: str = ""  # for the GraphQL enqueue

    @property
    def ready(self) -> bool:
        """Say whether nothing blocks the merge."""
        return not self.blockers

    def to_json(self) -> dict[str, Any]:
        """Return the reading as plain JSON (for the attempt's record)."""
        return {
            "blockers": [{"code": b.code, "words": b.words} for b in self.blockers],
            "head_sha": self.head_sha,
            "base_ref": self.base_ref,
            "base_sha": self.base_sha,
            "methods": list(self.methods),
            "queue": self.queue,
            "pull_node_id": self.pull_node_id,
        }

    @classmethod
    def from_json(cls, d: Any) -> GateReading:
        """Read a reading back from ``to_json``; anything else raises ValueError."""
        if not isinstance(d, dict):
            raise ValueError("a gate reading is a JSON object")
        blockers = d.get("blockers")
        if not isinstance(blockers, list):
            raise ValueError("a gate reading's 'blockers' is not a list")
        found = []
        for b in blockers:
            if not isinstance(b, dict) or b.get("code") not in BLOCKER_CODES:
                raise ValueError("a gate reading holds a blocker with an unknown code")
            found.append(Blocker(b["code"], _text(b, "words")))
        methods = d.get("methods")
        if not isinstance(methods, list) or any(m not in MERGE_METHODS for m in methods):
            raise ValueError("a gate reading's 'methods' are not merge methods")
        queue = d.get("queue")
        if not isinstance(queue, bool):
            raise ValueError("a gate reading's 'queue' is not a boolean")
        return cls(
            blockers=tuple(found),
            head_sha=_text(d, "head_sha"),
            base_ref=_text(d, "base_ref"),
            base_sha=_text(d, "base_sha"),
            methods=tuple(methods),
            queue=queue,
            pull_node_id=_text(d, "pull_node_id"),
        )


def _text(d: dict[str, Any], key: str) -> str:
    value = d.get(key)
    if not isinstance(value, str):
        raise ValueError(f"a gate reading's {key!r} is not a string")
    return value


# ---- judging --------------------------------------------------------------------------


def judge_gate(run: RunFacts, answers: GateAnswers, *, app_id: int) -> GateReading:
    """Judge from one pass's answers whether the run's reviewed head may be merged now."""
    blockers = _person(answers.person)
    pull = answers.pull if isinstance(answers.pull, PullFacts) else None
    base = answers.base if isinstance(answers.base, Branch) else None
    rules = answers.rules if isinstance(answers.rules, BranchRules) else None
    queue = rules is not None and any(r.type == MERGE_QUEUE for r in rules.rules)
    methods = answers.methods if isinstance(answers.methods, tuple) else ()
    reading = GateReading(
        blockers=(),
        head_sha=pull.head_sha if pull is not None else run.head_sha,
        base_ref=pull.base_ref if pull is not None else run.base_ref,
        base_sha=base.sha if base is not None else "",
        methods=methods,
        queue=queue,
        pull_node_id=pull.node_id if pull is not None else "",
    )
    if any(b.code == "bot" for b in blockers):
        # A Bot is refused before anything else is read or said (as for the verbs).
        return _with(reading, blockers)
    if answers.stopped:
        blockers.append(Blocker("deadline", _deadline_words(answers.stopped)))
    blockers += _pull(run, answers)
    blockers += _verdict(run)
    blockers += _checks(answers, run.head_sha)
    blockers += _base_branch(answers)
    blockers += _base_guard(answers)
    blockers += _methods(answers.methods, queue)
    if answers.stopped:
        # What the deadline cut off is said once, by the deadline blocker.
        blockers = [b for b in blockers if not b.words.startswith(_NOT_READ)]
    return _with(reading, blockers)


def _with(reading: GateReading, blockers: list[Blocker]) -> GateReading:
    return replace(reading, blockers=tuple(dict.fromkeys(blockers)))  # each sentence once


def _not_read(what: str) -> Blocker:
    return Blocker("unreadable", f"{_NOT_READ}{what}.")


def _unreadable(what: str, u: Unreadable) -> Blocker:
    return Blocker("unreadable", f"Cujo could not read {what}: {u.why}.")


def _deadline_words(stopped: str) -> str:
    return f"GitHub did not answer in time: the gate stopped before reading {stopped}."


def _person(person: Person | Unreadable | None) -> list[Blocker]:
    if person is None:
        return [_not_read("who you are on GitHub")]
    if isinstance(person, Unreadable):
        return [_unreadable("who you are on GitHub", person)]
    if person.type == "Bot":
        return [Blocker("bot", f"{code_span(person.login)} is a bot account: bots never merge.")]
    if person.type != "User":
        return [Blocker("bot", f"GitHub says {code_span(person.login)} is a "
                        f"{code_span(person.type)}, not a person: only people merge.")]  # fmt: skip
    if person.permission is None:
        return [_not_read("your permission on the repository")]
    if isinstance(person.permission, Unreadable):
        return [_unreadable("your permission on the repository", person.permission)]
    if person.permission not in WRITE:
        return [
            Blocker(
                "no-write",
                f"Your permission on the repository is {code_span(person.permission)}; "
                "merging needs write, maintain or admin.",
            )
        ]
    return []


def _pull(run: RunFacts, answers: GateAnswers) -> list[Blocker]:
    pull = answers.pull
    if pull is None:
        return [_not_read("the pull request")]
    if isinstance(pull, Unreadable):
        return [_unreadable("the pull request", pull)]
    found: list[Blocker] = []
    if pull.merged:
        found.append(Blocker("not-open", "The pull request is already merged."))
    elif pull.state != "open":
        found.append(Blocker("not-open", "The pull request is closed."))
    if pull.draft:
        found.append(Blocker("draft", "The pull request is a draft."))
    if pull.base_ref != run.base_ref:
        found.append(
            Blocker(
                "base-changed",
                f"The pull request now targets {code_span(pull.base_ref)}; the run reviewed "
                f"it against {code_span(run.base_ref)}.",
            )
        )
    if pull.head_sha != run.head_sha:
        found.append(
            Blocker(
                "head-moved",
                f"The head moved to {code_span(pull.head_sha[:7])} after the review of "
                f"{code_span(run.head_sha[:7])}: only the reviewed head is merged.",
            )
        )
    if pull.mergeable is False:
        found.append(Blocker("conflict", "The pull request conflicts with its base."))
    elif pull.mergeable is None and not pull.merged and pull.state == "open":
        found.append(
            Blocker(
                "mergeable-unknown",
                "GitHub had not worked out whether the pull request merges cleanly "
                f"(asked {max(answers.mergeable_reads, 1)} times).",
            )
        )
    return found


def _verdict(run: RunFacts) -> list[Blocker]:
    if run.state == "clean":
        return []
    if run.state == "dismissed" and run.lifted in LIFTABLE:
        return []
    if run.state == "dismissed":
        said = f"a dismissed {code_span(run.lifted or 'unknown')} hold"
    else:
        said = code_span(run.state)
    return [
        Blocker(
            "verdict",
            f"The run's verdict is {said}: only a clean run, or a block or unproven hold a "
            "maintainer lifted on this head, may be merged.",
        )
    ]


# ---- required checks ------------------------------------------------------------------


def _required(answers: GateAnswers) -> tuple[RequiredCheck, ...] | list[Blocker]:
    """Return every check the base requires, or what blocks for want of knowing them."""
    found: list[Blocker] = []
    if isinstance(answers.rules, Unreadable):
        found.append(_unreadable("the base branch's rulesets", answers.rules))
    elif answers.rules is None:
        found.append(_not_read("the base branch's rulesets"))
    if not answers.protection_read:
        found.append(_not_read("the base branch's classic protection"))
        return found
    classic = classic_checks(answers.protection, answers.base)
    if isinstance(classic, Unreadable):
        found.append(_unreadable("the base branch's classic protection", classic))
    if found or not isinstance(answers.rules, BranchRules) or isinstance(classic, Unreadable):
        return found
    return tuple(dict.fromkeys((*answers.rules.required_checks, *classic)))


def _checks(answers: GateAnswers, head: str) -> list[Blocker]:
    required = _required(answers)
    if isinstance(required, list):
        return required
    found: list[Blocker] = []
    runs, statuses = answers.check_runs, answers.statuses
    if isinstance(runs, Unreadable):
        found.append(_unreadable("the check runs on the head", runs))
    elif runs is None:
        found.append(_not_read("the check runs on the head"))
    if isinstance(statuses, Unreadable):
        found.append(_unreadable("the commit statuses on the head", statuses))
    elif statuses is None:
        found.append(_not_read("the commit statuses on the head"))
    if found or not isinstance(runs, tuple) or not isinstance(statuses, tuple):
        return found
    for check in required:
        blocker = _check(check, runs, statuses, head)
        if blocker is not None:
            found.append(blocker)
    return found


def _latest(runs: tuple[CheckRunSeen, ...]) -> list[CheckRunSeen]:
    """Keep the newest run of each name from each App (ids grow with time)."""
    newest: dict[tuple[str, int | None], CheckRunSeen] = {}
    for r in runs:
        key = (r.name, r.app_id)
        if key not in newest or r.id > newest[key].id:
            newest[key] = r
    return list(newest.values())


def _check(
    check: RequiredCheck,
    runs: tuple[CheckRunSeen, ...],
    statuses: tuple[StatusSeen, ...],
    head: str,
) -> Blocker | None:
    name = code_span(check.context)
    named = [r for r in _latest(runs) if r.name == check.context]
    status = [s for s in statuses if s.context == check.context]
    if check.app_id is not None:
        # Pinned: only that App's run counts; a status or another App's run never does.
        pinned = [r for r in named if r.app_id == check.app_id]
        if not pinned:
            if named or status:
                return Blocker(
                    "check-pinned",
                    f"The required check {name} must come from the App with id "
                    f"{check.app_id}, and only another source reported it on the head.",
                )
            return Blocker(
                "check-missing", f"The required check {name} has not reported on the head."
            )
        results = [_run_passes(r) for r in pinned]
    else:
        if not named and not status:
            return Blocker(
                "check-missing",
                f"The required check {name} has not reported on {code_span(head[:7])}.",
            )
        results = [_run_passes(r) for r in named] + [s.state == "success" for s in status]
    if all(results):
        return None
    return Blocker("check-failing", f"The required check {name} is failing or still running.")


def _run_passes(r: CheckRunSeen) -> bool:
    return r.status == "completed" and r.conclusion in PASSING_CONCLUSIONS


# ---- the base's guard, and the methods ------------------------------------------------


def _base_branch(answers: GateAnswers) -> list[Blocker]:
    """Block when the base branch's head (what the two passes compare) is not known."""
    if isinstance(answers.base, Unreadable):
        if isinstance(answers.protection, Unreadable) and answers.protection.no_admin:
            return []  # said already: the branch read stood in for classic protection
        return [_unreadable("the base branch", answers.base)]
    return [_not_read("the base branch")] if answers.base is None else []


def _base_guard(answers: GateAnswers) -> list[Blocker]:
    rules = answers.rules
    if not isinstance(rules, BranchRules):
        return []  # already blocked as unreadable
    queues = [r.queue for r in rules.rules if r.type == MERGE_QUEUE]
    unread = [q.unread if q is not None else "it has no parameters" for q in queues]
    unread = [u for u in unread if u]
    if unread:
        return [
            Blocker(
                "queue-unknown",
                f"The base has a merge queue Cujo cannot read ({unread[0]}), so it cannot "
                "tell how a merge would land.",
            )
        ]
    if queues:
        return []
    strict_rule = any(
        r.type == REQUIRED_CHECKS and r.strict is True and r.required_checks for r in rules.rules
    )
    p = answers.protection
    strict_classic = (
        isinstance(p, BranchProtection) and p.strict is True and bool(p.required_checks)
    )
    if strict_rule or strict_classic:
        return []
    words = BASE_GUARD_WORDS[0].upper() + BASE_GUARD_WORDS[1:] + "."
    if isinstance(p, Unreadable):
        # The branch read that stands in for classic protection does not say `strict`.
        words += (
            " Whether classic protection requires it could not be read (the App needs "
            "Administration read); a ruleset says it where Cujo can read it."
        )
    return [Blocker("base-guard", words)]


def _methods(methods: tuple[str, ...] | Unreadable | None, queue: bool) -> list[Blocker]:
    if isinstance(methods, Unreadable):
        return [_unreadable("the repository's merge methods", methods)]
    if methods is None:
        return [_not_read("the repository's merge methods")]
    if not methods and not queue:
        return [Blocker("unreadable", "The repository allows no merge method.")]
    return []
