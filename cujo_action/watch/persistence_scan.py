"""Read a check's persistence places as they stand, through ``boundary`` (no link followed).

``persistence.places`` names the places; this reads them as root after pull-request code
may have written there (docs/design.md section 6.5, the boundary rules): every execution point is
listed directly (``boundary.matching``: each folder on the way listed in full, only the
names that run later fingerprinted), so nothing written beside them can crowd them out;
only the places walked whole share the generic walk's cap (``limits.PERSISTENCE_WALK``),
and reaching it is named as a cut, as is a file judged by content over its cap.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cujo_action.limits import PERSISTENCE_TEXT, PERSISTENCE_WALK, RECORD_READ, LimitId
from cujo_action.sandbox.boundary import folders_holding, matching, read_below, walk_prints
from cujo_action.watch.persistence import Entry, Place, site_place

# Where other virtual environments live in a HOME, and how deep below to look for their
# pyvenv.cfg: the HOME and the checkout (.venv, venv, .tox/<env>, .nox/<session>), and the
# folders poetry, pipenv and hatch keep theirs in.
_VENV_HOMES = (
    ("", 2),
    (".cache/pypoetry/virtualenvs", 1),
    (".local/share/virtualenvs", 1),
    (".local/share/hatch/env/virtual", 3),
)
# A RECORD is read whole to know which startup files an install wrote (numpy's is 100 KiB).
_RECORD_CAP = RECORD_READ
# The lines of a .pth file that site.py executes rather than adds to sys.path.
_RUNS = ("import ", "import\t")


@dataclass(frozen=True)
class ScanCut:
    """A limit reached while reading the places: which, how much, and where."""

    limit: LimitId
    dropped: int
    kept: int
    detail: str
    hides_danger: bool | None = None  # None: the limit's own


@dataclass
class Scan:
    """The places as read: each file's entry by its reported path, and the limits reached."""

    entries: dict[str, Entry] = field(default_factory=dict)
    cuts: list[ScanCut] = field(default_factory=list)


def venv_places(home: Path, workspace: str, known: Iterable[str]) -> tuple[list[Place], Scan]:
    """Return a site place for each virtual environment found in ``home`` (HOME-relative
    folders holding a ``pyvenv.cfg``), ``known`` ones left out, and the search's cut."""
    scan = Scan()
    found: list[str] = []
    budget = PERSISTENCE_WALK
    for root, depth in ((workspace, 2), *_VENV_HOMES):
        venvs, left = folders_holding(home, root, "pyvenv.cfg", depth, budget)
        found += venvs
        budget -= 1 + len(venvs)  # at least the root was listed
        if left:
            scan.cuts.append(
                ScanCut(
                    "persistence-walk",
                    left,
                    PERSISTENCE_WALK,
                    f"folders left unsearched for virtual environments below ~/{root}",
                )
            )
    skip = {k.rstrip("/") for k in known}
    venvs = sorted({v.strip("/") for v in found} - skip)
    return [site_place(f"{v}/lib", installs=True) for v in venvs if v], scan


def scan(home: Path, places: Iterable[Place]) -> Scan:
    """Fingerprint every place (and read the few judged by their content)."""
    out = Scan()
    walked = 0
    for place in places:
        for root in place.paths:
            base, rel = (Path("/"), root.lstrip("/")) if root.startswith("/") else (home, root)
            shown = "/" if root.startswith("/") else "~/"
            if place.names:
                prints = matching(base, rel, place.names)
                if place.installs:
                    prints = _not_installed(base, shown, prints, out)
            else:
                prints, reached = walk_prints(base, [rel], PERSISTENCE_WALK - walked)
                walked += len(prints)
                if reached:
                    why = f"the walk of {shown}{rel} stopped at the cap"
                    out.cuts.append(ScanCut("persistence-walk", 1, walked, why))
            for found, fp in prints.items():
                text = None
                if place.judge is not None and found == rel:
                    text = _judged_text(base, rel, f"{shown}{rel}", out)
                out.entries[f"{shown}{found}"] = Entry(fp, text)
    return out


def _judged_text(base: Path, rel: str, shown: str, out: Scan) -> str | None:
    """Return the text of a file judged by its content, naming a cut when it is longer."""
    data = read_below(base, rel, PERSISTENCE_TEXT + 1)
    if data is None:
        return None
    if len(data) > PERSISTENCE_TEXT:
        why = f"{shown} judged by its first {PERSISTENCE_TEXT} bytes"
        out.cuts.append(ScanCut("persistence-text", 1, PERSISTENCE_TEXT, why))
        data = data[:PERSISTENCE_TEXT]
    return data.decode("utf-8", "replace")


def _not_installed(base: Path, shown: str, prints: dict[str, str], out: Scan) -> dict[str, str]:
    """Return ``prints`` without what installs write: the files an installed
    distribution's RECORD lists, and .pth files that only add folders to ``sys.path``
    (``setup.py develop``'s easy-install.pth): site(7) runs only a line that imports."""
    owned: dict[str, set[str]] = {}
    kept: dict[str, str] = {}
    for path, fp in prints.items():
        site, name = posixpath.split(path)
        if site not in owned:
            owned[site] = _recorded(base, site, out)
        if name in owned[site]:
            continue
        if name.endswith(".pth"):
            text = _judged_text(base, path, f"{shown}{path}", out)
            lines = (text or "").splitlines()
            if text is not None and not any(line.startswith(_RUNS) for line in lines):
                continue
        kept[path] = fp
    return kept


def _recorded(base: Path, site: str, out: Scan) -> set[str]:
    """Return the top-level names the RECORDs of a site folder's distributions list."""
    names: set[str] = set()
    for record in matching(base, site, ["*.dist-info/RECORD"]):
        data = read_below(base, record, _RECORD_CAP + 1) or b""
        if len(data) > _RECORD_CAP:
            # Unread names stay unowned: a startup file among them is reported, not hidden.
            out.cuts.append(
                ScanCut(
                    "record-read",
                    1,
                    _RECORD_CAP,
                    f"{record} read to {_RECORD_CAP} bytes",
                    hides_danger=False,
                )
            )
        for line in data[:_RECORD_CAP].decode("utf-8", "replace").splitlines():
            path = line.split(",", 1)[0].strip().strip('"')
            if path and "/" not in path:
                names.add(path)
    return names
