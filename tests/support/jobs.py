"""Make up the job a sandbox reads as, with no repository: for tests of arm's pure parts."""

from __future__ import annotations

from cujo_action.arm.actionsjob import JobIdentity, new_identity
from cujo_action.schema import ZERO_SHA, Push, Upstream

# The commit the checks of the head run on (a merge), and the base's.
MERGE, BASE = "a" * 40, "b" * 40


def job_for(
    repository: str = "octo/app", *, branch: str = "main", default: str = ""
) -> JobIdentity:
    """Return a job of ``repository`` run for the push of a merge to ``branch``."""
    upstream = Upstream(
        repository=repository, owner_id=4_242_424, branch=branch, default_branch=default or branch
    )
    return new_identity(
        upstream, Push(before=BASE, after=MERGE, merged=True), Push(before=ZERO_SHA, after=BASE)
    )
