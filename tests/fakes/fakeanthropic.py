"""A fake of the Anthropic Messages API: a real HTTP server on loopback, scripted answers.

Written by hand from Anthropic's documentation, not recorded from the API:
the Messages API (https://docs.anthropic.com/en/api/messages: a ``message`` object with
``content`` blocks ``{"type": "text", "text"}`` and ``{"type": "tool_use", "id", "name",
"input"}``, ``stop_reason: "tool_use"``, ``usage: {input_tokens, output_tokens}``), tool
use (https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use) and
errors (https://docs.anthropic.com/en/api/errors: ``{"type": "error", "error": {"type":
"overloaded_error", "message"}}`` with HTTP 529).

The real SDK talks to it through ``base_url``. Each request is recorded (path, headers,
JSON body) so tests assert what was offered and sent; each answer is taken from a script
in order: a reply, an error status, or ``hang`` (the answer is withheld until the test
releases it or the server closes, so the client's own timeout is what ends the wait).
"""

from __future__ import annotations

import json
import secrets
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Json = dict[str, Any]


@dataclass(frozen=True)
class Recorded:
    """One request the fake received."""

    path: str
    headers: dict[str, str]
    body: Json

    @property
    def tools(self) -> list[str]:
        """Return the names of the tools offered."""
        return [t["name"] for t in self.body.get("tools", [])]

    def text(self) -> str:
        """Return the system text and every text the messages carry, joined."""
        parts = [self.body.get("system", "")]
        for message in self.body.get("messages", []):
            content = message["content"]
            if isinstance(content, str):
                parts.append(content)
                continue
            for block in content:
                if block.get("type") == "text":
                    parts.append(block["text"])
                elif block.get("type") == "tool_result":
                    parts.append(str(block.get("content", "")))
        return "\n".join(parts)


@dataclass(frozen=True)
class Answer:
    """A scripted answer: a status, headers and a JSON body; or a withheld one."""

    status: int = 200
    body: Json = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False


def tool_use(name: str, tool_input: object) -> Json:
    """Return a ``tool_use`` content block."""
    return {
        "type": "tool_use",
        "id": f"toolu_{secrets.token_hex(12)}",
        "name": name,
        "input": tool_input,
    }


def text(said: str) -> Json:
    """Return a ``text`` content block."""
    return {"type": "text", "text": said}


class FakeAnthropic:
    """The Messages API on 127.0.0.1, answering from a script and recording every request."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.unscripted = 0
        self._script: deque[Answer] = deque()
        self._lock = threading.Lock()
        self._release = threading.Event()
        self.on_request: Callable[[Recorded], None] | None = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                size = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(size)
                recorded = Recorded(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, json.loads(raw)
                )
                answer = fake._next(recorded)
                if answer.hang:
                    fake._release.wait(60)
                    answer = _error(500, "api_error", "the fake was released")
                payload = json.dumps(answer.body).encode()
                try:
                    self.send_response(answer.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.send_header("request-id", f"req_{secrets.token_hex(8)}")
                    for key, value in answer.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client gave up first (a timeout), as it was meant to

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """Return the base URL to hand the SDK."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def _next(self, recorded: Recorded) -> Answer:
        with self._lock:
            self.requests.append(recorded)
            hook = self.on_request
            answer = self._script.popleft() if self._script else None
            if answer is None:
                self.unscripted += 1
        if hook is not None:
            hook(recorded)
        if answer is None:
            return _error(500, "api_error", "the fake has no scripted answer left")
        if answer.body.get("type") == "message" and answer.body.get("model") is None:
            # As the API does, the reply names the model that was asked for.
            return Answer(answer.status, {**answer.body, "model": recorded.body.get("model")})
        return answer

    def reply(
        self,
        *blocks: Json,
        stop_reason: str = "tool_use",
        input_tokens: int = 1_000,
        output_tokens: int = 200,
        model: str | None = None,
    ) -> None:
        """Script a ``message`` holding ``blocks``."""
        body = {
            "id": f"msg_{secrets.token_hex(12)}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": list(blocks),
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        }
        self._push(Answer(200, body))

    def call(self, name: str, tool_input: object, **kw: Any) -> None:
        """Script a reply that makes one tool call."""
        self.reply(tool_use(name, tool_input), **kw)

    def overloaded(self, times: int = 1) -> None:
        """Script HTTP 529 ``overloaded_error`` answers."""
        for _ in range(times):
            self._push(_error(529, "overloaded_error", "Overloaded"))

    def status(self, status: int, kind: str = "api_error", message: str = "failed") -> None:
        """Script an error answer with HTTP ``status``."""
        self._push(_error(status, kind, message))

    def garbled(self) -> None:
        """Script a 200 answer that is not a message at all."""
        self._push(Answer(200, {"type": "message", "content": "not a list"}))

    def hang(self, times: int = 1) -> None:
        """Script answers withheld until ``release`` or ``close``."""
        for _ in range(times):
            self._push(Answer(hang=True))

    def _push(self, answer: Answer) -> None:
        with self._lock:
            self._script.append(answer)

    @property
    def left(self) -> int:
        """Return how many scripted answers are still unused."""
        with self._lock:
            return len(self._script)

    def release(self) -> None:
        """Let every withheld answer go."""
        self._release.set()

    def close(self) -> None:
        """Release what is withheld and stop the server."""
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def __enter__(self) -> FakeAnthropic:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _error(status: int, kind: str, message: str) -> Answer:
    return Answer(status, {"type": "error", "error": {"type": kind, "message": message}})


def running() -> Iterator[FakeAnthropic]:
    """Yield a running fake, closed afterwards (the body of a pytest fixture)."""
    with FakeAnthropic() as fake:
        yield fake
