"""workflow-secret-use: a changed workflow's step handing a secret to its own service, in
the Authorization header, is listed; every other request carrying a decoy is decoy-egress."""

from __future__ import annotations

from typing import Any

import pytest

STEP = ".github/workflows/docs.yml · job build · step 5: Announce"
RELEASE = ".github/workflows/release.yml · job publish · step 3: Upload"
PID = 4242
STARTED = 1_700_000_000.0


def step_command(make: Any, label: str = STEP, pid: int = PID, started: float = STARTED) -> Any:
    return make.command(
        f"# {label}\nbash -e /home/runner/work/_temp/x.sh", phase="smoke",
        workflow_step=label, started_ts=started, sandbox_pid=pid,
    )  # fmt: skip


def sent(make: Any, host: str = "api.github.com", **overrides: Any) -> Any:
    """Return a request made by a process of the step's sandbox, the token as credential."""
    fields: dict[str, Any] = {
        "decoys": ["GITHUB_TOKEN"], "where": ["authorization:plain"], "method": "POST",
        "ts": STARTED + 2, "pid": 5001, "parents": ["5000 /usr/bin/bash", f"{PID} /usr/bin/bash"],
    }  # fmt: skip
    fields.update(overrides)
    return make.egress("smoke", host, **fields)


def rules_of(run_rule: Any, reports: list[Any]) -> dict[str, list[Any]]:
    return {rule: run_rule(rule, reports) for rule in ("workflow-secret-use", "decoy-egress")}


def test_the_jobs_token_sent_to_githubs_api_by_a_workflow_step_is_listed_not_blocked(
    make, run_rule
):
    use = sent(make)
    found = rules_of(run_rule, [make.report("smoke", egress=[use], commands=[step_command(make)])])

    [finding] = found["workflow-secret-use"]
    assert finding.severity == "warn"
    assert finding.check == "smoke"
    assert finding.evidence == [use.id]
    assert finding.title == (
        f"{STEP}: hands GITHUB_TOKEN to api.github.com as its credential (1 request(s): POST)"
    )
    assert found["decoy-egress"] == []


@pytest.mark.parametrize(
    ("decoy", "host", "where"),
    [
        ("PYPI_TOKEN", "upload.pypi.org", "authorization:base64"),  # twine's basic auth
        ("NPM_TOKEN", "registry.npmjs.org", "authorization:plain"),
        ("CHECKOUT_TOKEN", "github.com", "authorization:base64"),  # git push's extraheader
        ("GITHUB_TOKEN", "UPLOADS.GITHUB.COM.", "authorization:plain"),
    ],
)
def test_each_secret_to_its_own_services_host_in_any_encoding_is_its_use(
    make, run_rule, decoy, host, where
):
    use = sent(make, host, decoys=[decoy], where=[where], route="direct", addressed=host.lower())
    found = rules_of(run_rule, [make.report("smoke", egress=[use], commands=[step_command(make)])])

    assert [f.evidence for f in found["workflow-secret-use"]] == [[use.id]]
    assert found["decoy-egress"] == []


@pytest.mark.parametrize(
    "overrides",
    [
        # The same secret anywhere else in the request, or a part left unsearched.
        {"where": ["authorization:plain", "body:plain"]},
        {"where": ["url:plain"]},
        {"where": ["header:plain"]},  # X-Token, Cookie, Proxy-Authorization…
        {"unsearched": "body: over the proxy's limit"},
        # Another secret beside it, even in the same header.
        {"decoys": ["GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY"]},
        {"decoys": ["PYPI_TOKEN"]},  # PyPI's token to GitHub
        {"decoys": ["RUNNER_WORKER_GITHUB_TOKEN"]},  # no step holds the worker's own
        # Caught on its way to an address no lookup of that name gave (SNI or Host lie).
        {"route": "direct", "addressed": ""},
        {"route": "direct", "addressed": "collect.exfil.test"},
        {"route": "dns"},
        # Not the step's: another command's process, unknown, or before the step began.
        {"parents": ["5000 /usr/bin/bash", "777 /usr/bin/bash"]},
        {"pid": None, "parents": []},
        {"ts": STARTED - 1},
        {"ts": None},
    ],
)
def test_anything_else_stays_decoy_egress(make, run_rule, overrides):
    leak = sent(make, **overrides)
    found = rules_of(run_rule, [make.report("smoke", egress=[leak], commands=[step_command(make)])])

    assert found["workflow-secret-use"] == []
    assert [f.evidence for f in found["decoy-egress"]] == [[leak.id]]
    assert found["decoy-egress"][0].severity == "critical"


@pytest.mark.parametrize("host", ["collect.exfil.test", "api.github.com.exfil.test", "pypi.org"])
def test_the_token_as_a_credential_to_any_other_host_is_a_leak(make, run_rule, host):
    leak = sent(make, host)
    found = rules_of(run_rule, [make.report("smoke", egress=[leak], commands=[step_command(make)])])

    assert found["workflow-secret-use"] == []
    assert [f.evidence for f in found["decoy-egress"]] == [[leak.id]]


def test_a_command_that_is_no_workflow_step_leaks_even_if_it_names_one(make, run_rule):
    # The smoke command (the project's code) says it is the step in its first line and
    # runs in a sandbox whose pid 1 is the one its request names: still no step.
    smoke = make.command(
        f"# {STEP}\npython -m build", phase="smoke", started_ts=STARTED, sandbox_pid=PID
    )
    leak = sent(make)
    found = rules_of(run_rule, [make.report("smoke", egress=[leak], commands=[smoke])])

    assert found["workflow-secret-use"] == []
    assert [f.evidence for f in found["decoy-egress"]] == [[leak.id]]


def test_the_install_phase_is_no_step_even_with_the_steps_sandbox_pid(make, run_rule):
    leak = sent(make, phase="install")
    found = rules_of(run_rule, [make.report("smoke", egress=[leak], commands=[step_command(make)])])

    assert found["workflow-secret-use"] == []
    assert [f.evidence for f in found["decoy-egress"]] == [[leak.id]]


def test_one_finding_per_step_and_host_and_a_leak_beside_it_still_blocks(make, run_rule):
    first, second = sent(make), sent(make, method="GET")
    upload = sent(
        make, "upload.pypi.org", decoys=["PYPI_TOKEN"], where=["authorization:base64"],
        pid=6001, parents=[f"{PID + 1} /usr/bin/bash"], ts=STARTED + 60,
    )  # fmt: skip
    leak = sent(make, "collect.exfil.test", where=["body:base64"])
    commands = [step_command(make), step_command(make, RELEASE, PID + 1, STARTED + 50)]
    report = make.report("smoke", egress=[first, second, upload, leak], commands=commands)

    found = rules_of(run_rule, [report])

    assert [(f.title.split(":")[0], f.evidence) for f in found["workflow-secret-use"]] == [
        (".github/workflows/docs.yml · job build · step 5", [first.id, second.id]),
        (".github/workflows/release.yml · job publish · step 3", [upload.id]),
    ]
    assert "(2 request(s): POST, GET)" in found["workflow-secret-use"][0].title
    assert [f.evidence for f in found["decoy-egress"]] == [[leak.id]]


def test_a_decoy_file_read_is_still_said_when_only_a_step_used_its_secret(make, run_rule):
    read = make.decoy("smoke", "/home/runner/.ssh/id_ed25519")
    use = sent(make)
    report = make.report("smoke", egress=[use], decoy_events=[read], commands=[step_command(make)])

    assert [f.evidence for f in run_rule("decoy-read", [report])] == [[read.id]]
