"""Keep the last answer of each conditional GET and its ``ETag``, so a 304 reuses it.

GitHub answers most GETs with an ``ETag``; sent back in ``If-None-Match``, an unchanged
resource is answered ``304 Not Modified`` with no body, which does not count against the
primary rate limit. ``ETagCache`` holds the validator and the answer's text (parsed again
on each reuse, so no caller shares a mutable answer), a bounded number of them, the least
recently used dropped first. A cache of 0 entries keeps nothing: every GET is plain.
https://docs.github.com/en/rest/using-the-rest-api/best-practices-for-using-the-rest-api#use-conditional-requests-if-appropriate
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Final

ETAG_ENTRIES: Final = 512
# An answer larger than this is not kept: a job list is a few kilobytes.
MAX_KEPT_CHARS: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class Held:
    """An answer kept for its ETag: the validator as GitHub sent it, and the JSON text."""

    etag: str
    text: str


class ETagCache:
    """Hold the last answer of each conditional GET by its key, bounded; safe across threads."""

    def __init__(self, entries: int = ETAG_ENTRIES) -> None:
        if entries < 0:
            raise ValueError("an ETag cache holds 0 or more entries")
        self.entries = entries
        self._held: OrderedDict[Hashable, Held] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Held | None:
        """Return the answer kept for ``key``, if any (it becomes the most recently used)."""
        with self._lock:
            held = self._held.get(key)
            if held is not None:
                self._held.move_to_end(key)
            return held

    def put(self, key: Hashable, etag: str, text: str) -> None:
        """Keep an answer and its ETag; drop the least recently used beyond the bound."""
        if self.entries == 0 or not etag or len(text) > MAX_KEPT_CHARS:
            return
        with self._lock:
            self._held[key] = Held(etag, text)
            self._held.move_to_end(key)
            while len(self._held) > self.entries:
                self._held.popitem(last=False)

    def drop(self, key: Hashable) -> None:
        """Forget the answer kept for ``key``."""
        with self._lock:
            self._held.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)
