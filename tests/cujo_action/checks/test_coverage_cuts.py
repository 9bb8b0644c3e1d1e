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
from cujo_action.checks.detonation import (
    LISTER,
    MAX_IMPORTS,
    MAX_OWN,
    Listed,
    import_order,
    parse_modules,
)
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
    found = parse_modules(listed[-OUTPUT_TAIL:])
    assert len(found.others) == MAX_IMPORTS
    assert found.total > MAX_IMPORTS
    assert found.others == sorted(found.others)


def test_a_listing_the_pull_request_could_have_forged_is_validated() -> None:
    said = {"own": ["me", "no way"], "names": ["ok", "not a name", 3, "os", "me"], "total": -1}
    assert parse_modules("CUJO-MODULES " + json.dumps(said)) == Listed(["me"], ["ok", "os"], 3, 1)
    assert parse_modules("CUJO-MODULES {broken") == Listed()
    assert parse_modules("CUJO-MODULES [1]") == Listed()
    assert parse_modules("nothing here") == Listed()


def test_changed_and_own_modules_are_all_imported_first_then_dependencies_to_a_cap() -> None:
    deps = [f"dep{n:02}" for n in range(40)]
    own = [f"aa{n:02}" for n in range(30)] + ["zproject"]
    listed = Listed(own=own, others=deps, total=71, own_total=31)
    kept, left_out, others_left = import_order(["zproject.payload"], listed)
    # A project of many modules: every one of its own is imported, none left out.
    assert kept[:32] == ["zproject.payload", *own]
    assert kept[32:] == deps[:MAX_IMPORTS]
    assert left_out == []
    assert others_left == 40 - MAX_IMPORTS
    # Past the own cap: those left out are named (the check is then unproven).
    many = [f"pkg.m{n:03}" for n in range(MAX_OWN + 3)]
    listed = Listed(own=["pkg"], others=deps, total=45, own_total=5)
    kept, left_out, _ = import_order(many, listed)
    assert kept[:MAX_OWN] == many[:MAX_OWN]
    assert left_out == [*many[MAX_OWN:], "pkg", "4 more of the project's own"]


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
