"""Say on the board what the relay's catch-up last did (docs/design.md section 9), pure.

No I/O: ``pages.py`` reads the newest pass from the record and hands it here. A cap
reached is said loudly; what went wrong is only named as having happened, since its
words can name repositories a viewer may not see (the relay's log has them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from app_relay.board.view import span
from app_relay.store import CatchUpPass


@dataclass(frozen=True)
class CatchUpLine:
    """The board's sentence about catch-up, and its loud parts."""

    said: str
    capped: str  # "" when no cap stopped the last pass
    trouble: bool


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def catch_up_line(last: CatchUpPass | None, now: datetime) -> CatchUpLine:
    """Return what the board says about the newest finished catch-up pass."""
    if last is None:
        return CatchUpLine("no pass has run yet", "", trouble=False)
    t = last.tally
    when = last.finished_at or last.started_at
    sweep = "every open pull request" if t.full else "pull requests updated since the last pass"
    said = (
        f"last pass {span((now - when).total_seconds())} ago: "
        f"{_count(t.redeliveries_asked, 'redelivery', 'redeliveries')} asked of GitHub "
        f"({_count(t.deliveries_listed, 'delivery', 'deliveries')} listed), "
        f"{_count(t.pulls_swept, 'pull request', 'pull requests')} swept "
        f"(of {t.pulls_listed} read: {sweep})"
    )
    if t.redeliveries_skipped:
        said += (
            f"; {_count(t.redeliveries_skipped, 'delivery', 'deliveries')} the relay had "
            "refused not asked again"
        )
    return CatchUpLine(said, t.capped, trouble=bool(t.trouble))
