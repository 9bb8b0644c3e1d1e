"""What detonation imports and what probes run are capped: past the cap, a cut says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bundlefactory import make_plan

from cujo_action.checks import probes
from cujo_action.checks.detonation import LISTER, MAX_IMPORTS, parse_modules
from cujo_action.evidence.reportfit import with_cut
from cujo_action.limits import LIMITS, OUTPUT_TAIL
from cujo_action.schema import MAX_CUTS


def test_the_lister_says_how_many_modules_it_found_on_a_line_the_tail_keeps() -> None:
    # This very venv has far more than MAX_IMPORTS top-level modules installed.
    listed = subprocess.run(
        [sys.executable, "-c", LISTER, "[]"], capture_output=True, text=True, check=True
    ).stdout
    (line,) = [ln for ln in listed.splitlines() if ln.startswith("CUJO-MODULES ")]
    assert len(line) < OUTPUT_TAIL
    names, found = parse_modules(listed[-OUTPUT_TAIL:])
    assert len(names) == MAX_IMPORTS
    assert found > MAX_IMPORTS
    assert names == sorted(names)


def test_a_listing_the_pull_request_could_have_forged_is_validated() -> None:
    said = {"names": ["ok", "not a name", 3, "os"], "total": -1}
    assert parse_modules("CUJO-MODULES " + json.dumps(said)) == (["ok", "os"], 2)
    assert parse_modules("CUJO-MODULES {broken") == ([], 0)
    assert parse_modules("nothing here") == ([], 0)


class _Run:
    """What probes.body asks of a check run, recording what it is told."""

    def __init__(self, head: Path, changed: list[str]) -> None:
        self.plan = make_plan(
            run_id="r", base_sha="b" * 40, head_sha="a" * 40, head_dir=str(head),
            changed_files=changed,
        )  # fmt: skip
        self.venv, self.src = "/venv", "/src"
        self.cuts: list[dict[str, Any]] = []
        self.ran: list[str] = []

    def cut(self, limit: str, **said: Any) -> str:
        self.cuts.append({"limit": limit, **said})
        return "probes:cut:1"

    def receive_install(self) -> None:
        pass

    def observe(self, *args: Any, **kwargs: Any) -> str:
        return "probes:obs:1"

    def run(self, cmd: str, **kwargs: Any) -> SimpleNamespace:
        self.ran.append(cmd)
        return SimpleNamespace(exit_code=0)

    def finish(self, status: str, summary: str) -> tuple[str, str]:
        return status, summary


def test_probes_past_the_cap_are_not_run_and_the_cut_says_how_many(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    changed = [f"pkg/m{n:02}.py" for n in range(probes.MAX_PROBES + 7)]
    for rel in changed:
        (tmp_path / rel).write_text("")
    run = _Run(tmp_path, changed)

    status, _ = probes.body(run)  # type: ignore[arg-type]

    assert status == "ok"
    assert len(run.ran) == probes.MAX_PROBES
    (cut,) = run.cuts
    assert cut["limit"] == "probe-count"
    assert (cut["dropped"], cut["kept"]) == (7, probes.MAX_PROBES)
    assert not LIMITS["probe-count"].hides_danger  # coverage named, not a hole in evidence


def test_a_cut_past_the_cap_of_cuts_replaces_the_last_and_keeps_it_hiding() -> None:
    cuts = with_cut([], "tests", "report-commands", dropped=1)
    assert cuts[0].id == "tests:cut:1"
    assert not cuts[0].hides_danger  # the limit's own
    for _ in range(MAX_CUTS - 2):
        cuts = with_cut(cuts, "tests", "report-commands", dropped=1)
    cuts = with_cut(cuts, "tests", "persistence-walk", dropped=9)
    assert len(cuts) == MAX_CUTS
    cuts = with_cut(cuts, "tests", "refused-packets", dropped=2)
    # Full: the newest limit is named in the last slot, which still says it hides danger.
    assert len(cuts) == MAX_CUTS
    assert (cuts[-1].id, cuts[-1].limit) == (f"tests:cut:{MAX_CUTS}", "refused-packets")
    assert cuts[-1].hides_danger
