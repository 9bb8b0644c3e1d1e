"""Download what a workflow run left (an artifact, a job's log), capped, without credentials.

Part of the gateway (``client.py`` composes it). GitHub answers a download with a 302 to
pre-signed storage; that URL must never see our token
(https://docs.github.com/en/rest/actions/artifacts#download-an-artifact), so it is
fetched with no authentication at all, under a byte cap and a deadline.
"""

from __future__ import annotations

import tempfile
import time
import urllib.parse
from pathlib import Path

import requests

from app_relay.github.answers import GitHubError
from app_relay.github.payloads import positive, repo_path
from app_relay.github.transport import GatewayTransport


class DownloadCalls(GatewayTransport):
    """Download an artifact's zip or a job's log from where GitHub redirects, capped."""

    def download_artifact(self, repo: str, artifact_id: int, dest: Path, max_bytes: int) -> Path:
        """Download an artifact's zip to ``dest``, refusing one over ``max_bytes``."""
        # https://docs.github.com/en/rest/actions/artifacts#download-an-artifact
        path = f"{repo_path(repo)}/actions/artifacts/{positive('artifact_id', artifact_id)}/zip"
        return self._download(path, "archive", dest, max_bytes)

    def job_log(self, repo: str, job_id: int, max_bytes: int) -> str:
        """Return a finished job's plain-text log, refusing one over ``max_bytes``."""
        # https://docs.github.com/en/rest/actions/workflow-jobs#download-job-logs-for-a-workflow-run
        path = f"{repo_path(repo)}/actions/jobs/{positive('job_id', job_id)}/logs"
        with tempfile.TemporaryDirectory(prefix="cujo-job-log-") as tmp:
            text = self._download(path, "log", Path(tmp) / "log.txt", max_bytes)
            # A log is the runner's UTF-8; a byte that is not stays visible, replaced.
            return text.read_bytes().decode("utf-8", errors="replace")

    def _download(self, path: str, what: str, dest: Path, max_bytes: int) -> Path:
        """Follow the 302 ``path`` answers to storage and download it to ``dest``, capped."""
        positive("max_bytes", max_bytes)
        call = f"GET {path}"

        def fetch() -> Path:
            # PyGithub does not follow this 302; we do, ourselves, without credentials.
            headers, _ = self._github.requester.requestJsonAndCheck("GET", path)
            location = headers.get("location")
            if not isinstance(location, str) or not location:
                raise GitHubError(call, f"answer has no 'location' to the {what}")
            return self._fetch_archive(call, location, dest, max_bytes)

        return self._attempt(call, fetch, idempotent=True)

    def _fetch_archive(self, call: str, location: str, dest: Path, max_bytes: int) -> Path:
        target = urllib.parse.urlparse(location)
        # The archive URL is pre-signed and valid for a minute; it must never see our
        # token. Only https, unless the API itself is plain http
        # (a loopback fake in tests).
        schemes = ("https", "http") if self._app.base_url.startswith("http://") else ("https",)
        if target.scheme not in schemes or not target.hostname:
            raise GitHubError(call, f"archive location is not an allowed URL: {location[:80]!r}")
        started = time.monotonic()
        part = dest.with_name(dest.name + ".part")
        with requests.Session() as session:
            # No auth at all: an explicit no-op stops requests from reading ~/.netrc.
            session.auth = _no_auth
            response = session.get(
                location, stream=True, timeout=self._app.timeout_s, allow_redirects=False
            )
            with response:
                if response.status_code != 200:
                    raise GitHubError(call, f"archive answered HTTP {response.status_code}")
                declared = response.headers.get("content-length")
                if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                    raise GitHubError(
                        call, f"archive is {declared} bytes, over the cap of {max_bytes}"
                    )
                size = 0
                try:
                    with part.open("wb") as out:
                        for chunk in response.iter_content(chunk_size=64 * 1024):
                            size += len(chunk)
                            if size > max_bytes:
                                raise GitHubError(call, f"archive is over the cap of {max_bytes}")
                            if time.monotonic() - started > self._app.download_deadline_s:
                                raise GitHubError(
                                    call,
                                    f"deadline of {self._app.download_deadline_s}s passed",
                                )
                            out.write(chunk)
                    part.replace(dest)
                finally:
                    part.unlink(missing_ok=True)
        return dest


def _no_auth(request: requests.PreparedRequest) -> requests.PreparedRequest:
    return request
