"""A fake GitHub: a real HTTP server on loopback that models the REST API Cujo calls."""

from fakegithub.fixture import AppKey, FakeGitHub, make_key
from fakegithub.oauth import SignIns, sign_ins
from fakegithub.server import FakeGitHubServer
from fakegithub.state import (
    Dispatch,
    FakeState,
    Recorded,
    RepoState,
    Unknown,
    classic_protection,
    fake_sha,
    required_checks_rules,
    zip_bytes,
)

__all__ = [
    "AppKey",
    "Dispatch",
    "FakeGitHub",
    "FakeGitHubServer",
    "FakeState",
    "Recorded",
    "RepoState",
    "SignIns",
    "Unknown",
    "classic_protection",
    "fake_sha",
    "make_key",
    "required_checks_rules",
    "sign_ins",
    "zip_bytes",
]
