"""Register the fake GitHub fixtures: ``pytest_plugins = ["fakegithub.plugin"]``."""

from fakegithub.fixture import fake_github, fake_github_key

__all__ = ["fake_github", "fake_github_key"]
