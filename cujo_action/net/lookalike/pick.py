"""Pick the proxy's answer to a sunk request: what the real service would have said.

The proxy never lets a request to a host that is not allowed leave, and answers it
itself (``proxy.addon.request``). An empty 200 from everywhere is one ``if`` for code that
checks where it runs (``https://api.github.com/zen`` returns a proverb on a runner). So:

* ``api.github.com`` answers as GitHub's REST API does for the decoy job
  (``lookalike/github.py``);
* any other host answers as a plain nginx-fronted server (``lookalike/web.py``).

Writes to a registry (``registry-write``) and requests refused for their size keep their
own answers (``proxy.request.REGISTRY_WRITE_*``, 413); they never come here.

An answer's body is at most ``limits.ANSWER_BODY``: one that would be larger (it cannot,
the echoes are clipped well under it; the cap is the guard) is the service's own 500.
Pure: no I/O, the time is passed in; answers are deterministic given the job's seed.
"""

from __future__ import annotations

from collections.abc import Iterable

from cujo_action.limits import ANSWER_BODY
from cujo_action.net.lookalike.github import GitHubApi
from cujo_action.net.lookalike.github_facts import GitHubFacts, is_github_api
from cujo_action.net.lookalike.web import Answer, Asked, web_answer, web_error


class Lookalike:
    """Answer sunk requests as the hosts they were meant for would."""

    def __init__(
        self, github: GitHubFacts, tokens: Iterable[str] = (), *, cap: int = ANSWER_BODY
    ) -> None:
        """Know the decoy job and the tokens Cujo planted (``tokens``: decoy values)."""
        self.github = GitHubApi(github, tokens)
        self.cap = cap

    def answer(self, asked: Asked, now: float) -> Answer:
        """Return the answer to ``asked``, bounded."""
        github = is_github_api(asked.host)
        found = self.github.answer(asked, now) if github else web_answer(asked, now)
        if len(found.body) <= self.cap:
            return found
        if github:
            return self.github.server_error(asked, now)
        return web_error(500, now)
