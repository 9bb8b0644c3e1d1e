"""The ``fake_github`` pytest fixture: a fake GitHub on loopback that fails unknown requests."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from fakegithub.server import FakeGitHubServer
from fakegithub.state import FakeState, RepoState

APP_ID = 4242
INSTALLATION_ID = 77


@dataclass(frozen=True)
class AppKey:
    """An App private key and its public half, as PEM."""

    private_pem: str
    public_pem: str


@dataclass
class FakeGitHub:
    """A running fake GitHub and the App credentials it trusts."""

    state: FakeState
    url: str
    app_id: int
    installation_id: int
    private_key_pem: str

    def add_repo(self, full_name: str, *, default_branch: str = "main") -> RepoState:
        """Create a repository with the App installed on it."""
        return self.state.add_repo(
            full_name, installation_id=self.installation_id, default_branch=default_branch
        )


def make_key() -> AppKey:
    """Generate an RSA App key."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return AppKey(private, public)


@pytest.fixture(scope="session")
def fake_github_key() -> AppKey:
    """Generate the App key once per session (RSA generation is the slow part)."""
    return make_key()


@pytest.fixture
def fake_github(fake_github_key: AppKey) -> Iterator[FakeGitHub]:
    """Run a fake GitHub with the App installed once; fail the test on unknown requests."""
    state = FakeState(app_id=APP_ID, public_key_pem=fake_github_key.public_pem)
    state.add_installation(INSTALLATION_ID)
    server = FakeGitHubServer(state).start()
    try:
        yield FakeGitHub(state, server.url, APP_ID, INSTALLATION_ID, fake_github_key.private_pem)
    finally:
        server.stop()
    state.wait_for_actions(timeout_s=30)
    assert state.hook_errors == [], f"the Actions behaviour raised: {state.hook_errors!r}"
    assert state.unknown_requests == [], (
        f"requests the fake GitHub does not accept: {state.unknown_requests!r}"
    )
