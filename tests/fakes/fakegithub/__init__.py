"""A fake GitHub: a real HTTP server on loopback that models the REST API Cujo calls."""

from fakegithub.catchup import HookLog, hook_log
from fakegithub.doctorreads import AppPolicies, app_policies
from fakegithub.fixture import AppKey, FakeGitHub, make_key
from fakegithub.merging import MergeWorld, merge_world
from fakegithub.oauth import SignIns, sign_ins
from fakegithub.rulesets import create_ruleset  # noqa: F401  (registers the route)
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
    "AppPolicies",
    "Dispatch",
    "FakeGitHub",
    "FakeGitHubServer",
    "FakeState",
    "HookLog",
    "MergeWorld",
    "Recorded",
    "RepoState",
    "SignIns",
    "Unknown",
    "app_policies",
    "classic_protection",
    "fake_sha",
    "hook_log",
    "make_key",
    "merge_world",
    "required_checks_rules",
    "sign_ins",
    "zip_bytes",
]
