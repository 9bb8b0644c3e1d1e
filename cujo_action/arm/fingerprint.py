"""Compare what the fingerprint probe read inside the sandbox with a hosted runner's profile.

``runner_profile.json`` (beside this module) is a hosted ``ubuntu-24.04`` runner as
GitHub's ``actions/runner-images`` documentation describes it: for each field the probe
prints, the value or shape a runner shows, and where that comes from; its ``accepted``
list names each difference Cujo has today and why. ``fingerprint_probe.py`` is the probe,
run as a pull request's test. Pure, but for reading the two files beside it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cujo_action.arm.fingerprint_probe import MARKER, SHAPES

PROFILE_PATH = Path(__file__).with_name("runner_profile.json")
PROBE_PATH = Path(__file__).with_name("fingerprint_probe.py")
# Where the probe sits in a pull request's tree, and the test command that runs it.
PROBE_IN_REPO = "tests/fingerprint_probe.py"
PROBE_TEST = f"python {PROBE_IN_REPO} --network"


@dataclass(frozen=True)
class Difference:
    """One field where the sandbox does not read as a hosted runner."""

    field: str
    expected: str
    seen: Any
    accepted: str | None  # the profile's reason, or None: a difference nobody accepted

    def __str__(self) -> str:
        seen = json.dumps(self.seen)
        why = f"accepted: {self.accepted}" if self.accepted else "NOT ACCEPTED"
        return f"{self.field}: expected {self.expected}, seen {seen} ({why})"


def load_profile(path: Path = PROFILE_PATH) -> dict[str, Any]:
    """Return the runner profile kept in the repository."""
    profile = json.loads(path.read_text())
    assert isinstance(profile, dict)
    return profile


def _missing(seen: Any, wanted: Iterable[Any]) -> list[Any]:
    have = seen if isinstance(seen, list) else []
    return [w for w in wanted if w not in have]


def describe(rule: Mapping[str, Any]) -> str:
    """Return a rule as the line printing a difference shows it."""
    if "equals" in rule:
        return json.dumps(rule["equals"])
    if "at_least" in rule:
        return f">= {rule['at_least']}"
    if "one_of" in rule:
        return "one of " + json.dumps(rule["one_of"])
    if "includes" in rule:
        return "to include " + json.dumps(rule["includes"])
    if "excludes" in rule:
        return "none of " + json.dumps(rule["excludes"])
    if "none_contains" in rule:
        return f"no item containing {rule['none_contains']!r}"
    if "shapes" in rule:
        return "shapes " + json.dumps(rule["shapes"])
    raise ValueError(f"a profile rule of no known kind: {sorted(rule)}")


def _holds(rule: Mapping[str, Any], seen: Any) -> tuple[bool, Any]:
    """Return whether ``seen`` meets ``rule``, and what to show as seen when not."""
    if "equals" in rule:
        return seen == rule["equals"], seen
    if "at_least" in rule:
        ok = isinstance(seen, int | float) and not isinstance(seen, bool)
        return ok and seen >= rule["at_least"], seen
    if "one_of" in rule:
        return seen in rule["one_of"], seen
    if "includes" in rule:
        missing = _missing(seen, rule["includes"])
        return not missing and isinstance(seen, list), {"missing": missing}
    if "excludes" in rule:
        found = [x for x in rule["excludes"] if isinstance(seen, list) and x in seen]
        return not found and isinstance(seen, list), found
    if "none_contains" in rule:
        word = str(rule["none_contains"]).lower()
        found = [x for x in seen if word in str(x).lower()] if isinstance(seen, list) else seen
        return found == [], found
    if "shapes" in rule:
        have = shapes_of(seen)
        wrong = {k: have.get(k) for k, v in rule["shapes"].items() if have.get(k) != v}
        return not wrong, wrong
    raise ValueError(f"a profile rule of no known kind: {sorted(rule)}")


def shapes_of(seen: Any) -> dict[str, str]:
    """Return the probe's ``env.shapes`` (prefix -> rest of name -> letter) as name -> shape."""
    if not isinstance(seen, dict):
        return {}
    return {
        f"{prefix}{rest}": SHAPES.get(str(letter), str(letter))
        for prefix, names in seen.items()
        if isinstance(names, dict)
        for rest, letter in names.items()
    }


def accepted_reasons(profile: Mapping[str, Any]) -> dict[str, str]:
    """Return the profile's accepted differences: field -> reason."""
    return {str(a["field"]): str(a["reason"]) for a in profile.get("accepted", [])}


def differences(reading: Mapping[str, Any], profile: Mapping[str, Any]) -> list[Difference]:
    """Return each field of ``profile`` that ``reading`` does not meet, in profile order.

    A field the reading lacks (a read that failed, or the network reads not asked for)
    is a difference too: seen ``None``.
    """
    accepted = accepted_reasons(profile)
    found = []
    for name, rule in profile["fields"].items():
        source = rule.get("of", name)
        seen = reading.get(source)
        ok, shown = _holds(rule, seen) if source in reading else (False, None)
        if not ok:
            found.append(Difference(name, describe(rule), shown, accepted.get(name)))
    return found


def unexpected(found: Sequence[Difference]) -> list[Difference]:
    """Return the differences the profile does not accept."""
    return [d for d in found if d.accepted is None]


def stale(found: Sequence[Difference], profile: Mapping[str, Any]) -> list[str]:
    """Return accepted fields that no longer differ (the list can shrink by these)."""
    differing = {d.field for d in found}
    return [f for f in accepted_reasons(profile) if f not in differing]


def reading_from_output(text: str) -> dict[str, Any] | None:
    """Return the probe's reading from a command's output (its last marked line)."""
    for line in reversed(text.splitlines()):
        start = line.find(MARKER)
        if start < 0:
            continue
        try:
            found = json.loads(line[start + len(MARKER) :])
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return None


def reading_from_report(report: Mapping[str, Any]) -> dict[str, Any] | None:
    """Return the probe's reading from a check's report (its commands' output tails)."""
    for command in reversed(report.get("commands", [])):
        if found := reading_from_output(str(command.get("stdout_tail", ""))):
            return found
    return None


def project_files(probe_source: str) -> dict[str, str]:
    """Return a tiny Python project whose test command is the probe (with network reads)."""
    policy = {
        "timeouts": {"install": 120, "test": 120, "smoke": 60, "probes": 60},
        "install": "true",
        "test": PROBE_TEST,
        "smoke": "true",
    }
    return {
        "requirements.txt": "",
        "calc.py": "def add(a, b):\n    return a + b\n",
        PROBE_IN_REPO: probe_source,
        ".cujo.yml": json.dumps(policy) + "\n",
    }


def summary(found: Sequence[Difference], profile: Mapping[str, Any]) -> list[str]:
    """Return the lines that print a comparison: each difference, then the counts."""
    lines = [str(d) for d in found]
    bad = unexpected(found)
    lines.append(
        f"differences from the runner profile: {len(found)} total, "
        f"{len(found) - len(bad)} accepted, {len(bad)} unexpected"
    )
    if old := stale(found, profile):
        lines.append("accepted but no longer seen (remove from the profile): " + ", ".join(old))
    return lines
