"""The proxy's own answering server, for sunk requests whose body streams to its spool.

mitmproxy streams a request body only to a server connection it has opened. A request
the proxy sinks (its host not allowed, a write to a registry) must never reach its host,
yet its body must stream to disk rather than be held: such a request is sent, as the
proxy's addon rewrote it, to this server on the proxy's own loopback. Its body reaches
the spool, never this server (the stream forwards nothing); the server reads the empty
chunked body's end (sent by mitmproxy after the addon's ``request`` hook, or by the
addon's stream once the body passes the proxy's limit), then waits for what the addon
decides for the request's token, set once it has logged the request, and answers that:
a status, headers (``lookalike/pick.py`` makes them the real service's) and a body. The sink
adds ``content-length``, and sends no body for HEAD, 204 or 304.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
from collections.abc import Sequence
from http import HTTPStatus

from cujo_action.limits import SINK_HEAD

# The longest request head the sink reads (mitmproxy has already parsed it once).
HEAD_LIMIT = SINK_HEAD
# The answer to a body past the proxy's limit.
REFUSED = 413
# A header the sink writes: a token for its name, no control character in its value.
_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VALUE = re.compile(r"[^\x00-\x08\x0a-\x1f\x7f]*")
# Headers the sink sets itself, never taken from an answer.
_OWN = frozenset({"content-length", "transfer-encoding", "connection"})

Headers = Sequence[tuple[str, str]]


class Sink:
    """Answer each request the addon sent here with what it decided for its token."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        """Listen nowhere yet (``start``)."""
        self.host = host
        self.port = 0
        self.answers: dict[str, asyncio.Future[tuple[int, Headers, bytes]]] = {}
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> tuple[str, int]:
        """Return where the sink listens."""
        return self.host, self.port

    async def start(self) -> None:
        """Listen on a free port of ``host``."""
        self._server = await asyncio.start_server(self._serve, self.host, 0, limit=HEAD_LIMIT)
        self.port = self._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()

    def expect(self) -> str:
        """Return a new token: its request is answered once ``answer`` is called."""
        token = secrets.token_hex(16)
        self.answers[token] = asyncio.get_running_loop().create_future()
        return token

    def answer(self, token: str, status: int, headers: Headers, body: bytes) -> None:
        """Set what the request of ``token`` is answered with (the first answer holds)."""
        future = self.answers.get(token)
        if future is not None and not future.done():
            future.set_result((status, headers, body))

    def forget(self, token: str) -> None:
        """Drop a token no request will bring."""
        future = self.answers.pop(token, None)
        if future is not None and not future.done():
            future.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            asyncio.CancelledError,
            ConnectionError,
            ValueError,
        ):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method, target, _ = head.split(b"\r\n", 1)[0].split(b" ", 2)
                # The body is chunked and empty: its end is what the answer waits for.
                await reader.readuntil(b"0\r\n\r\n")
                token = target.lstrip(b"/").decode()
                future = self.answers.get(token)
                if future is None:
                    break  # not a request the addon sent here
                status, headers, body = await future
                del self.answers[token]
                writer.write(response(method == b"HEAD", status, headers, body))
                await writer.drain()
        writer.close()


def well_formed(name: str, value: str) -> bool:
    """Return whether a header can be written as it is.

    An answer's headers are made by the proxy, some from what the request said: one
    that could split the response (a line break in it) is dropped, never written.
    """
    return bool(_NAME.fullmatch(name) and _VALUE.fullmatch(value))


def response(head_only: bool, status: int, headers: Headers, body: bytes) -> bytes:
    """Return an answer as HTTP/1.1 bytes: its status, its headers that are well formed,
    its length and (unless the request was a HEAD, or the status has none) its body."""
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
    for name, value in headers:
        if name.lower() not in _OWN and well_formed(name, value):
            lines.append(f"{name}: {value}")
    if status == REFUSED:
        lines.append("connection: close")  # a body past the limit ends its connection
    none = status in (204, 304)
    if not none:
        lines.append(f"content-length: {len(body)}")
    wire = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
    return wire if head_only or none else wire + body
