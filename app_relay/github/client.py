"""Talk to GitHub as one installation of the App: the gateway the relay calls.

``GitHubGateway`` is composed of one part per thing it talks to, each over the same
transport (``transport.py``): pull requests and their files (``pulls.py``), check runs
(``check_runs.py``), reviews, comments and reactions (``conversation.py``), Actions
(``actions.py``), downloads from a run (``downloads.py``), branch protection
(``protection.py``), a catch-up sweep's reads (``catchup_reads.py``) and a repository's
Actions policy, for ``cujo doctor`` (``doctor_reads.py``), and the merge gate's reads
and the merge itself, made with the person's token (``merge_reads.py``, ``merging.py``).
``GitHubApp.gateway`` (``app_auth.py``) makes one; the App's own endpoints (its webhook
deliveries, its installations) are in ``hook_deliveries.py``.

Every call goes through PyGithub's requester (App auth, base URL, deadline), is retried
only when repeating it cannot change the outcome (``retry.py``, the one call policy),
and its answer is parsed fail-closed (``answers.py``): a missing or mistyped field
raises ``GitHubError`` naming the call and the field, never a default that could read as
"ok". PyGithub's objects are not used to read answers because they turn a missing field
into ``None`` or a lazy extra request.
"""

from __future__ import annotations

from app_relay.github.actions import ActionsCalls
from app_relay.github.catchup_reads import CatchUpReads
from app_relay.github.check_runs import CheckRunCalls
from app_relay.github.conversation import ConversationCalls
from app_relay.github.doctor_reads import ActionsPolicyReads
from app_relay.github.downloads import DownloadCalls
from app_relay.github.merging import MergeCalls
from app_relay.github.protection import BranchReads
from app_relay.github.pulls import PullRequestReads


class GitHubGateway(
    PullRequestReads,
    CheckRunCalls,
    ConversationCalls,
    ActionsCalls,
    DownloadCalls,
    BranchReads,
    CatchUpReads,
    ActionsPolicyReads,
    MergeCalls,
):
    """Read and write what the relay needs on GitHub, as one installation of the App."""
