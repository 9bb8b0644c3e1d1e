"""Count each GitHub request by how it was answered, for ``/metrics``.

``GitHubApp.attempt`` wraps every try of every call in ``counted``: a retry is a request
too. An answer taken counts as ``2xx`` (PyGithub hands back the body, not the status);
a refusal by its HTTP status; no answer as ``timeout`` or ``connection``; anything else
that broke the call as ``error``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import requests
from github.GithubException import GithubException

from app_relay.observe import metrics

T = TypeVar("T")


def counted(call: str, fn: Callable[[], T]) -> Callable[[], T]:
    """Return ``fn`` counting each time it runs in ``cujo_github_calls``."""
    method = call.split(" ", 1)[0] if " " in call else "GET"

    def run() -> T:
        try:
            answer = fn()
        except GithubException as exc:
            metrics.github_call(method, str(exc.status))
            raise
        except requests.Timeout:
            metrics.github_call(method, "timeout")
            raise
        except requests.ConnectionError:
            metrics.github_call(method, "connection")
            raise
        except Exception:
            metrics.github_call(method, "error")
            raise
        metrics.github_call(method, "2xx")
        return answer

    return run
