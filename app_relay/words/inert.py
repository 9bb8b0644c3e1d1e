"""Render text a pull request controls as inert Markdown, for every body the relay writes.

Pure. Hosts, DNS names, URLs, paths, command lines and error messages quoting them are
chosen by the pull request (docs/design.md invariant 10): in a review or a check
summary they must read as data, never as a link, an image, HTML, a mention, a table
cell break or a line that starts a new block. ``code_span`` is the one way in: the text
goes inside a CommonMark code span (https://spec.commonmark.org/0.31.2/#code-spans)
whose fence is longer than any run of backticks in it, so nothing in the text can close
it, and inside a code span GitHub renders no link, HTML or @-mention.
"""

from __future__ import annotations

import re
import unicodedata

# How much of one quoted string a body shows; the record keeps the whole report.
MAX_QUOTED = 300
ELLIPSIS = "…"
# Shown for a line break: a blank line would end the paragraph, and the code span with it.
NEWLINE = "⏎"
# GitHub's tables split cells at `|`, even inside a code span.
TABLE_PIPE = "¦"
_LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
# Control and format characters (bidi overrides and isolates, zero-width spaces and
# joiners, soft hyphens): shown by code point, so text cannot reorder or hide itself.
_INVISIBLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
_BACKTICKS = re.compile(r"`+")


def code_span(text: str, *, cap: int = MAX_QUOTED, in_table: bool = False) -> str:
    """Return ``text`` as one inline code span that renders as exactly what it shows.

    Line breaks become ``⏎``, tabs a space, invisible and direction-changing characters
    ``<U+XXXX>``; more than ``cap`` characters are cut with ``…``; in a table cell ``|``
    becomes ``¦``. Put a space (or any character but a backtick) on each side of the
    span in the surrounding Markdown, or the fences merge with a neighbour's backticks.
    """
    shown = _visible(text.replace("\r\n", "\n"), cap, in_table=in_table)
    if not shown:
        return "(empty)"
    longest = max((len(run) for run in _BACKTICKS.findall(shown)), default=0)
    fence = "`" * (longest + 1)
    # CommonMark strips one space from each end when both ends are spaces, so padding
    # keeps a leading or trailing backtick (or space) from touching the fence.
    if shown[0] in "` " or shown[-1] in "` ":
        shown = f" {shown} "
    return f"{fence}{shown}{fence}"


def _visible(text: str, cap: int, *, in_table: bool) -> str:
    out: list[str] = []
    size = 0
    for char in text:
        if char in _LINE_BREAKS:
            piece = NEWLINE
        elif char == "\t":
            piece = " "
        elif char == "|" and in_table:
            piece = TABLE_PIPE
        elif unicodedata.category(char) in _INVISIBLE:
            piece = f"<U+{ord(char):04X}>"
        else:
            piece = char
        if size + len(piece) > cap:
            out.append(ELLIPSIS)
            break
        out.append(piece)
        size += len(piece)
    return "".join(out)
