"""Seal each evidence file when its writers stop, and find the seals that no longer hold."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from cujo_action.evidence.reader import EvidenceSeal
from cujo_action.sandbox.boundary import open_no_follow
from cujo_action.schema import MAX_TEXT, clip

# The proxy and the resolver append to their logs under run_dir/evidence, a 0700 root
# folder the sandbox cannot see. Once both have stopped nothing may write there again:
# each file is hashed then, and hashed again before the bundle is made from it. A file
# that changed in between, or a writer that was already dead when the harness came to
# stop it, means the evidence cannot be trusted whole, and the run ends as a failure.

_CHUNK = 1 << 20


def file_digest(path: Path) -> tuple[str, int]:
    """Return the sha256 (hex) and size of the file at ``path``, never through a symlink."""
    digest = hashlib.sha256()
    size = 0
    fd = open_no_follow(path, "read")
    with os.fdopen(fd, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


@dataclass(frozen=True)
class Seal:
    """One evidence file as it was when its writers stopped."""

    path: Path
    entry: EvidenceSeal

    def broken(self) -> str | None:
        """Return why the file no longer matches its seal, or None when it does."""
        try:
            sha256, size = file_digest(self.path)
        except FileNotFoundError:
            return f"{self.entry.name} was removed after it was sealed"
        except OSError as exc:
            return f"{self.entry.name} cannot be read again ({exc.strerror})"
        if (sha256, size) == (self.entry.sha256, self.entry.bytes):
            return None
        return (
            f"{self.entry.name} changed after its writers stopped "
            f"({self.entry.bytes} bytes sha256 {self.entry.sha256[:16]}… when sealed, "
            f"{size} bytes sha256 {sha256[:16]}… now)"
        )


def seal(path: Path, name: str, writers: Sequence[str]) -> Seal:
    """Hash ``path`` now (its ``writers`` have stopped); raise OSError if it cannot be read."""
    sha256, size = file_digest(path)
    entry = EvidenceSeal(name=name, sha256=sha256, bytes=size, writers=list(writers))
    return Seal(Path(path), entry)


def broken_seals(seals: Iterable[Seal]) -> list[str]:
    """Return why each seal no longer holds (empty: every file is as it was sealed)."""
    return [why for s in seals if (why := s.broken()) is not None]


class EvidenceFaults(NamedTuple):
    """Why a run's evidence cannot be bundled as it stands (both empty: it can)."""

    # Writers that died before they were stopped: the logs hold what they saw until then.
    lost: list[str]
    # Logs that changed after their seal or could not be sealed: nothing in them counts.
    untrusted: list[str]

    def reason(self) -> str:
        """Return the failure's reason, short enough for a Failure; empty when none."""
        faults = [*self.untrusted, *self.lost]
        if not faults:
            return ""
        return clip("the evidence cannot be trusted whole: " + "; ".join(faults), MAX_TEXT)
