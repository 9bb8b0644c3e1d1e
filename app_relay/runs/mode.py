"""Pick the review a pull request gets, from the base policy and the pull request's facts.

Pure: the caller reads ``.cujo.yml`` at the base commit (never head) and the list of
changed files, and gets back whether to review and how. A change to any dependency
manifest or lockfile, or an author whose account ``type`` is ``Bot``, always gets the
sandbox, whatever the policy says (docs/design.md section 4).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import PurePosixPath
from typing import Literal

from app_relay.words.inert import code_span
from cujo_action.schema import Policy

# The policy file, read at the base commit (never head).

# The webhook actions that start a review; every other action is ignored.
# https://docs.github.com/en/webhooks/webhook-events-and-payloads#pull_request
ENTRY_ACTIONS = frozenset({"opened", "synchronize", "reopened", "ready_for_review"})

# Dependency manifests and lockfiles, matched against the file name anywhere in the tree.
MANIFESTS = (
    "requirements*.txt",
    "requirements*.in",
    "constraints*.txt",
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "Pipfile",
    "Pipfile.lock",
    "poetry.lock",
    "uv.lock",
    "pdm.lock",
    "package.json",
    "package-lock.json",
    "npm-shrinkwrap.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "bun.lockb",
    ".npmrc",
    "go.mod",
    "go.sum",
    "Cargo.toml",
    "Cargo.lock",
    "Gemfile",
    "Gemfile.lock",
    "*.gemspec",
    "composer.json",
    "composer.lock",
    "pom.xml",
    "build.gradle",
    "build.gradle.kts",
    "settings.gradle",
    "settings.gradle.kts",
)

Mode = Literal["sandbox", "diff"]


@dataclass(frozen=True)
class PullRequestFacts:
    """What the choice rests on, read from the webhook and GitHub at the moment of choice."""

    action: str
    state: str
    draft: bool
    base_ref: str
    author_type: str
    changed_files: Sequence[str]
    # Why the changed files may not all be listed; empty when they are.
    files_incomplete: str = ""


@dataclass(frozen=True)
class ReviewChoice:
    """Whether to review, in which mode, and why (the why goes on the record)."""

    review: bool
    mode: Mode | None
    reason: str
    forced: bool = False


def manifests_in(paths: Sequence[str]) -> list[str]:
    """Return the changed paths that are dependency manifests or lockfiles."""
    return [p for p in paths if any(fnmatchcase(PurePosixPath(p).name, m) for m in MANIFESTS)]


def branch_matches(branch: str, patterns: Sequence[str]) -> bool:
    """Return whether ``branch`` matches one of the policy's `branches` globs."""
    return any(fnmatchcase(branch, pattern) for pattern in patterns)


def choose(policy: Policy, facts: PullRequestFacts) -> ReviewChoice:
    """Return the review this pull request gets under ``policy`` (read at base)."""
    if facts.action not in ENTRY_ACTIONS:
        return ReviewChoice(False, None, f"the `{facts.action}` action does not start a review")
    if facts.state != "open":
        return ReviewChoice(False, None, f"the pull request is {facts.state}")
    if facts.draft and not policy.drafts:
        return ReviewChoice(False, None, "drafts are not reviewed (`drafts: false`)")
    if not branch_matches(facts.base_ref, policy.branches):
        branches = ", ".join(code_span(b) for b in policy.branches)
        why = f"base branch {code_span(facts.base_ref)} is not in `branches` ({branches})"
        return ReviewChoice(False, None, why)
    manifests = manifests_in(facts.changed_files)
    if facts.author_type == "Bot":
        return ReviewChoice(True, "sandbox", "the author is a bot account", forced=True)
    if facts.files_incomplete:
        # A manifest may hide among the files that were not listed: never the diff review.
        why = facts.files_incomplete
        return ReviewChoice(True, "sandbox", f"not every changed file was listed ({why})", True)
    if manifests:
        shown = ", ".join(code_span(m) for m in manifests[:5]) + (
            " …" if len(manifests) > 5 else ""
        )
        return ReviewChoice(True, "sandbox", f"dependency manifests changed ({shown})", forced=True)
    return ReviewChoice(True, policy.mode, f"`mode: {policy.mode}` in .cujo.yml at base")
