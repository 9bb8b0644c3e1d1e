"""The `/cujo` verbs: which lines count, who may use them, and what applying does.

The expected verbs in the table are written by hand from the CommonMark spec and GitHub's
rendering. A second, outside oracle is cmark-gfm, GitHub's own Markdown library: every verb
``parse_verbs`` returns must be a line GitHub renders as plain text in a top-level
paragraph (never more, and in the same order; fewer is the safe side).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options

from app_relay.runs.state import RunState
from app_relay.verbs.parse import (
    MAX_BODY,
    Change,
    Decision,
    Verb,
    change_for,
    decide,
    dismissal_message,
    parse_verbs,
    reaction,
    refusal_reply,
)

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


@pytest.mark.parametrize(
    "body",
    [
        "/cujo dismiss\n" + "a\n" * 30_000,
        "/cujo dismiss\n" + "a\n---\n" * 20_000,
        "/cujo dismiss\n" + "a\n|-|\n" * 20_000,
        "x\n\n" + "  /cujo dismiss\n\n" * 5_000,
        "`a\n" * 15_000 + "/cujo dismiss",
        "[a](" * 15_000 + "\n/cujo dismiss",
        "a <!-- x -->\n" * 5_000 + "/cujo dismiss",
    ],
    ids=["lines", "headings", "tables", "indented", "backticks", "links", "comments"],
)
def test_a_comment_as_long_as_github_allows_is_read_in_linear_time(body: str) -> None:
    # Anyone may comment on a public pull request: no comment may make the relay crawl.
    started = time.perf_counter()
    parse_verbs(body[:MAX_BODY])
    assert time.perf_counter() - started < 3.0


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


# ---- who may --------------------------------------------------------------------------


class Reader:
    """A permission reader that counts its calls."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        return self.answer


def ask(
    verbs: list[Verb],
    reader: Callable[[], str],
    *,
    event: str = "issue_comment",
    action: str = "created",
    is_pull_request: bool = True,
    login: str = "maria",
    kind: str = "User",
    author: str = "alice",
) -> Decision:
    return decide(
        verbs,
        event=event,
        action=action,
        is_pull_request=is_pull_request,
        commenter_login=login,
        commenter_type=kind,
        pr_author=author,
        permission_reader=reader,
    )


@pytest.mark.parametrize("permission", ["admin", "maintain", "write"])
def test_write_access_may_use_either_verb(permission: str) -> None:
    for verb in Verb:
        reader = Reader(permission)
        decision = ask([verb], reader)
        assert decision == Decision("allowed", verb, permission=permission)
        assert reader.calls == 1


@pytest.mark.parametrize("permission", ["triage", "read", "none"])
def test_less_than_write_is_refused_after_reading(permission: str) -> None:
    reader = Reader(permission)
    decision = ask([D], reader)
    assert (decision.outcome, decision.verb, decision.permission) == ("refused", D, permission)
    assert f"your access is {permission}" in decision.reason
    assert reader.calls == 1


@pytest.mark.parametrize("permission", ["", "Admin", "owner", "custom-role", "WRITE"])
def test_an_unknown_permission_fails_closed(permission: str) -> None:
    decision = ask([D], Reader(permission))
    assert decision.outcome == "refused"
    assert decision.permission is None
    assert "does not know" in decision.reason


@pytest.mark.parametrize(
    ("event", "action", "is_pull_request"),
    [
        ("issue_comment", "edited", True),
        ("issue_comment", "deleted", True),
        ("issue_comment", "created", False),
        ("pull_request_review_comment", "created", True),
        ("pull_request_review", "submitted", True),
    ],
)
def test_only_a_new_comment_on_a_pull_request_is_a_command(
    event: str, action: str, is_pull_request: bool
) -> None:
    reader = Reader("admin")
    decision = ask([D], reader, event=event, action=action, is_pull_request=is_pull_request)
    assert decision == Decision("ignored")
    assert reader.calls == 0


def test_a_comment_without_a_verb_is_no_command_and_says_nothing() -> None:
    reader = Reader("admin")
    assert ask([], reader, kind="Bot") == Decision("ignored")
    assert reader.calls == 0


def test_two_verb_lines_are_ambiguous_before_anything_is_read() -> None:
    reader = Reader("admin")
    for verbs in ([D, R], [D, D], [R, D, R]):
        decision = ask(verbs, reader)
        assert (decision.outcome, decision.verb) == ("refused", None)
        assert "more than one command" in decision.reason
    assert reader.calls == 0


def test_a_bot_with_admin_rights_is_refused_without_reading_a_permission() -> None:
    reader = Reader("admin")
    for verb in Verb:
        decision = ask([verb], reader, login="helper[bot]", kind="Bot")
        assert decision == Decision(
            "refused", verb, "Commands from bot accounts are never applied."
        )
    # The type decides, whatever the name; a [bot] name decides too, whatever the type.
    assert ask([D], reader, login="renovate", kind="Bot").outcome == "refused"
    assert ask([D], reader, login="renovate[bot]", kind="User").outcome == "refused"
    assert reader.calls == 0


@pytest.mark.parametrize("kind", ["Organization", "Mannequin", "", "user"])
def test_an_account_that_is_not_a_user_is_refused_without_reading(kind: str) -> None:
    reader = Reader("admin")
    assert ask([D], reader, kind=kind).outcome == "refused"
    assert reader.calls == 0


def test_a_bot_is_refused_before_the_author_rule() -> None:
    decision = ask([D], Reader("admin"), login="alice[bot]", kind="Bot", author="alice[bot]")
    assert "bot" in decision.reason


def test_the_author_may_not_dismiss_even_as_admin_and_nothing_is_read() -> None:
    reader = Reader("admin")
    for login in ("alice", "Alice", "ALICE"):
        decision = ask([D], reader, login=login, author="alice")
        assert decision == Decision(
            "refused", D, "The pull request's author may not dismiss its block."
        )
    assert reader.calls == 0


def test_the_author_with_write_access_may_reinstate() -> None:
    # DESIGN section 8 refuses only `dismiss` by the author: putting a block back is safe.
    reader = Reader("write")
    assert ask([R], reader, login="alice", author="alice") == Decision(
        "allowed", R, permission="write"
    )
    assert reader.calls == 1


def test_the_author_without_write_access_may_not_reinstate() -> None:
    assert ask([R], Reader("read"), login="alice", author="alice").outcome == "refused"


def test_the_permission_is_read_at_every_command() -> None:
    answers = iter(["write", "read"])
    assert ask([D], lambda: next(answers)).outcome == "allowed"
    assert ask([D], lambda: next(answers)).outcome == "refused"


def test_a_reader_that_fails_propagates() -> None:
    def broken() -> str:
        raise TimeoutError("GitHub did not answer")

    with pytest.raises(TimeoutError):
        ask([D], broken)


# ---- what applying does ---------------------------------------------------------------

HEAD = "a" * 40
OTHER = "b" * 40
T0 = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


def apply(
    verb: Verb,
    state: RunState,
    *,
    held: bool = True,
    dismissed_from: RunState | None = None,
    run_head: str = HEAD,
    pr_head: str = HEAD,
    posted_at: datetime | None = T0,
    commented_at: datetime = T0 + timedelta(minutes=5),
) -> Change:
    return change_for(
        verb,
        state=state,
        held=held,
        dismissed_from=dismissed_from,
        run_head_sha=run_head,
        pr_head_sha=pr_head,
        posted_at=posted_at,
        comment_created_at=commented_at,
    )


def test_dismiss_lifts_a_block_by_dismissing_its_review() -> None:
    assert apply(D, "blocked") == Change(True, to_state="dismissed", review="dismiss")


@pytest.mark.parametrize("state", ["unproven", "error"])
def test_dismiss_lifts_a_hold_with_the_check_alone(state: RunState) -> None:
    assert apply(D, state) == Change(True, to_state="dismissed", review="none")


@pytest.mark.parametrize("state", ["unproven", "error"])
def test_a_hold_that_passes_has_nothing_to_lift(state: RunState) -> None:
    change = apply(D, state, held=False)
    assert not change.applies
    assert "nothing to lift" in change.reason
    assert "does not hold" in change.reason


def test_reinstate_puts_a_dismissed_block_back_with_a_new_blocking_review() -> None:
    assert apply(R, "dismissed", dismissed_from="blocked") == Change(
        True, to_state="blocked", review="block"
    )


@pytest.mark.parametrize("state", ["unproven", "error"])
def test_reinstate_puts_a_dismissed_hold_back(state: RunState) -> None:
    assert apply(R, "dismissed", dismissed_from=state) == Change(
        True, to_state=state, review="none"
    )


def test_reinstate_of_a_dismissal_cujo_cannot_place_is_refused() -> None:
    for source in (None, "clean", "running"):
        change = apply(R, "dismissed", dismissed_from=source)  # type: ignore[arg-type]
        assert not change.applies
        assert "does not know" in change.reason


@pytest.mark.parametrize(
    ("verb", "state", "why"),
    [
        (D, "clean", "clean"),
        (D, "running", "still running"),
        (D, "waiting", "waiting"),
        (D, "superseded", "superseded"),
        (D, "dismissed", "already dismissed"),
        (R, "blocked", "never dismissed"),
        (R, "clean", "clean"),
        (R, "running", "still running"),
        (R, "waiting", "waiting"),
        (R, "superseded", "superseded"),
        (R, "unproven", "unproven"),
        (R, "error", "error"),
    ],
)
def test_nothing_to_lift_or_reinstate(verb: Verb, state: RunState, why: str) -> None:
    change = apply(verb, state)
    assert not change.applies
    assert change.to_state is None
    assert "nothing to" in change.reason
    assert why in change.reason


def test_a_command_for_a_commit_that_is_no_longer_the_head_is_refused_first() -> None:
    for verb, state in ((D, "blocked"), (R, "dismissed"), (D, "clean")):
        change = apply(verb, state, dismissed_from="blocked", pr_head=OTHER)  # type: ignore[arg-type]
        assert not change.applies
        assert "no longer the pull request's head" in change.reason
        assert OTHER[:12] in change.reason


@pytest.mark.parametrize("posted_at", [None, T0 + timedelta(minutes=5), T0 + timedelta(minutes=6)])
def test_a_verb_applies_only_to_a_verdict_posted_before_the_comment(
    posted_at: datetime | None,
) -> None:
    change = apply(D, "blocked", posted_at=posted_at)
    assert not change.applies
    assert "after this comment was written" in change.reason


# ---- what the relay writes ------------------------------------------------------------


def test_every_outcome_speaks() -> None:
    assert reaction(True) == "+1"
    assert reaction(False) == "confused"
    refused = ask([D], Reader("admin"), login="alice")
    assert refusal_reply(refused.verb, refused.reason) == (
        "`/cujo dismiss` was not applied. The pull request's author may not dismiss its block."
    )
    assert refusal_reply(None, "Two lines.").startswith("The command was not applied.")


def test_the_dismissal_names_who_without_a_mention() -> None:
    message = dismissal_message("maria", HEAD)
    assert "`maria`" in message
    assert "@" not in message
    assert HEAD[:12] in message
