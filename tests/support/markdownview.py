"""Read Markdown the relay wrote as a CommonMark parser does (markdown-it-py), GFM tables on.

Bare URLs are linkified as GitHub does, so a test sees a link wherever GitHub would
make one. ``view`` splits what renders into code spans, plain text, and the kinds of
node that must never come from a pull request (links, images, HTML).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from markdown_it import MarkdownIt
from markdown_it.token import Token

_PARSER = MarkdownIt("commonmark", {"linkify": True}).enable(["table", "linkify"])
ACTIVE = frozenset({"link_open", "image", "html_inline", "html_block", "autolink"})
# The hidden line naming the run a review belongs to (effects.review_marker): Cujo's own
# HTML comment, made from a run id the relay generated, never from pull-request text.
# Cujo's own fixed HTML in a review body (reviewbody.py): collapsed evidence and the
# small "who decided" line. Nothing a pull request wrote can take these shapes.
_OWN_HTML = re.compile(r"<details><summary>Evidence for F\d+</summary>|</details>|</?sub>")
_RUN_MARKER = re.compile(r"<!-- cujo-run: [0-9a-f]{32}(?: [a-z0-9:-]{1,64})? -->\n?")


@dataclass
class View:
    """What a Markdown text renders as."""

    code: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    active: list[str] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)
    markers: list[str] = field(default_factory=list)
    structure: list[str] = field(default_factory=list)

    def plain(self) -> str:
        """Return every piece of plain (non-code) text, joined."""
        return "\n".join(self.text)


def view(markdown: str) -> View:
    """Parse ``markdown`` and sort what it renders."""
    seen = View()

    def walk(tokens: list[Token]) -> None:
        for token in tokens:
            if token.type == "html_block" and _RUN_MARKER.fullmatch(token.content):
                seen.markers.append(token.content.strip())
            elif token.type in ("html_block", "html_inline") and _OWN_HTML.fullmatch(
                token.content.strip()
            ):
                seen.structure.append(token.content.strip())
            elif token.type in ACTIVE:
                seen.active.append(f"{token.type} {token.attrs or token.content!r}")
            elif token.type in ("code_inline", "code_block", "fence"):
                seen.code.append(token.content)
            elif token.type == "text":
                seen.text.append(token.content)
            if token.nesting == 1 and token.block:
                seen.blocks.append(token.type)
            if token.children:
                walk(token.children)

    walk(_PARSER.parse(markdown))
    return seen
