"""Read the project's standards files at base, each capped, for the diff review.

docs/design.md section 5: ``AGENTS.md``, ``CLAUDE.md``, ``CONTRIBUTING.md`` and
``.github/copilot-instructions.md``, read through a file reader the caller hands in,
always at the base commit (docs/design.md invariant 3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

STANDARDS_FILES: Final = (
    "AGENTS.md",
    "CLAUDE.md",
    "CONTRIBUTING.md",
    ".github/copilot-instructions.md",
)
STANDARDS_CAP: Final = 6_000  # characters of each standards file shown


@dataclass(frozen=True)
class StandardsFile:
    """A standards file as read at base: its path, its text (capped) and its full size."""

    path: str
    text: str
    chars: int
    sha: str

    @property
    def cut(self) -> bool:
        """Return whether the text was cut to the cap."""
        return self.chars > len(self.text)


FileReader = Callable[[str, str], str | None]


def read_standards(
    read_file: FileReader, base_sha: str, *, cap: int = STANDARDS_CAP
) -> list[StandardsFile]:
    """Return the standards files that exist at ``base_sha``, each cut to ``cap`` characters.

    ``read_file(path, ref)`` returns a file's text at a ref, or None when it is not there
    (``functools.partial(gateway.file_at, repo)``). Never head: the pull request must not
    write the standards it is reviewed by (docs/design.md invariant 3).
    """
    found = []
    for path in STANDARDS_FILES:
        text = read_file(path, base_sha)
        if text is not None:
            found.append(StandardsFile(path, text[:cap], len(text), base_sha))
    return found
