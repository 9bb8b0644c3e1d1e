"""Answer a sunk request to a host Cujo knows nothing about as a plain web server would.

The proxy answers every request it does not forward (``lookalike/pick.py`` picks the answer).
A host it has no model of gets what an nginx in front of a small application gives,
one table for every host, so code that checks cannot tell one sunk host from another:

======================  ======  ==================  ==========================================
method                  status  content-type        body
======================  ======  ==================  ==========================================
GET, HEAD (any path)    200     text/html           nginx's own welcome page (HEAD: no body)
POST, PUT, PATCH        200     application/json    ``{"ok":true}``
DELETE                  204     (none)              empty
OPTIONS                 204     (none)              empty, with ``allow``
anything else           405     text/html           nginx's own "405 Not Allowed" page
======================  ======  ==================  ==========================================

Every answer carries ``server: nginx`` and ``date``; the proxy adds ``content-length``.
A GET is answered 200 whatever its path: a test suite that fetches a page from a host it
cannot reach behaves as it did when the answer was an empty 200.

This module also holds what every answer is made of (``Asked``, ``Answer``) and the
helpers the GitHub model shares. Pure: no I/O; the time is passed in.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import urlsplit

# The request headers an answer may read (lower case); the proxy passes no other.
READ_HEADERS: tuple[str, ...] = (
    "authorization",
    "accept",
    "content-type",
    "user-agent",
    "x-github-api-version",
)


@dataclass(frozen=True)
class Asked:
    """A sunk request, as much of it as an answer reads."""

    method: str
    host: str
    target: str  # path and query, as sent
    headers: Mapping[str, str] = field(default_factory=dict)  # READ_HEADERS, lower case
    body: bytes = b""  # the body's first bytes (``limits.ANSWER_PEEK``)
    body_cut: bool = False  # the body went on past ``body``

    @property
    def path(self) -> str:
        """Return the target's path ("/" when empty)."""
        return urlsplit(self.target).path or "/"

    def header(self, name: str) -> str:
        """Return a request header's value ("" when absent)."""
        return self.headers.get(name.lower(), "")


@dataclass(frozen=True)
class Answer:
    """What the proxy answers: status, headers in order (no content-length), body.

    ``body`` is the body a GET would carry; the proxy sends none for HEAD, 204 or 304.
    """

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


def http_date(now: float) -> str:
    """Return ``now`` as an HTTP date (``Mon, 01 Jul 2024 12:00:00 GMT``)."""
    return email.utils.formatdate(now, usegmt=True)


def iso_time(now: float) -> str:
    """Return ``now`` as GitHub writes times (``2024-07-01T12:00:00Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def bodiless(method: str, status: int) -> bool:
    """Return whether an answer goes without a body on the wire."""
    return method == "HEAD" or status in (204, 304)


# nginx's default index.html (Debian and Ubuntu's nginx package), served for every GET.
WELCOME = b"""<!DOCTYPE html>
<html>
<head>
<title>Welcome to nginx!</title>
<style>
html { color-scheme: light dark; }
body { width: 35em; margin: 0 auto;
font-family: Tahoma, Verdana, Arial, sans-serif; }
</style>
</head>
<body>
<h1>Welcome to nginx!</h1>
<p>If you see this page, the nginx web server is successfully installed and
working. Further configuration is required.</p>

<p>For online documentation and support please refer to
<a href="http://nginx.org/">nginx.org</a>.<br/>
Commercial support is available at
<a href="http://nginx.com/">nginx.com</a>.</p>

<p><em>Thank you for using nginx.</em></p>
</body>
</html>
"""
# When the page was installed (the package's build), as its Last-Modified and ETag say.
_WELCOME_MTIME = 1_712_000_000
ALLOWED = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"
JSON_OK = b'{"ok":true}'


def nginx_page(status: int) -> bytes:
    """Return the page nginx writes for an error status, byte for byte."""
    title = f"{status} {_NGINX_PHRASES.get(status, HTTPStatus(status).phrase)}"
    return (
        f"<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n"
        f"<center><h1>{title}</h1></center>\r\n<hr><center>nginx</center>\r\n"
        "</body>\r\n</html>\r\n"
    ).encode()


# nginx's own words where they differ from the standard phrase.
_NGINX_PHRASES = {405: "Not Allowed", 500: "Internal Server Error"}


def web_answer(asked: Asked, now: float) -> Answer:
    """Return what a plain nginx-fronted server answers ``asked`` with (the table above)."""
    head = (("server", "nginx"), ("date", http_date(now)))
    method = asked.method
    if method in ("GET", "HEAD"):
        etag = f'"{_WELCOME_MTIME:x}-{len(WELCOME):x}"'
        return Answer(
            200,
            (
                *head,
                ("content-type", "text/html"),
                ("last-modified", http_date(_WELCOME_MTIME)),
                ("etag", etag),
                ("accept-ranges", "bytes"),
            ),
            WELCOME,
        )
    if method in ("POST", "PUT", "PATCH"):
        return Answer(
            200,
            (*head, ("content-type", "application/json")),
            JSON_OK,
        )
    if method == "DELETE":
        return Answer(204, head, b"")
    if method == "OPTIONS":
        return Answer(204, (*head, ("allow", ALLOWED)), b"")
    return web_error(405, now)


def web_error(status: int, now: float) -> Answer:
    """Return nginx's page for an error status."""
    return Answer(
        status,
        (
            ("server", "nginx"),
            ("date", http_date(now)),
            ("content-type", "text/html"),
        ),
        nginx_page(status),
    )
