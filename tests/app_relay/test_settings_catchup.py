"""The catch-up settings: their defaults, their variables, and what a wrong value is told."""

from __future__ import annotations

import pytest
from test_settings import complete, problem_of

from app_relay.settings import load_settings


def test_catch_up_runs_every_five_minutes_over_71_hours_of_deliveries_by_default() -> None:
    settings = load_settings(complete())
    assert settings.catch_up_every_s == 300.0
    assert settings.catch_up_window_s == 71 * 3600  # inside the three days GitHub keeps
    assert settings.catch_up_grace_s == 120.0
    assert (settings.catch_up_max_redeliveries, settings.catch_up_max_pulls) == (50, 50)


def test_catch_up_settings_are_read_from_their_variables() -> None:
    settings = load_settings(
        complete(
            CUJO_CATCH_UP_EVERY_S="0.5",
            CUJO_CATCH_UP_WINDOW_S="3600",
            CUJO_CATCH_UP_GRACE_S="0",
            CUJO_CATCH_UP_MAX_REDELIVERIES="7",
            CUJO_CATCH_UP_MAX_PULLS="0",
        )
    )
    assert (settings.catch_up_every_s, settings.catch_up_window_s) == (0.5, 3600.0)
    assert settings.catch_up_grace_s == 0.0
    assert (settings.catch_up_max_redeliveries, settings.catch_up_max_pulls) == (7, 0)


@pytest.mark.parametrize(
    ("variable", "value", "told"),
    [
        ("CUJO_CATCH_UP_EVERY_S", "soon", "is 'soon', not a number of seconds"),
        ("CUJO_CATCH_UP_WINDOW_S", "300000", "must be between 0 and 259200 seconds"),
        ("CUJO_CATCH_UP_GRACE_S", "-1", "must be between 0 and 259200 seconds"),
        ("CUJO_CATCH_UP_MAX_PULLS", "2.5", "is '2.5', not a whole number"),
        ("CUJO_CATCH_UP_MAX_REDELIVERIES", "-3", "must be between 0 and 100000"),
    ],
)
def test_a_wrong_catch_up_value_names_its_variable_and_the_fix(
    variable: str, value: str, told: str
) -> None:
    assert problem_of(complete(**{variable: value})) == (variable, told)


def test_the_caps_on_runs_in_flight_default_to_4_per_repository_and_2_per_author() -> None:
    settings = load_settings(complete())
    assert (settings.max_runs_per_repo, settings.max_runs_per_author) == (4, 2)
    settings = load_settings(complete(CUJO_MAX_RUNS_PER_REPO="8", CUJO_MAX_RUNS_PER_AUTHOR="1"))
    assert (settings.max_runs_per_repo, settings.max_runs_per_author) == (8, 1)


@pytest.mark.parametrize(
    ("variable", "value", "told"),
    [
        ("CUJO_MAX_RUNS_PER_REPO", "0", "must be between 1 and 1000 runs in flight"),
        ("CUJO_MAX_RUNS_PER_AUTHOR", "two", "is 'two', not a whole number"),
    ],
)
def test_a_wrong_cap_names_its_variable_and_the_fix(variable: str, value: str, told: str) -> None:
    assert problem_of(complete(**{variable: value})) == (variable, told)
