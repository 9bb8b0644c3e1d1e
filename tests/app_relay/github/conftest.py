"""Give the github tests their fixtures: the fake GitHub, and a gateway onto it (``world``)."""

from fakegithub.fixture import fake_github, fake_github_key  # noqa: F401  (fixtures)
from githubworld import world  # noqa: F401  (a fixture)
from mergeworld import merge_world  # noqa: F401  (a fixture: a pull request ready to merge)
