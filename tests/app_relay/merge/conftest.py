"""Give the merge tests their fixtures: the fake GitHub, and a pull request ready to merge."""

from fakegithub.fixture import fake_github, fake_github_key  # noqa: F401  (fixtures)
from mergeworld import merge_world  # noqa: F401  (a fixture)
