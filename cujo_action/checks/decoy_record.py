"""Keep a check's decoy evidence within the report's caps without losing what matters.

The watcher describes the first processes of each decoy, kind and phase in full and keeps
every reading process's pid (``watcher.Reader``). This turns them into the report's
``decoy_events`` and ``decoy_readers`` (``limits.py``: ``report-decoy-events``,
``decoy-readers``): writes, deletes and the first access of each decoy, kind and phase are
always kept ahead of repeated readers, so a crowd of readers cannot push out the one event
that matters. Each event is admitted once, as the watcher records it, and its tamper
record line is printed then: what is printed is exactly what the report keeps.
"""

from __future__ import annotations

from pathlib import Path

from cujo_action.evidence.ledger import item_line
from cujo_action.evidence.recorder import emit
from cujo_action.schema import (
    MAX_DECOY_EVENTS,
    MAX_SHORT,
    MAX_TEXT,
    CheckName,
    DecoyEvent,
    DecoyReader,
    clip,
)
from cujo_action.watch.watcher import DecoyKind, Reader, WatchEvent

# Repeated readers (not the first of their decoy, kind and phase) may fill only half the
# report: the rest stays free for writes, deletes and first accesses still to come.


class DecoyRecord:
    """The decoy events a report keeps, admitted in the order the watcher records them."""

    def __init__(self, check: CheckName, run_id: str, home: Path, cap: int = MAX_DECOY_EVENTS):
        self.check, self.run_id, self.home, self.cap = check, run_id, home, cap
        self.repeats_room = cap // 2
        self.kept: list[DecoyEvent] = []
        self.dropped = 0
        self._firsts: set[tuple[str, str, str]] = set()

    def shown(self, path: str) -> str:
        """Return a decoy's path as the report names it (``~/`` for the check's HOME)."""
        if Path(path).is_relative_to(self.home):
            return "~/" + str(Path(path).relative_to(self.home))
        return path

    def admit(self, ev: WatchEvent[DecoyKind]) -> DecoyEvent | None:
        """Keep ``ev`` if the report has room for its kind, print its record line, return it."""
        first = (ev.path, ev.event, ev.phase) not in self._firsts
        self._firsts.add((ev.path, ev.event, ev.phase))
        telling = first or ev.event in ("write", "delete")
        room = self.cap if telling else self.repeats_room
        if len(self.kept) >= room:
            self.dropped += 1
            return None
        event = DecoyEvent(
            id=f"{self.check}:decoy:{len(self.kept) + 1}",
            phase=ev.phase,
            path=clip(self.shown(ev.path), MAX_TEXT),
            event=ev.event,
            pid=ev.pid,
            exe=clip(ev.exe, MAX_TEXT) if ev.exe else None,
            ts=round(ev.ts, 6),
            cmdline=clip(ev.cmdline, MAX_TEXT) if ev.cmdline else None,
            parents=[clip(p, MAX_SHORT) for p in ev.parents[:8]],
            origin=clip(ev.origin, MAX_SHORT),
        )
        self.kept.append(event)
        emit(item_line(self.run_id, event.id, event, f"decoy-{ev.event}"))
        return event

    def on_event(self, _n: int, ev: WatchEvent[DecoyKind]) -> None:
        """Admit each event as the watcher records it (its ``on_event``)."""
        self.admit(ev)

    def readers(self, readers: list[Reader]) -> list[DecoyReader]:
        """Return the report's readers: every process that opened or read a decoy."""
        return [
            DecoyReader(
                pid=r.pid,
                phase=r.phase,
                path=clip(self.shown(r.path), MAX_SHORT),
                ts=round(r.ts, 6),
                parents=list(r.parents[:8]),
            )
            for r in readers
        ]
