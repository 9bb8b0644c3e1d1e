"""Read a check's file commands after each command, as root, through ``boundary``.

The files sit in the check's HOME (``work/_temp/_runner_file_commands``), where the
pull request's code writes: root reads each with ``boundary.read_file_below`` (no link
followed on the way or at the file, a fifo never waited on, a hard link never read), at
most ``limits.FILE_COMMAND_READ`` bytes, the rest counted as a cut. A file found to be
something else (a link, a fifo) is reported, never read. What it holds is searched for
the decoys (``output.search_whole``) and judged (``filecommands.judge``); each thing
found is reported once per check, naming the command after which it was first there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cujo_action.limits import FILE_COMMAND_READ
from cujo_action.sandbox.boundary import read_file_below
from cujo_action.sandbox.output import Matcher, search_whole
from cujo_action.schema import DECOY_IN_OUTPUT, WORKFLOW_COMMAND_WRITE
from cujo_action.watch.filecommands import JUDGED, judge, not_regular
from cujo_action.watch.persistence_scan import ScanCut


@dataclass(frozen=True)
class Written:
    """One thing a step left for the runner that counts, as an observation reports it."""

    kind: str
    detail: str
    path: str | None = None


@dataclass
class Look:
    """What one look at the file commands found, and the limits it reached."""

    written: list[Written] = field(default_factory=list)
    cuts: list[ScanCut] = field(default_factory=list)


class FileCommandScan:
    """The file commands of one check: ``files`` maps each variable to its HOME-relative
    file. Made before any command of the check ran: what the files held then is what
    the commands are judged against (arm leaves them empty)."""

    def __init__(self, home: Path, files: Mapping[str, str], matcher: Matcher) -> None:
        self._home, self._files, self._matcher = home, dict(files), matcher
        self._said: set[tuple[str, ...]] = set()
        self._stamps: dict[str, tuple[int, ...]] = {}
        self._before: dict[str, str] = {}
        # What each file held at the last look (read as above, never again): what a
        # runner would act on after the step (``workflow_runner`` carries GITHUB_ENV and
        # GITHUB_PATH on to a workflow job's later steps).
        self.current: dict[str, str] = {}
        for var, rel in self._files.items():
            read = read_file_below(home, rel, FILE_COMMAND_READ)
            if read is not None and not read.not_regular:
                self._stamps[var] = read.stamp
                self._before[var] = read.data.decode("utf-8", "replace")
                self.current[var] = self._before[var]

    def _new(self, *key: str) -> bool:
        """Return whether ``key`` is reported for the first time (and remember it)."""
        if key in self._said:
            return False
        self._said.add(key)
        return True

    def look(self, after: str) -> Look:
        """Read every file as it stands ``after`` a command; return what is new in it."""
        out = Look()
        for var, rel in self._files.items():
            read = read_file_below(self._home, rel, FILE_COMMAND_READ)
            if read is None or read.not_regular:
                self.current.pop(var, None)
            if read is None:
                continue  # gone: the runner has nothing to read
            if read.not_regular:
                if self._new("not-regular", var, read.not_regular):
                    said = not_regular(var, read.not_regular)
                    out.written.append(Written(WORKFLOW_COMMAND_WRITE, f"{said}; after {after}"))
                continue
            if self._stamps.get(var) == read.stamp:
                continue  # not written since the last look
            self._stamps[var] = read.stamp
            self.current[var] = read.data.decode("utf-8", "replace")
            if read.size > len(read.data) and self._new("cut", var):
                out.cuts.append(
                    ScanCut(
                        "file-command-read",
                        read.size - len(read.data),
                        len(read.data),
                        f"${var} held {read.size} bytes after {after}: its first "
                        f"{len(read.data)} were searched and judged",
                    )
                )
            self._search(var, read.data, after, out)
            if var in JUDGED:
                text = read.data.decode("utf-8", "replace")
                for said in judge(var, self._before.get(var, ""), text):
                    if self._new("judged", var, said):
                        out.written.append(
                            Written(WORKFLOW_COMMAND_WRITE, f"{said}, after {after}")
                        )
        return out

    def _search(self, var: str, data: bytes, after: str, out: Look) -> None:
        """Search one file for the decoys; name each decoy once per file."""
        found, unsearched = search_whole(self._matcher, data)
        encodings: dict[str, list[str]] = {}
        for name, encoding in found:
            encodings.setdefault(name, []).append(encoding)
        for name, how in encodings.items():
            if self._new("decoy", var, name):
                detail = f"{name} ({', '.join(how)}) in ${var} after {after}"
                out.written.append(Written(DECOY_IN_OUTPUT, detail, path=f"${var}"))
        if unsearched and self._new("unsearched", var):
            out.cuts.append(
                ScanCut(
                    "output-search",
                    unsearched,
                    max(len(data) - unsearched, 0),
                    f"{unsearched} bytes of ${var} after {after} were decoded only in part "
                    "(the decode budget ran out)",
                )
            )
