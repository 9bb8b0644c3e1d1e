"""Read the ``/cujo`` verbs in a pull-request comment: the lines a reader sees as verbs.

Pure: no HTTP client, no clock, no store. docs/design.md section 8.1 and
invariant 6: a verb is an exact line a reader sees as paragraph text, matched by code
and never by a model. Whether a verb found here applies, and who may use it, is
``decision``'s.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
from enum import StrEnum
from html.parser import HTMLParser
from typing import Final

from markdown_it import MarkdownIt
from markdown_it.rules_inline import StateInline
from markdown_it.rules_inline.escape import escape
from markdown_it.rules_inline.newline import newline
from markdown_it.token import Token


class Verb(StrEnum):
    """The two verbs; each is the line ``/cujo <verb>``."""

    DISMISS = "dismiss"
    REINSTATE = "reinstate"


VERB_LINES: Final = {f"/cujo {verb.value}": verb for verb in Verb}
# GitHub refuses a comment longer than this; a longer body is no comment it delivered.
MAX_BODY: Final = 65_536

# ---- parsing --------------------------------------------------------------------------

# CommonMark's line endings (https://spec.commonmark.org/0.31.2/#line-ending), as
# markdown-it normalizes them: source line N is the parser's line N.
_LINE_ENDING = re.compile(r"\r\n|\r|\n")
_BREAKS = frozenset({"softbreak", "hardbreak"})
# GitHub's own syntax that CommonMark does not know, read conservatively:
# a GFM table makes the line above its delimiter row a header cell
# (https://github.github.com/gfm/#tables-extension-), a footnote definition holds the
# lines after it (https://docs.github.com/en/get-started/writing-on-github), and `$`
# starts math (https://docs.github.com/en/get-started/writing-on-github/working-with-advanced-formatting/writing-mathematical-expressions).
_TABLE_DELIMITER = re.compile(r"[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*")
_SETEXT = re.compile(r" {0,3}(?:=+|-+)[ \t]*")
_FOOTNOTE = re.compile(r"\[\^[^\]]+\]:")
_CONTAINERS = frozenset({"blockquote_open", "bullet_list_open", "ordered_list_open", "table_open"})
_MATH = "$"
# https://html.spec.whatwg.org/multipage/syntax.html#void-elements
_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
     "track", "wbr", "param"}
)  # fmt: skip


# https://html.spec.whatwg.org/multipage/grouping-content.html#the-p-element
_ENDS_A_PARAGRAPH = frozenset(
    {"address", "article", "aside", "blockquote", "details", "dialog", "div", "dl",
     "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5",
     "h6", "header", "hgroup", "hr", "main", "menu", "nav", "ol", "p", "pre", "search",
     "section", "table", "ul"}
)  # fmt: skip


def _noting_lines(
    rule: Callable[[StateInline, bool], bool],
) -> Callable[[StateInline, bool], bool]:
    """Wrap an inline rule so each line break it pushes says which line follows it."""

    def noted(state: StateInline, silent: bool) -> bool:
        before = len(state.tokens)
        if not rule(state, silent):
            return False
        if not silent and len(state.tokens) > before and state.tokens[-1].type in _BREAKS:
            newlines = state.env.setdefault("cujo.newlines", {})
            if state.src not in newlines:
                newlines[state.src] = [i for i, c in enumerate(state.src) if c == "\n"]
            # The rule has moved past the newline: the lines before it are the line's index.
            state.tokens[-1].meta["line"] = bisect.bisect_left(newlines[state.src], state.pos)
        return True

    return noted


def _parser() -> MarkdownIt:
    # GitHub's comments are GFM: CommonMark with tables and strikethrough. Linkify does
    # not change which line is text, so it is left off (it needs another package).
    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    # The two rules that turn a newline into a line break, told to note where they are.
    md.inline.ruler.at("newline", _noting_lines(newline))
    md.inline.ruler.at("escape", _noting_lines(escape))
    return md


_MD: Final = _parser()


class _OpenElements(HTMLParser):
    """Follow which raw HTML elements are open, across the comment's HTML pieces."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        # A comment, tag or processing instruction left unclosed swallows what follows
        # in a browser's HTML parser, so from there on nothing counts; nor after an end
        # tag that closes nothing.
        self.broken = False
        self.inline = False

    @property
    def hiding(self) -> bool:
        """Say whether text here would be inside raw HTML."""
        return self.broken or bool(self.open)

    def feed_piece(self, html: str, *, inline: bool = False) -> None:
        """Read one HTML block or inline tag, which markdown-it has already cut whole."""
        self.inline = inline
        self.feed(html)
        # What HTMLParser holds back unread is an unfinished construct.
        if "<" in self.rawdata:
            self.broken = True
        self.reset()

    def set_cdata_mode(self, elem: str, *args: object, **kwargs: object) -> None:
        """Read inside <script> and <style> as markup too.

        GitHub's tag filter escapes those tags (https://github.github.com/gfm/#disallowed-raw-html-extension-),
        so what they would have hidden as raw text is markup on GitHub.
        """

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.inline and tag in _ENDS_A_PARAGRAPH:
            # Inside a paragraph, a browser closes the paragraph at such a tag.
            self.broken = True
        if tag not in _VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Open the element anyway: HTML ignores the slash of ``<details/>``."""
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        # Close only the newest element of that name: an element left open inside it
        # stays open, so what follows counts as hidden (the safe side).
        for i in range(len(self.open) - 1, -1, -1):
            if self.open[i] == tag:
                del self.open[i]
                return
        # Closing what was never opened (a stray </p> ends GitHub's paragraph early)
        # leaves a structure this reader does not follow.
        self.broken = True


def parse_verbs(body: str) -> list[Verb]:
    """Return the verb lines a reader sees as paragraph text, in order.

    A line counts when, with surrounding spaces and tabs removed, it is exactly
    ``/cujo dismiss`` or ``/cujo reinstate``, and it renders as a line of plain text in a
    top-level paragraph: not in code (fenced, indented or inline), a blockquote, a list,
    a heading, a table, a footnote, math, a link or emphasis, nor inside or after raw HTML
    left open (``<details>``, comments). Both readings must agree: the parser's, and the
    raw source line at the same place.
    """
    if len(body) > MAX_BODY:
        return []
    lines = _LINE_ENDING.split(body)
    wanted = {i for i, line in enumerate(lines) if line.strip(" \t") in VERB_LINES}
    if not wanted:
        return []
    footnote = next((i for i, line in enumerate(lines) if _FOOTNOTE.search(line)), len(lines))
    html = _OpenElements()
    found: list[Verb] = []
    tokens = _MD.parse(body)
    unsure = _unsure_lines(lines, tokens)
    under = _under_containers(lines, tokens)
    for n, token in enumerate(tokens):
        if token.type == "html_block":
            html.feed_piece(token.content)
        if token.type != "inline":
            continue
        children = token.children or []
        paragraph = tokens[n - 1]
        first, end = token.map or (0, 0)
        if (
            paragraph.type != "paragraph_open"
            or paragraph.level != 0
            or html.hiding  # the paragraph starts inside raw HTML
            or under[first]
            or any(_MATH in line for line in lines[first:end])
        ):
            _feed_inline_html(html, children)
            continue
        for offset, text, hidden in _plain_lines(children, html):
            i = first + offset
            if hidden or i not in wanted or i >= end or i >= footnote or i in unsure:
                continue
            verb = VERB_LINES[lines[i].strip(" \t")]
            if VERB_LINES[text] is verb:
                found.append(verb)
    return found


def _runs(lines: Sequence[str]) -> list[range]:
    """Return the runs of non-blank lines (CommonMark's blank: spaces and tabs only)."""
    runs: list[range] = []
    start: int | None = None
    for i, line in enumerate([*lines, ""]):
        if line.strip(" \t") and start is None:
            start = i
        elif not line.strip(" \t") and start is not None:
            runs.append(range(start, i))
            start = None
    return runs


def _unsure_lines(lines: Sequence[str], tokens: Sequence[Token]) -> set[int]:
    """Return the lines GitHub's parser may read otherwise than markdown-it, in one pass.

    * A delimiter row makes the line above a table header and the lines below (to a
      blank line) its rows: markdown-it wants a pipe in it, GitHub's takes ``:-:`` alone.
    * A ``---`` or ``===`` line makes the whole paragraph above it a heading, even where
      markdown-it saw a table in between.
    * markdown-it takes a link reference definition out as soon as it reads it, so an
      indented line under ``[a]: /u`` starts a code block there; cmark-gfm reads the
      definition as paragraph text first, and the line continues that paragraph (whose
      inline HTML may hide what follows). A definition leaves no token: its lines are the
      non-blank lines no top-level block covers.
    """
    covered = [False] * len(lines)
    for token in tokens:
        if token.level == 0 and token.map:
            for i in range(token.map[0], min(token.map[1], len(lines))):
                covered[i] = True
    found: set[int] = set()
    for run in _runs(lines):
        inside = run[1:]
        underline = [j for j in inside if _SETEXT.fullmatch(lines[j])]
        if underline:
            found.update(range(run.start, underline[-1]))
        delimiter = next((j for j in inside if _TABLE_DELIMITER.fullmatch(lines[j])), None)
        if delimiter is not None:
            found.update(range(delimiter - 1, run.stop))
        definition = next((i for i in run if not covered[i]), None)
        if definition is not None:
            found.update(range(definition + 1, run.stop))
    return found


def _under_containers(lines: Sequence[str], tokens: Sequence[Token]) -> list[bool]:
    """Return, per line, whether GitHub may read a paragraph starting there as in a container.

    Where markdown-it and cmark-gfm (GitHub's parser) part ways, it is here: markdown-it
    takes a link reference definition out as soon as it reads it, so a line under
    ``> [a]: /u`` or ``- [^1]: note`` starts a top-level paragraph, where cmark-gfm keeps
    it as the quote's or item's lazy continuation; and they differ on how far an indented
    line after an empty list item belongs to it. So a paragraph does not count when a
    container sits in the lines right above it (for an indented paragraph, also across
    blank lines and indented lines). One pass, carrying both answers forward.
    """
    held = [False] * len(lines)
    for token in tokens:
        if token.level == 0 and token.type in _CONTAINERS and token.map:
            for i in range(token.map[0], min(token.map[1], len(lines))):
                held[i] = bool(lines[i].strip(" \t"))
    under: list[bool] = []
    plain = indented = False  # the answer for a paragraph of each kind starting here
    for i, line in enumerate(lines):
        under.append(indented if line[:1] in (" ", "\t") else plain)
        if held[i]:
            plain = indented = True
        elif not line.strip(" \t"):
            plain = False  # a blank line ends a lazy continuation
        elif line[:1] not in (" ", "\t"):
            indented = False  # an unindented line ends a list item
    return under


def _feed_inline_html(html: _OpenElements, children: Sequence[Token]) -> None:
    for child in children:
        if child.type == "html_inline":
            html.feed_piece(child.content, inline=True)


def _plain_lines(children: Sequence[Token], html: _OpenElements) -> list[tuple[int, str, bool]]:
    """Return each rendered line that is one bare verb: its line, its text, if HTML hides it.

    A rendered line is what lies between two line breaks. Only a line made of a single
    text token, outside every link, emphasis or strikethrough, is plain; the caller
    checks it against the source line it came from.
    """
    plain: list[tuple[int, str, bool]] = []
    depth = 0
    line = 0
    run: list[Token] = []
    at_depth = 0

    def close() -> None:
        if len(run) == 1 and run[0].type == "text" and at_depth == 0 and line >= 0:
            text = run[0].content.strip(" \t")
            if text in VERB_LINES:
                plain.append((line, text, html.hiding))

    for child in children:
        if child.type in _BREAKS:
            close()
            # A break whose place was not noted (-1) cannot be matched to its source line.
            line, run, at_depth = int(child.meta.get("line", -1)), [], depth
            continue
        if child.type == "html_inline":
            html.feed_piece(child.content, inline=True)
        if not run:
            at_depth = depth
        run.append(child)
        depth += child.nesting
    close()
    return plain
