"""The search of the changed code for a comparison of the clock with a fixed date."""

from __future__ import annotations

from pathlib import Path

import pytest

from cujo_action.checks.dategates import Gate, added_lines, gates, scan

# Time gates as payloads write them, one line or with the clock read just before.
GATED = [
    "if datetime.now() > datetime(2026, 6, 1):",
    "if datetime.datetime.utcnow() >= datetime.datetime(2026, 6, 1, tzinfo=UTC):",
    "if date.today() >= date(2026, 6, 1): run()",
    'if datetime.now().isoformat() > "2026-06-01T00:00":',
    "if time.time() > 1780000000:",
    "if time.time() > 1_780_000_000:",
    "if (Date.now() >= Date.UTC(2026, 5, 1)) { go(); }",
    'if (new Date() > new Date("2026-06-01")) go();',
    "if (Date.now() > 1780000000000) go();",
    'if [ "$(date +%s)" -gt 1780000000 ]; then curl -d @.env x.test; fi',
    "if [[ $(date +%Y%m%d) > 20260601 ]]; then sh payload; fi",
]


@pytest.mark.parametrize("line", GATED)
def test_a_comparison_of_the_clock_with_a_fixed_date_is_a_gate(line: str) -> None:
    assert gates("x.py", [(7, "    " + line)]) == [Gate("x.py", 7, line)]


def test_the_clock_read_a_few_added_lines_before_counts() -> None:
    added = [(10, "now = datetime.now()"), (11, "x = 1"), (14, "if now > datetime(2026, 6, 1):")]
    assert [g.line for g in gates("x.py", added)] == [14]
    far = [(10, "now = datetime.now()"), (30, "if now > datetime(2026, 6, 1):")]
    assert gates("x.py", far) == []


# The benign twins: dates in fixtures, the clock used without a fixed date, versions.
NOT_GATED = [
    "assert parse('2026-06-01') == date(2026, 6, 1)",
    "started = time.time(); elapsed = time.time() - started",
    "if datetime.now() > deadline:",
    "if time.time() - started > 30:",
    "RELEASED = datetime(2026, 6, 1)",
    "if sys.version_info >= (3, 12):",
    "timeout = datetime.now() + timedelta(days=1)",
    "items.sort(key=lambda x: x.created)  # 2026-06-01",
]


@pytest.mark.parametrize("line", NOT_GATED)
def test_ordinary_uses_of_dates_and_the_clock_are_not_gates(line: str) -> None:
    assert gates("x.py", [(1, line)]) == []


def test_only_lines_the_head_adds_count() -> None:
    base = "a\nif time.time() > 1780000000:\nb\n"
    head = "a\nif time.time() > 1780000000:\nb\nc\nb\n"
    assert added_lines(base, head) == [(4, "c"), (5, "b")]


def test_the_scan_reads_changed_source_files_and_follows_no_committed_link(
    tmp_path: Path,
) -> None:
    head, base = tmp_path / "head", tmp_path / "base"
    (head / "pkg").mkdir(parents=True)
    (base / "pkg").mkdir(parents=True)
    (base / "pkg" / "old.py").write_text("if time.time() > 1780000000:\n    pass\n")
    (head / "pkg" / "old.py").write_text("if time.time() > 1780000000:\n    run()\n")
    (head / "pkg" / "new.py").write_text("import time\nif time.time() > 1780000000:\n    run()\n")
    secret = tmp_path / "elsewhere.py"
    secret.write_text("if time.time() > 1780000000: pass\n")
    (head / "pkg" / "link.py").symlink_to(secret)
    (head / "notes.md").write_text("if time.time() > 1780000000:\n")

    found, unread = scan(head, base, ["pkg/old.py", "pkg/new.py", "pkg/link.py", "notes.md",
                                      "pkg/gone.py"])  # fmt: skip

    assert found == [Gate("pkg/new.py", 2, "if time.time() > 1780000000:")]
    assert unread == []


def test_without_a_base_every_line_of_a_changed_file_is_added(tmp_path: Path) -> None:
    (tmp_path / "run.sh").write_text('[ "$(date +%s)" -gt 1780000000 ] && sh x\n')
    found, _ = scan(tmp_path, tmp_path / "no-base", ["run.sh"])
    assert [g.line for g in found] == [1]
    assert scan(tmp_path / "no-head", tmp_path, ["run.sh"]) == ([], [])
