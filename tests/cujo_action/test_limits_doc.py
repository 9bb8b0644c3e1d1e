"""docs/limits.md names every cap on evidence in cujo_action/limits.py, with its value."""

from __future__ import annotations

import pytest
from repo_paths import TOP

from cujo_action.limits import LIMIT_IDS, LIMITS, table

DOC = (TOP / "docs" / "limits.md").read_text()


def row(limit_id: str) -> list[str]:
    """Return the cells of the doc's table row for ``limit_id``."""
    (line,) = [ln for ln in DOC.splitlines() if ln.startswith(f"| `{limit_id}` |")]
    return [cell.strip() for cell in line.strip("|").split("|")]


@pytest.mark.parametrize("limit_id", LIMIT_IDS)
def test_every_limit_is_in_the_table_with_its_value_and_verdict(limit_id: str) -> None:
    limit = LIMITS[limit_id]
    _, value, where, *_, verdict = row(limit_id)
    shown = "(not a fixed number)" if limit.value == 0 else f"{limit.value:,} {limit.unit}"
    assert value == shown
    assert where == f"`{limit.where}`"
    assert verdict.startswith("unproven" if limit.hides_danger else "named only")
    assert ("`evidence-flood`" in verdict) == limit.flood


def test_the_table_names_no_limit_that_does_not_exist() -> None:
    named = {ln.split("`")[1] for ln in DOC.splitlines() if ln.startswith("| `")}
    assert named == set(LIMIT_IDS)


def test_readme_and_the_rules_link_to_it() -> None:
    assert "docs/limits.md" in (TOP / "README.md").read_text()
    assert "(limits.md)" in (TOP / "docs" / "rules.md").read_text()


def test_the_table_is_the_one_limits_py_makes() -> None:
    # `python -m cujo_action.limits` prints it: paste it after changing a limit.
    assert table() in DOC
