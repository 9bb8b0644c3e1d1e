"""The composed GitHub gateway checks every argument before it sends anything.

Through real PyGithub calls against the fake GitHub on loopback.
"""

from __future__ import annotations

import pytest
from githubworld import REPO, World


def test_arguments_are_checked_before_a_request(world: World) -> None:
    with pytest.raises(ValueError, match="owner/name"):
        world.gw.pull_request("octo/widgets/../x", 7)
    with pytest.raises(ValueError, match="commit SHA"):
        world.gw.post_advisory_review(REPO, 7, "main", "Clean.")
    with pytest.raises(ValueError, match="at most 10 inputs"):
        world.gw.dispatch_workflow(REPO, "cujo.yml", "main", {str(i): "x" for i in range(11)})
    assert world.fake.state.requests == []
