"""The `/cujo` verbs: which lines count.

The expected verbs in the table are written by hand from the CommonMark spec and GitHub's
rendering. A second, outside oracle is cmark-gfm, GitHub's own Markdown library: every verb
``parse_verbs`` returns must be a line GitHub renders as plain text in a top-level
paragraph (never more, and in the same order; fewer is the safe side).
"""

from __future__ import annotations

import random
import sys
import time
from html.parser import HTMLParser

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options

from app_relay.verbs.parse import MAX_BODY, Verb, parse_verbs

D, R = Verb.DISMISS, Verb.REINSTATE
FENCE3, FENCE4 = "```", "````"

# (why, comment body, the verbs a maintainer meant)
CASES: list[tuple[str, str, list[Verb]]] = [
    # -- plain lines --
    ("alone", "/cujo dismiss", [D]),
    ("alone, reinstate", "/cujo reinstate", [R]),
    ("trailing newline", "/cujo dismiss\n", [D]),
    ("among sentences", "Looked at it.\n/cujo dismiss\nThanks!", [D]),
    ("own paragraph", "Looked at it.\n\n/cujo dismiss\n\nThanks!", [D]),
    ("leading spaces", "   /cujo dismiss", [D]),
    ("trailing spaces (a hard break)", "/cujo dismiss   \nok", [D]),
    ("trailing tab", "/cujo dismiss\t\nok", [D]),
    ("tab-indented continuation line", "ok\n\t/cujo dismiss", [D]),
    ("deeply indented continuation", "ok\n        /cujo dismiss", [D]),
    ("CRLF", "ok\r\n/cujo dismiss\r\nthanks\r\n", [D]),
    ("lone CR line endings", "ok\r/cujo dismiss\r", [D]),
    ("trailing CR", "/cujo reinstate\r", [R]),
    ("both, in order", "/cujo reinstate\n\n/cujo dismiss", [R, D]),
    ("the same verb twice", "/cujo dismiss\n/cujo dismiss", [D, D]),
    ("after a backslash hard break", "ok\\\n/cujo dismiss", [D]),
    ("after a code span over two lines", "`a\nb`\n/cujo dismiss", [D]),
    ("after a link title over two lines", '[a](/u "t\nu")\n/cujo dismiss', [D]),
    ("after a closed HTML comment line", "<!-- note -->\n/cujo dismiss", [D]),
    ("after a closed details", "<details>\n\nhidden\n\n</details>\n\n/cujo dismiss", [D]),
    ("after a closed fence", f"{FENCE3}\ncode\n{FENCE3}\n/cujo dismiss", [D]),
    # -- not exactly the verb --
    ("in a sentence", "Please /cujo dismiss this", []),
    ("verb then words", "/cujo dismiss now", []),
    ("upper case", "/CUJO DISMISS", []),
    ("capitalised", "/Cujo dismiss", []),
    ("two spaces inside", "/cujo  dismiss", []),
    ("tab inside", "/cujo\tdismiss", []),
    ("no slash", "cujo dismiss", []),
    ("other verb", "/cujo approve", []),
    ("trailing period", "/cujo dismiss.", []),
    ("zero-width space inside", "/cujo\u200b dismiss", []),
    ("zero-width space after", "/cujo dismiss\u200b", []),
    ("zero-width joiner before", "\u200d/cujo dismiss", []),
    ("BOM before", "\ufeff/cujo dismiss", []),
    ("no-break space after", "/cujo dismiss\u00a0", []),
    ("no-break space inside", "/cujo\u00a0dismiss", []),
    ("ideographic space before", "\u3000/cujo dismiss", []),
    ("Cyrillic o", "/cuj\u043e dismiss", []),
    ("Cyrillic s", "/cujo di\u0455miss", []),
    ("fullwidth solidus", "\uff0fcujo dismiss", []),
    ("division slash", "\u2215cujo dismiss", []),
    ("soft hyphen", "/cujo dis\u00admiss", []),
    ("right-to-left override", "\u202e/cujo dismiss", []),
    ("backslash-escaped slash", "\\/cujo dismiss", []),
    ("entity slash", "&#47;cujo dismiss", []),
    ("entity letter", "/cujo dism&#105;ss", []),
    ("entity space", "/cujo&#32;dismiss", []),
    ("ends in a backslash break", "/cujo dismiss\\\nok", []),
    ("bold", "**/cujo dismiss**", []),
    ("emphasis", "*/cujo dismiss*", []),
    ("strikethrough", "~~/cujo dismiss~~", []),
    ("inline code", "`/cujo dismiss`", []),
    ("a link", "[/cujo dismiss](https://example.com)", []),
    ("an autolink", "<https://example.com/cujo dismiss>", []),
    ("comment after", "/cujo dismiss <!-- x -->", []),
    ("comment before", "<!-- x --> /cujo dismiss", []),
    ("tag after", "/cujo dismiss<br>", []),
    # -- code --
    ("backtick fence", f"{FENCE3}\n/cujo dismiss\n{FENCE3}", []),
    ("tilde fence", "~~~\n/cujo dismiss\n~~~", []),
    ("long backtick fence", f"{FENCE4}\n{FENCE3}\n/cujo dismiss\n{FENCE3}\n{FENCE4}", []),
    ("long tilde fence, short close", "~~~~~\n/cujo dismiss\n~~~\n/cujo reinstate\n~~~~~", []),
    ("fence with info", f"{FENCE3}text\n/cujo dismiss\n{FENCE3}", []),
    ("indented fence", f"   {FENCE3}\n/cujo dismiss\n   {FENCE3}", []),
    ("unclosed backtick fence", f"ok\n{FENCE3}\n\n/cujo dismiss", []),
    ("unclosed tilde fence", "~~~\n/cujo dismiss\n\nmore\n", []),
    ("tilde close cannot end backticks", f"{FENCE3}\n~~~\n/cujo dismiss", []),
    ("indented code", "ok\n\n    /cujo dismiss", []),
    ("tab-indented code", "\t/cujo dismiss", []),
    ("indented code first", "    /cujo dismiss\nok", []),
    ("inline code over three lines", "`a\n/cujo dismiss\n`", []),
    ("math block", "$$\n/cujo dismiss\n$$", []),
    ("inline math around", "$x\n/cujo dismiss\n$", []),
    # -- quotes --
    ("quote", "> /cujo dismiss", []),
    ("quote, no space", ">/cujo dismiss", []),
    ("nested quote", "> > /cujo dismiss", []),
    ("deeply nested quote", "> > > > /cujo dismiss", []),
    ("lazy quote continuation", "> a quote\n/cujo dismiss", []),
    ("lazy nested continuation", "> > a quote\n/cujo dismiss", []),
    ("alert", "> [!NOTE]\n> /cujo dismiss", []),
    ("quote, then a verb after a blank line", "> quoted\n\n/cujo dismiss", [D]),
    # -- HTML --
    ("HTML comment", "<!-- /cujo dismiss -->", []),
    ("HTML comment over lines", "<!--\n/cujo dismiss\n-->", []),
    ("HTML comment with blank lines", "<!--\n\n/cujo dismiss\n\n-->", []),
    ("HTML comment never closed", "<!--\n\n/cujo dismiss", []),
    ("inline comment over lines", "ok <!--\n/cujo dismiss\n-->", []),
    ("details, no blank line", "<details>\n/cujo dismiss\n</details>", []),
    (
        "details with blank lines",
        "<details><summary>why</summary>\n\n/cujo dismiss\n\n</details>",
        [],
    ),
    ("details never closed", "<details>\n\n/cujo dismiss", []),
    ("div", "<div>\n\n/cujo dismiss\n\n</div>", []),
    ("inline span around", "ok <span>\n/cujo dismiss\n</span>", []),
    ("HTML attribute", '<a title="\n/cujo dismiss\n">x</a>', []),
    ("script block", "<script>\n/cujo dismiss\n</script>", []),
    ("processing instruction", "<?\n/cujo dismiss\n?>", []),
    ("CDATA", "<![CDATA[\n/cujo dismiss\n]]>", []),
    ("self-closed details still opens", "<details/>\n\n/cujo dismiss", []),
    ("self-closed br hides nothing", "<br/>\n\n/cujo dismiss", [D]),
    ("raw <p> inside a paragraph", "ok <p></p>\n/cujo dismiss", []),
    ("a stray </p>", "ok</p>\n/cujo dismiss", []),
    ("unclosed processing instruction", "- <?\n\n/cujo dismiss", []),
    ("unclosed comment after a closed one", "<!-- x --><!--\n/cujo dismiss", []),
    ("script hides nothing on GitHub", "<script>\n<details>\n</script>\n\n/cujo dismiss", []),
    # -- where markdown-it and GitHub's parser part ways --
    ("quoted definition, lazy line", "> [a]: /u\n/cujo dismiss", []),
    ("listed footnote, lazy line", "- a\n- [^1]: x\n/cujo dismiss", []),
    ("definition, indented line", "[a]: /u\n    x <a href='u'>\n/cujo dismiss", []),
    ("empty item, spaces, indented line", "+ \n    \n  /cujo dismiss", []),
    ("nested quote, lazy lines", "> > a\nb\n\tc\n/cujo dismiss", []),
    ("table rows without pipes", "a\n:-:\n/cujo dismiss", []),
    ("setext under a pipe line", "/cujo dismiss\n| a |\n---", []),
    ("a list, a blank line, a verb", "- a\n\n/cujo dismiss", [D]),
    # -- lists, headings, tables, footnotes, links --
    ("bullet", "- /cujo dismiss", []),
    ("star bullet", "* /cujo dismiss", []),
    ("ordered", "1. /cujo dismiss", []),
    ("task", "- [ ] /cujo dismiss", []),
    ("item continuation", "- item\n  /cujo dismiss", []),
    ("lazy item continuation", "- item\n/cujo dismiss", []),
    ("item paragraph", "- item\n\n  /cujo dismiss", []),
    ("ATX heading", "# /cujo dismiss", []),
    ("ATX heading 3", "### /cujo dismiss", []),
    ("setext heading =", "/cujo dismiss\n===", []),
    ("setext heading -", "/cujo dismiss\n---", []),
    ("setext heading, paragraph above", "ok\n/cujo dismiss\n---", []),
    ("table header", "/cujo dismiss\n|---|", []),
    ("table header after a line", "ok\n/cujo dismiss\n|:-:|", []),
    ("table cell", "| a |\n|---|\n| /cujo dismiss |", []),
    ("footnote text", "See[^1].\n\n[^1]: note\n/cujo dismiss", []),
    ("footnote on the next line", "See[^1].\n\n[^1]:\n/cujo dismiss", []),
    ("link text over lines", "[\n/cujo dismiss\n](https://example.com)", []),
    ("emphasis over lines", "*a\n/cujo dismiss\nb*", []),
    ("strong over lines", "**a\n/cujo dismiss\nb**", []),
    ("strikethrough over lines", "~~a\n/cujo dismiss\nb~~", []),
    ("link reference label", "[a\n/cujo dismiss\nb]\n\n[a /cujo dismiss b]: /u", []),
    # -- a mix --
    (
        "only the visible one",
        f"> /cujo dismiss\n\n{FENCE3}\n/cujo reinstate\n{FENCE3}\n\n<!-- /cujo dismiss -->\n\n"
        "/cujo reinstate",
        [R],
    ),
    ("empty", "", []),
    ("blank", "  \n\t\n", []),
]


@pytest.mark.parametrize(("body", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_parse_verbs(body: str, expected: list[Verb]) -> None:
    assert parse_verbs(body) == expected


@pytest.mark.parametrize(("body", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_verb_found_is_a_plain_line_on_github(body: str, expected: list[Verb]) -> None:
    assert is_subsequence(parse_verbs(body), github_verbs(body))


def test_the_cases_agree_with_github_where_github_has_no_extra_syntax() -> None:
    # The oracle is checked too. Where the source is plain ASCII without math, escapes,
    # entities, HTML or footnotes (which Cujo reads more strictly than GitHub renders),
    # it finds exactly the hand-written verbs.
    for why, body, expected in CASES:
        if not body.isascii() or any(c in body for c in "$\\&<") or "[^" in body:
            continue
        assert github_verbs(body) == expected, why


def test_verbs_a_reader_cannot_see_never_count_in_random_comments() -> None:
    # Comments built at random from the pieces where CommonMark readers part ways: every
    # verb found must be a plain paragraph line in GitHub's own rendering.
    pieces = [
        "/cujo dismiss", "/cujo reinstate", "  /cujo dismiss  ", "/cujo dismiss\t", "", "",
        "text", "> ", "> > ", "> /cujo dismiss", "```", "~~~", "````", "    ", "\t", "  - ",
        "- ", "+ ", "1. ", "1) ", "# ", "---", "===", "***", "___", "=", "-", "|", ":",
        "|---|", "| a |", ":-:", "[a]: /u", "[a]:", "[a]: /u 't'", "'t'", "(", ")", "[",
        "]", "](u)", "`", "`` ", "**", "*", "_", "~~", "\\", "\"", "$", "$$", "[^1]: x",
        "<", ">", "<details>", "</details>", "<div>", "</div>", "<p>", "</p>", "<pre>",
        "</pre>", "<span>", "</span>", "<a href='x'>", "</a>", "<br>", "<script>",
        "</script>", '<x y="', "<!--", "-->", "<!---->", "<!-- x -->", "<?", "?>",
        "<![CDATA[", "]]>", "<https://x>", "&#47;cujo dismiss", "\u200b",
    ]  # fmt: skip
    rng = random.Random(20260115)
    for _ in range(2000):
        lines = [
            "".join(rng.choice(pieces) for _ in range(rng.randint(1, 3)))
            for _ in range(rng.randint(1, 8))
        ]
        body = rng.choice(["\n", "\r\n"]).join(lines)
        assert is_subsequence(parse_verbs(body), github_verbs(body)), body


def test_a_body_longer_than_github_allows_is_no_command() -> None:
    assert parse_verbs("/cujo dismiss\n" + "x" * MAX_BODY) == []


# Each body is ``head + unit * count + tail``: how the parser's work grows with ``count``.
@pytest.mark.parametrize(
    ("head", "unit", "count", "tail"),
    [
        ("/cujo dismiss\n", "a\n", 30_000, ""),
        ("/cujo dismiss\n", "a\n---\n", 20_000, ""),
        ("/cujo dismiss\n", "a\n|-|\n", 20_000, ""),
        ("x\n\n", "  /cujo dismiss\n\n", 5_000, ""),
        ("", "`a\n", 15_000, "/cujo dismiss"),
        ("", "[a](", 15_000, "\n/cujo dismiss"),
        ("", "a <!-- x -->\n", 5_000, "/cujo dismiss"),
    ],
    ids=["lines", "headings", "tables", "indented", "backticks", "links", "comments"],
)
def test_a_comment_as_long_as_github_allows_is_read_in_linear_time(
    head: str, unit: str, count: int, tail: str
) -> None:
    # Anyone may comment on a public pull request: no comment may make the relay crawl.
    # Counted, not timed: the Python calls parsing makes grow with the comment, so four
    # times the comment costs about four times the calls (a quadratic parser: sixteen).
    def calls(n: int) -> int:
        made = 0

        def count_call(_frame: object, event: str, _arg: object) -> None:
            nonlocal made
            made += event == "call"

        body = (head + unit * n)[: MAX_BODY - len(tail)] + tail
        sys.setprofile(count_call)
        try:
            parse_verbs(body)
        finally:
            sys.setprofile(None)
        return made

    quarter, whole = calls(count // 4), calls(count)
    assert quarter > 1_000  # the parser really read the comment, not a shortcut
    assert whole <= 5 * quarter
    # And a backstop for work no Python call shows (a regex in C): minutes, not seconds.
    started = time.perf_counter()
    parse_verbs((head + unit * count)[: MAX_BODY - len(tail)] + tail)
    assert time.perf_counter() - started < 30.0


# ---- the outside oracle: GitHub's cmark-gfm -------------------------------------------


class _TopParagraphLines(HTMLParser):
    """Collect the lines of top-level <p> elements that hold nothing but text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.in_top_p = False
        self.line: list[str] = []
        self.plain = True
        self.lines: list[str] = []

    def _end_line(self) -> None:
        if self.plain:
            self.lines.append("".join(self.line).strip("\n"))
        self.line, self.plain = [], True

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "p" and not self.stack:
            self.in_top_p = True
        elif tag == "br" and self.in_top_p and self.stack == ["p"]:
            self._end_line()
            return
        elif self.in_top_p:
            self.plain = False
        if tag not in ("br", "hr", "img", "input"):
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "br" and self.in_top_p and self.stack == ["p"]:
            self._end_line()
        elif self.in_top_p:
            self.plain = False

    def handle_endtag(self, tag: str) -> None:
        if tag == "p" and self.in_top_p:
            # A browser's </p> closes whatever is still open inside the paragraph.
            self._end_line()
            self.in_top_p = False
            self.stack = []
            return
        if self.in_top_p:
            self.plain = False
        if tag in self.stack:
            while self.stack and self.stack.pop() != tag:
                pass

    def handle_data(self, data: str) -> None:
        if self.in_top_p:
            self.line.append(data)

    def handle_comment(self, data: str) -> None:
        if self.in_top_p:
            self.plain = False


def github_verbs(body: str) -> list[Verb]:
    """Return the verbs GitHub's renderer shows as whole plain lines of top-level paragraphs."""
    # GitHub renders a comment's newlines as line breaks, and keeps (then sanitizes) HTML.
    options = Options.CMARK_OPT_HARDBREAKS | Options.CMARK_OPT_UNSAFE | Options.CMARK_OPT_FOOTNOTES
    html = cmarkgfm.github_flavored_markdown_to_html(body, options=options)
    reader = _TopParagraphLines()
    reader.feed(html)
    reader.close()
    return [Verb(line.removeprefix("/cujo ")) for line in reader.lines if line in VERB_TEXTS]


VERB_TEXTS = {"/cujo dismiss", "/cujo reinstate"}


def is_subsequence(small: list[Verb], big: list[Verb]) -> bool:
    """Say whether ``small`` is ``big`` with some items left out."""
    rest = iter(big)
    return all(any(item == other for other in rest) for item in small)
