"""What a pull request changes about CI is said file by file, for a maintainer to read."""

from __future__ import annotations

from repo_paths import SAMPLES

from cujo_action.checks.workflow_changes import describe, first_changed_line

CI = (SAMPLES / "workflows" / "ci.yml").read_text()
OLD_PIN = "11bd71901bbe5b1630ceea73d27597364c9af683"
NEW_PIN = "08eba0b27e820071cde6df949e0beb9ba4906955"


def test_a_pinned_action_bumped_is_said_with_both_refs_and_its_line() -> None:
    bumped = CI.replace(OLD_PIN, NEW_PIN)
    change = describe(".github/workflows/ci.yml", CI, bumped, yaml=True)
    assert change.line == 16
    assert change.detail == (
        f".github/workflows/ci.yml changed: action moved: `actions/checkout@{OLD_PIN}` → "
        f"`@{NEW_PIN}`"
    )


def test_triggers_permissions_steps_and_scripts_are_named() -> None:
    lint = "      - name: Lint\n        run: ruff check .\n      - run: pip install"
    after = (
        CI.replace("  pull_request:\n", "  pull_request:\n  workflow_dispatch:\n")
        .replace("permissions: {}", "permissions: write-all")
        .replace("./scripts/test.sh", "./scripts/test.sh --all")
        .replace("      - run: pip install", lint)
    )
    detail = describe(".github/workflows/ci.yml", CI, after, yaml=True).detail
    assert "triggers added: `workflow_dispatch`" in detail
    assert "permissions `{}` → `write-all`" in detail
    assert "steps added: `Lint`" in detail
    assert "run: scripts changed: `Test`" in detail


def test_added_deleted_and_other_files() -> None:
    added = describe(".github/workflows/ci.yml", None, CI, yaml=True)
    assert added.detail.startswith(".github/workflows/ci.yml added: on `pull_request`, `push`")
    assert describe("x.yml", CI, None, yaml=True).detail == "x.yml deleted"
    owners = describe(".github/CODEOWNERS", "* @a\n", "* @a\n/x @b\n", yaml=False)
    assert (owners.line, owners.detail) == (2, ".github/CODEOWNERS changed (first at line 2)")
    assert first_changed_line("a\nb\n", "a\nc\n") == 2
