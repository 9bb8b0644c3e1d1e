"""The real-project corpus script (`python -m bench.corpus`): its file, its rows, its table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import corpus
from bench.corpus import Case, CorpusError


def test_the_corpus_is_twenty_commits_of_fifteen_repositories() -> None:
    cases = corpus.load()
    assert len(cases) >= 20
    assert len({c.repo for c in cases}) >= 15
    assert len({(c.repo, c.commit) for c in cases}) == len(cases), "a case twice"
    npm = [c for c in cases if "npm" in c.setup]
    assert npm, "npm projects"
    assert len(npm) < len(cases), "Python projects"


SHA0 = "0" * 40


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "no [[case]] entries"),
        (
            '[[case]]\nrepo = "a"\ncommit = "' + SHA0 + '"\n',
            "number 1: repo must be OWNER/NAME",
        ),
        ('[[case]]\nrepo = "a/b"\ncommit = "abc"\n', "number 1: commit must be 40"),
        (
            '[[case]]\nrepo = "a/b"\ncommit = "' + SHA0 + '"\nsha = 1\n',
            "unknown key(s) ['sha']",
        ),
        ("[[case]\n", "corpus.toml: "),
    ],
)
def test_a_bad_corpus_file_names_the_entry_and_what_is_wrong(
    tmp_path: Path, text: str, said: str
) -> None:
    path = tmp_path / "corpus.toml"
    path.write_text(text)
    with pytest.raises(CorpusError) as err:
        corpus.load(path)
    assert said in str(err.value)
    assert str(path) in str(err.value)


def _verdict(state: str, tests: str, summary: str = "") -> dict[str, object]:
    return {
        "state": state,
        "checks": {
            "install": {"status": "ok", "summary": "installed"},
            "tests": {"status": tests, "summary": summary},
        },
        "unproven": ["the install failed"] if state == "unproven" else [],
    }


def test_rows_say_each_check_and_why_tests_are_not_ok_and_the_table_counts() -> None:
    a = Case("o/a", "a" * 40, "pip")
    b = Case("o/b", "b" * 40, "npm")
    rows = [
        corpus.row_of(a, _verdict("clean", "ok", "passes")),
        corpus.row_of(b, _verdict("unproven", "failed", "the test suite fails at head (exit 1)")),
        corpus.failed_row(Case("o/c", "c" * 40), "exit 2, no JSON verdict: boom"),
    ]
    assert rows[0].why == ""
    assert rows[1].why == "the test suite fails at head (exit 1)"
    assert rows[1].checks == {"install": "ok", "tests": "failed"}
    again = [corpus.Row.from_json(row.to_json()) for row in rows]
    assert again == rows
    text = corpus.table(again)
    assert "| o/a@aaaaaaa | clean | ok | ok |" in text
    assert "| o/c@ccccccc | no-verdict |" in text
    assert "boom" in text
    assert text.endswith("3 reviewed: 1 clean, 1 no-verdict, 1 unproven; tests ok on 1 of 3")


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def test_a_case_is_cloned_from_its_mirror_and_reviewed_from_its_parent(tmp_path: Path) -> None:
    mirror = tmp_path / "mirrors" / "own+proj" / "repo"
    mirror.mkdir(parents=True)
    _git(mirror, "init", "-q", "-b", "main")
    for n in (1, 2):
        (mirror / "f").write_text(str(n))
        _git(mirror, "add", "f")
        _git(mirror, "-c", "user.name=t", "-c", "user.email=t@t.test", "commit", "-qm", str(n))
    head = _git(mirror, "rev-parse", "HEAD")
    # A stand-in `cujo` that writes down how it was called and answers a verdict.
    said = tmp_path / "argv.json"
    fake = tmp_path / "cujo"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys, subprocess\n"
        f"open({str(said)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
        "repo = sys.argv[sys.argv.index('--repo') + 1]\n"
        "base = sys.argv[sys.argv.index('--base') + 1]\n"
        "sha = subprocess.run(['git', 'rev-parse', base], cwd=repo, capture_output=True,"
        " text=True).stdout.strip()\n"
        "print(json.dumps({'state': 'clean', 'base_sha': sha, 'checks': {}}))\n"
    )
    fake.chmod(0o755)
    case = Case("own/proj", head)
    row = corpus.review(case, tmp_path / "mirrors", tmp_path / "work", str(fake))
    assert row.state == "clean", row
    argv = json.loads(said.read_text())
    assert argv[argv.index("--head") + 1] == head
    assert argv[argv.index("--base") + 1] == f"{head}^"
    clone = Path(argv[argv.index("--repo") + 1])
    assert _git(clone, "rev-parse", f"{head}^") == _git(mirror, "rev-parse", "HEAD^")


def test_a_missing_mirror_names_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"own\+proj/repo and own/proj"):
        corpus.source_of(Case("own/proj", "0" * 40), tmp_path)
