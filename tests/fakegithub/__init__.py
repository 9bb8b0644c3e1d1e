"""A fake GitHub: a real HTTP server on loopback that models the REST API Cujo calls."""

from .fixture import AppKey, FakeGitHub, make_key
from .server import FakeGitHubServer
from .state import Dispatch, FakeState, Recorded, RepoState, Unknown, fake_sha, zip_bytes

__all__ = [
    "AppKey",
    "Dispatch",
    "FakeGitHub",
    "FakeGitHubServer",
    "FakeState",
    "Recorded",
    "RepoState",
    "Unknown",
    "fake_sha",
    "make_key",
    "zip_bytes",
]
