"""Record how long each stage of a run takes: the run's fixed cost, split by stage.

Every process of a run (the orchestrator, each check process) keeps a ``Timeline`` of
named spans on the system-wide monotonic clock, so spans from different processes line
up. A check writes its spans beside its report; the orchestrator gathers them into the
bundle's ``timings.json``. Figures only: nothing decides on them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

TIMINGS_NAME = "timings.json"


@dataclass
class Timeline:
    """Named spans (start, end) on the monotonic clock, in the order they started."""

    spans: list[tuple[str, float, float]] = field(default_factory=list)

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        """Time the block as ``name`` (recorded even when it raises)."""
        start = time.monotonic()
        try:
            yield
        finally:
            self.add(name, start, time.monotonic())

    def add(self, name: str, start: float, end: float) -> None:
        """Record a span measured elsewhere."""
        self.spans.append((name, start, end))

    def dump(self) -> list[dict[str, object]]:
        """Return the spans as JSON-ready records (absolute monotonic seconds)."""
        return [
            {"name": name, "start": round(start, 4), "end": round(end, 4)}
            for name, start, end in self.spans
        ]

    def write(self, path: Path) -> None:
        """Write the spans to ``path`` atomically."""
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.dump()))
        os.replace(tmp, path)

    def extend(self, path: Path, prefix: str) -> None:
        """Add the spans written to ``path`` (by ``write``), each name under ``prefix``."""
        try:
            spans = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        if not isinstance(spans, list):
            return
        for item in spans:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                try:
                    self.add(f"{prefix}{item['name']}", float(item["start"]), float(item["end"]))
                except (KeyError, TypeError, ValueError):
                    continue


def timing_record(timeline: Timeline, started: float) -> dict[str, object]:
    """Return the bundle's timing record: each span in seconds from the run's start."""
    return {
        "schema": "cujo.timings/1",
        "clock": "monotonic seconds from the start of the run",
        "spans": [
            {
                "name": name,
                "start": round(start - started, 3),
                "seconds": round(end - start, 3),
            }
            for name, start, end in sorted(timeline.spans, key=lambda s: s[1])
        ],
    }


def split(record: dict[str, object]) -> list[tuple[str, float]]:
    """Return the record's stages in order: each top-level stage and arm piece, then each
    check's set-up pieces (``python``: its interpreter and imports) and its commands."""
    spans = record.get("spans")
    if not isinstance(spans, list):
        return []
    stages: list[tuple[str, float]] = []
    checks: dict[str, dict[str, float]] = {}
    for span in spans:
        name, start, took = str(span["name"]), float(span["start"]), float(span["seconds"])
        head, _, rest = name.partition("/")
        if head != "check":
            stages.append((name, took))
            continue
        check, _, piece = rest.partition("/")
        mine = checks.setdefault(check, {})
        if not piece:
            mine[" start"], mine[" total"] = start, took
        elif piece.endswith(" command"):
            mine["commands"] = mine.get("commands", 0.0) + took
        else:
            if piece == "harness start" and " start" in mine:
                mine["python"] = start - mine[" start"]
            mine[piece] = mine.get(piece, 0.0) + took
    for check, mine in checks.items():
        commands = mine.get("commands", 0.0)
        stages.append((f"{check}/set-up", mine.get(" total", 0.0) - commands))
        stages += [(f"{check}/{k}", v) for k, v in mine.items() if not k.startswith(" ")]
    return stages


def split_line(record: dict[str, object]) -> str:
    """Return the record's split as one line."""
    return ", ".join(f"{name} {took:.2f}s" for name, took in split(record))
