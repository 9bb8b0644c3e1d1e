"""The relay's settings: each missing or malformed variable gets its own clear error."""

from __future__ import annotations

import pytest

from app_relay.settings import (
    DEFAULT_GITHUB_API_URL,
    RelaySettings,
    Secret,
    SettingsError,
    load_settings,
)

KEY = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\n"
    "-----END RSA PRIVATE KEY-----\n"
)
SECRET = "webhook-secret-value-7f3a"
MODEL_KEY = "sk-ant-test-value-91c2"


def complete(**changes: str | None) -> dict[str, str]:
    env = {
        "CUJO_APP_ID": "12345",
        "CUJO_PRIVATE_KEY": KEY,
        "CUJO_WEBHOOK_SECRET": SECRET,
        "CUJO_DATABASE_URL": "sqlite:////var/lib/cujo/cujo.db",
        "ANTHROPIC_API_KEY": MODEL_KEY,
    }
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def problem_of(env: dict[str, str]) -> tuple[str, str]:
    with pytest.raises(SettingsError) as caught:
        load_settings(env)
    assert len(caught.value.problems) == 1, caught.value.problems
    problem = caught.value.problems[0]
    assert problem.variable in str(caught.value)
    return problem.variable, problem.message


def test_a_complete_environment_gives_settings_with_defaults():
    settings = load_settings(complete())

    assert settings.app_id == 12345
    assert settings.private_key.reveal() == KEY
    assert settings.webhook_secret.reveal() == SECRET
    assert settings.github_api_url == DEFAULT_GITHUB_API_URL
    assert settings.workflow == "cujo.yml"
    assert settings.database_url == "sqlite:////var/lib/cujo/cujo.db"
    assert settings.anthropic_api_key is not None
    assert settings.anthropic_api_key.reveal() == MODEL_KEY


def test_nothing_is_read_at_import_and_the_process_environment_is_read_when_asked(monkeypatch):
    for name, value in complete(CUJO_APP_ID="777").items():
        monkeypatch.setenv(name, value)

    assert load_settings().app_id == 777


def test_secrets_never_show_in_a_repr_or_a_str():
    settings = load_settings(
        complete(CUJO_DATABASE_URL="postgresql://cujo:db-password-55@db.internal/cujo")
    )

    for shown in (repr(settings), str(settings), repr(settings.webhook_secret)):
        assert SECRET not in shown
        assert MODEL_KEY not in shown
        assert "MIIBOgIBAAJBAKj34" not in shown
        assert "db-password-55" not in shown
    assert "app_id=12345" in repr(settings)


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("CUJO_APP_ID", None, "missing; set it to the App ID"),
        ("CUJO_APP_ID", "", "missing; set it to the App ID"),
        ("CUJO_APP_ID", "Iv1.8a61f9b3a7aba766", "positive whole number"),
        ("CUJO_APP_ID", "0", "positive whole number"),
        ("CUJO_APP_ID", "-4", "positive whole number"),
        ("CUJO_WEBHOOK_SECRET", None, "missing; set it to the webhook secret"),
        ("CUJO_WEBHOOK_SECRET", "   ", "missing; set it to the webhook secret"),
        ("CUJO_WEBHOOK_SECRET", SECRET + "\n", "trailing whitespace"),
        ("CUJO_GITHUB_API_URL", "api.github.com", "must be an https URL"),
        ("CUJO_GITHUB_API_URL", "ftp://api.github.com", "must be an https URL"),
        ("CUJO_GITHUB_API_URL", "http://ghe.example.com/api/v3", "clear text"),
        ("CUJO_DATABASE_URL", "not a url", "not a database URL"),
        ("CUJO_DATABASE_URL", "mysql://db/cujo", "sqlite or postgresql"),
        ("CUJO_WORKFLOW", "../evil.yml", "file name of the workflow"),
        ("CUJO_WORKFLOW", ".github/workflows/cujo.yml", "file name of the workflow"),
        ("CUJO_WORKFLOW", "cujo.txt", "file name of the workflow"),
    ],
)
def test_each_missing_or_malformed_variable_gets_its_own_error(variable, value, says):
    env = complete(**{variable: value})

    named, message = problem_of(env)

    assert named == variable
    assert says in message
    assert SECRET not in message


def test_the_private_key_is_required_in_one_of_two_forms():
    named, message = problem_of(complete(CUJO_PRIVATE_KEY=None))

    assert named == "CUJO_PRIVATE_KEY"
    assert "CUJO_PRIVATE_KEY_FILE" in message


def test_the_private_key_must_be_pem():
    named, message = problem_of(complete(CUJO_PRIVATE_KEY="ghp_not_a_key"))

    assert named == "CUJO_PRIVATE_KEY"
    assert "not a PEM private key" in message
    assert "ghp_not_a_key" not in message


def test_a_one_line_key_with_escaped_newlines_is_accepted():
    settings = load_settings(complete(CUJO_PRIVATE_KEY=KEY.replace("\n", "\\n")))

    assert settings.private_key.reveal() == KEY


def test_the_private_key_file_is_read(tmp_path):
    path = tmp_path / "app.pem"
    path.write_text(KEY)

    settings = load_settings(complete(CUJO_PRIVATE_KEY=None, CUJO_PRIVATE_KEY_FILE=str(path)))

    assert settings.private_key.reveal() == KEY


def test_an_unreadable_or_wrong_key_file_is_named(tmp_path):
    missing = tmp_path / "nope.pem"
    named, message = problem_of(complete(CUJO_PRIVATE_KEY=None, CUJO_PRIVATE_KEY_FILE=str(missing)))
    assert named == "CUJO_PRIVATE_KEY_FILE"
    assert f"cannot read {missing}" in message

    wrong = tmp_path / "wrong.pem"
    wrong.write_text("hello\n")
    named, message = problem_of(complete(CUJO_PRIVATE_KEY=None, CUJO_PRIVATE_KEY_FILE=str(wrong)))
    assert named == "CUJO_PRIVATE_KEY_FILE"
    assert "not a PEM private key" in message


def test_both_key_variables_at_once_are_refused(tmp_path):
    path = tmp_path / "app.pem"
    path.write_text(KEY)

    named, message = problem_of(complete(CUJO_PRIVATE_KEY_FILE=str(path)))

    assert named == "CUJO_PRIVATE_KEY"
    assert "keep one of them" in message


def test_every_problem_is_reported_at_once():
    with pytest.raises(SettingsError) as caught:
        load_settings({"CUJO_WORKFLOW": "x"})

    assert caught.value.variables() == {
        "CUJO_APP_ID",
        "CUJO_PRIVATE_KEY",
        "CUJO_WEBHOOK_SECRET",
        "CUJO_WORKFLOW",
    }


def test_http_is_allowed_only_to_a_fake_on_loopback():
    for url in ("http://127.0.0.1:8123", "http://localhost:9/api/v3/", "http://[::1]:80"):
        assert load_settings(complete(CUJO_GITHUB_API_URL=url)).github_api_url == url.rstrip("/")


def test_the_record_defaults_to_the_local_sqlite_file(tmp_path):
    settings = load_settings(complete(CUJO_DATABASE_URL=None, CUJO_HOME=str(tmp_path)))

    assert settings.database_url == f"sqlite:///{tmp_path}/cujo.db"


def test_without_a_model_key_the_judge_is_deterministic():
    assert load_settings(complete(ANTHROPIC_API_KEY=None)).anthropic_api_key is None
    assert load_settings(complete(ANTHROPIC_API_KEY="")).anthropic_api_key is None


def test_settings_compare_and_secrets_compare_by_value():
    assert load_settings(complete()) == load_settings(complete())
    assert Secret("a") != Secret("b")
    assert isinstance(load_settings(complete()), RelaySettings)


def test_only_the_environment_given_is_read_and_names_are_capitals(monkeypatch):
    monkeypatch.setenv("CUJO_WORKFLOW", "../evil.yml")

    assert load_settings(complete()).workflow == "cujo.yml"
    assert load_settings(complete(cujo_workflow="evil.yml")).workflow == "cujo.yml"


def test_the_relay_s_waits_default_and_a_bad_one_is_named():
    settings = load_settings(complete(CUJO_RUN_LEASE_S="3", CUJO_EFFECT_RETRY_S=" 0.2 "))
    assert (settings.run_lease_s, settings.effect_retry_s) == (3.0, 0.2)
    assert (settings.delivery_lease_s, settings.reconcile_every_s) == (30.0, 60.0)

    assert problem_of(complete(CUJO_DELIVERY_LEASE_S="soon")) == (
        "CUJO_DELIVERY_LEASE_S",
        "is 'soon', not a number of seconds",
    )
    for value in ("-1", "90000", "nan"):
        named, message = problem_of(complete(CUJO_RECONCILE_EVERY_S=value))
        assert (named, message) == ("CUJO_RECONCILE_EVERY_S", "must be between 0 and 86400 seconds")


def test_the_jobs_are_polled_once_a_minute_unless_set_and_never_faster_than_a_second():
    assert load_settings(complete()).jobs_poll_s == 60.0
    assert load_settings(complete(CUJO_JOBS_POLL_S=" 120 ")).jobs_poll_s == 120.0
    assert problem_of(complete(CUJO_JOBS_POLL_S="often")) == (
        "CUJO_JOBS_POLL_S",
        "is 'often', not a number of seconds",
    )
    for value in ("0", "0.5", "-1", "90000", "nan"):
        assert problem_of(complete(CUJO_JOBS_POLL_S=value)) == (
            "CUJO_JOBS_POLL_S",
            "must be between 1 and 86400 seconds",
        )
