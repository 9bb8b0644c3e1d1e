"""Review real merged commits of real projects as pull requests and print a table.

``python -m bench.corpus`` reads ``bench/corpus.toml`` (owner/name and a commit each),
clones each repository, and runs ``cujo review --repo CLONE --base COMMIT^ --head COMMIT
--json``: a benign change as its project merged it. Each row says the review's state,
every check's status, and why the tests check is not ``ok`` when it is not, so a
maintainer's question ("would this have held my merge?") is answered per project.

Repositories come from GitHub, or from ``--mirrors DIR`` holding one git directory per
repository as ``DIR/OWNER+NAME/repo`` (or a clone at ``DIR/OWNER/NAME``). Each row is
appended to ``--out`` (JSON lines) as soon as its review ends, so a crash or an interrupt
loses no finished review; ``--table FILE`` prints the table of such a file again.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus.toml"
REVIEW_TIMEOUT_S = 30 * 60
CHECKS = ("install", "tests", "base", "smoke", "detonation", "probes", "workflows")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_SHA = re.compile(r"^[0-9a-f]{40}$")


class CorpusError(ValueError):
    """The corpus file is not what this script reads; the message names where and why."""


@dataclass(frozen=True)
class Case:
    repo: str
    commit: str
    setup: str = ""

    @property
    def label(self) -> str:
        return f"{self.repo}@{self.commit[:7]}"


@dataclass
class Row:
    """One reviewed case: what the verdict said, check by check."""

    case: Case
    state: str
    checks: dict[str, str] = field(default_factory=dict)
    why: str = ""  # why the tests check is not ok, when it is not
    unproven: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> Row:
        data = json.loads(line)
        return cls(**{**data, "case": Case(**data["case"])})


def load(path: Path = CORPUS) -> list[Case]:
    """Read the corpus file; raise CorpusError naming the entry and the fix."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise CorpusError(f"{path}: {err}") from err
    entries = data.get("case")
    if not isinstance(entries, list) or not entries:
        raise CorpusError(f"{path}: no [[case]] entries (each needs repo and commit)")
    cases = []
    for number, entry in enumerate(entries, 1):
        where = f"{path}: [[case]] number {number}"
        if not isinstance(entry, dict):
            raise CorpusError(f"{where} is not a table")
        unknown = set(entry) - {"repo", "commit", "setup"}
        if unknown:
            raise CorpusError(f"{where}: unknown key(s) {sorted(unknown)}; use repo, commit, setup")
        repo, commit = entry.get("repo"), entry.get("commit")
        if not isinstance(repo, str) or not _REPO.match(repo):
            raise CorpusError(f"{where}: repo must be OWNER/NAME, got {repo!r}")
        if not isinstance(commit, str) or not _SHA.match(commit):
            raise CorpusError(f"{where}: commit must be 40 lowercase hex digits, got {commit!r}")
        cases.append(Case(repo, commit, str(entry.get("setup", ""))))
    return cases


def row_of(case: Case, verdict: Mapping[str, Any], seconds: float = 0.0) -> Row:
    """Read one ``cujo review --json`` verdict into a row."""
    checks = verdict.get("checks")
    statuses: dict[str, str] = {}
    why = ""
    if isinstance(checks, Mapping):
        for name, report in checks.items():
            if isinstance(report, Mapping):
                statuses[str(name)] = str(report.get("status", "?"))
        tests = checks.get("tests")
        if isinstance(tests, Mapping) and tests.get("status") != "ok":
            why = str(tests.get("summary", ""))
    unproven = [str(item) for item in verdict.get("unproven") or []]
    return Row(case, str(verdict.get("state", "?")), statuses, why, unproven, round(seconds, 1))


def failed_row(case: Case, reason: str, seconds: float = 0.0) -> Row:
    """A review that gave no verdict is a row of its own, never left out."""
    return Row(case, "no-verdict", {}, reason, [], round(seconds, 1))


def table(rows: Sequence[Row]) -> str:
    """Render rows as a Markdown table followed by the counts."""
    head = ["case", "state", *CHECKS, "why tests are not ok"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row.case.label, row.state, *(row.checks.get(c, "-") for c in CHECKS)]
        why = row.why or ("; ".join(row.unproven) if row.state == "unproven" else "")
        cells.append(why.replace("|", "\\|").replace("\n", " ")[:200])
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(summary(rows))
    return "\n".join(lines)


def summary(rows: Sequence[Row]) -> str:
    """Count the states and how often the tests check was ok."""
    states: dict[str, int] = {}
    for row in rows:
        states[row.state] = states.get(row.state, 0) + 1
    tests_ok = sum(1 for row in rows if row.checks.get("tests") == "ok")
    counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    return f"{len(rows)} reviewed: {counts}; tests ok on {tests_ok} of {len(rows)}"


def source_of(case: Case, mirrors: Path | None) -> str:
    """Return where to clone the case's repository from."""
    if mirrors is None:
        return f"https://github.com/{case.repo}.git"
    owner, name = case.repo.split("/")
    for candidate in (mirrors / f"{owner}+{name}" / "repo", mirrors / owner / name):
        if candidate.exists():
            return str(candidate)
    raise CorpusError(
        f"{case.repo}: not under {mirrors} (looked for {owner}+{name}/repo and {owner}/{name})"
    )


def review(case: Case, mirrors: Path | None, work: Path, cujo: str) -> Row:
    """Clone the case and review its commit against its parent; never raise for a review."""
    started = time.monotonic()
    clone = work / case.repo.replace("/", "+")
    if not clone.exists():
        subprocess.run(
            ["git", "clone", "--quiet", "--no-checkout", source_of(case, mirrors), str(clone)],
            check=True,
        )
    argv = [cujo, "review", "--repo", str(clone), "--base", f"{case.commit}^"]
    argv += ["--head", case.commit, "--json", "--data-dir", str(work / "data")]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=REVIEW_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return failed_row(
            case, f"no verdict within {REVIEW_TIMEOUT_S}s", time.monotonic() - started
        )
    seconds = time.monotonic() - started
    try:
        verdict = json.loads(done.stdout)
    except ValueError:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return failed_row(case, f"exit {done.returncode}, no JSON verdict: {tail}", seconds)
    if not isinstance(verdict, dict):
        return failed_row(case, f"exit {done.returncode}, the verdict is not an object", seconds)
    return row_of(case, verdict, seconds)


def pick(cases: Iterable[Case], only: Sequence[str]) -> list[Case]:
    return [c for c in cases if not only or any(o in c.label for o in only)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.corpus", description=__doc__)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--mirrors", type=Path, help="DIR with OWNER+NAME/repo git directories")
    parser.add_argument("--only", action="append", default=[], help="cases whose label has this")
    parser.add_argument("--out", type=Path, help="JSON lines, one per finished review")
    parser.add_argument("--table", type=Path, help="print the table of an --out file and stop")
    parser.add_argument("--cujo", default=shutil.which("cujo") or "cujo")
    args = parser.parse_args(argv)
    if args.table:
        rows = [Row.from_json(line) for line in args.table.read_text().splitlines() if line]
        print(table(rows))
        return 0
    try:
        cases = pick(load(args.corpus), args.only)
    except CorpusError as err:
        print(f"corpus: {err}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="cujo-corpus-"))
    out = args.out or work / "rows.jsonl"
    rows: list[Row] = []
    print(f"corpus: {len(cases)} cases; rows in {out}", file=sys.stderr)
    for number, case in enumerate(cases, 1):
        print(f"corpus: [{number}/{len(cases)}] {case.label} ...", file=sys.stderr, flush=True)
        try:
            row = review(case, args.mirrors, work, args.cujo)
        except (CorpusError, subprocess.CalledProcessError) as err:
            row = failed_row(case, f"not cloned: {err}")
        rows.append(row)
        with out.open("a", encoding="utf-8") as sink:
            sink.write(row.to_json() + "\n")
        why = f" ({row.why})" if row.why else ""
        print(f"corpus:   {row.state} in {row.seconds:.0f}s{why}", file=sys.stderr, flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
