"""docs/operating.md holds the table of every setting, as app_relay/settings.py prints it."""

from __future__ import annotations

import pytest
from repo_paths import TOP

from app_relay.settings import TUNING, RelaySettings, table, variable_of

DOC = (TOP / "docs" / "operating.md").read_text()


def test_the_table_is_the_one_settings_py_makes() -> None:
    # `python -m app_relay.settings` prints it: paste it after changing a setting.
    assert table() in DOC


@pytest.mark.parametrize("name", list(RelaySettings.model_fields))
def test_every_setting_has_a_row_that_says_what_it_sets(name: str) -> None:
    (line,) = [ln for ln in DOC.splitlines() if ln.startswith(f"| `{variable_of(name)}` |")]
    what = line.rstrip(" |").rsplit("|", 1)[-1].strip()
    assert len(what) > 20, f"{variable_of(name)} says too little about itself: {what!r}"


def test_the_knobs_only_tests_turn_are_marked_with_their_defaults() -> None:
    for name in TUNING:
        (line,) = [ln for ln in DOC.splitlines() if ln.startswith(f"| `{variable_of(name)}` |")]
        default = RelaySettings.model_fields[name].default
        assert f"| {default:g} |" in line
        assert "Tuning knob" in line


def test_the_readme_and_the_install_guide_link_to_it() -> None:
    assert "docs/operating.md" in (TOP / "README.md").read_text()
    assert "(operating.md)" in (TOP / "docs" / "install.md").read_text()
