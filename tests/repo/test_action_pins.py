"""The project's own workflow pins: full SHAs with their version, on Node 24, kept by Dependabot.

GitHub's hosted runners dropped Node 20 actions in September 2026: each action Cujo's
workflows use is at a major that runs on Node 24 (checkout v5+, setup-python v6+,
upload-artifact v6+, as their release notes say).
"""

from __future__ import annotations

import re

import pytest
import yaml
from repo_paths import TOP

FILES = sorted([*(TOP / ".github" / "workflows").glob("*.yml"), TOP / "action.yml"])
# `uses: OWNER/REPO[/PATH]@SHA # vX[.Y[.Z]]`
PINNED = re.compile(
    r"uses: (?P<action>[\w.-]+/[\w.-]+)(?:/[\w./-]+)?@(?P<sha>[0-9a-f]{40}) # v(?P<major>\d+)"
    r"(?:\.\d+){0,2}$"
)
# The first major of each that runs on Node 24.
NODE_24 = {"actions/checkout": 5, "actions/setup-python": 6, "actions/upload-artifact": 6}


def uses_lines() -> list[tuple[str, str]]:
    """Return (file, line) for every `uses:` of another repository's action."""
    found = []
    for path in FILES:
        for line in path.read_text().splitlines():
            stripped = line.strip().removeprefix("- ")
            if stripped.startswith("uses:") and not stripped.startswith("uses: ./"):
                found.append((path.name, stripped))
    return found


def test_every_action_is_pinned_by_sha_with_its_version() -> None:
    lines = uses_lines()
    assert len(lines) >= 5
    for name, line in lines:
        assert PINNED.fullmatch(line), f"{name}: {line}"


@pytest.mark.parametrize(("action", "major"), sorted(NODE_24.items()))
def test_actions_run_on_node_24(action: str, major: int) -> None:
    seen = [PINNED.fullmatch(line) for _, line in uses_lines()]
    majors = [int(m["major"]) for m in seen if m and m["action"] == action]
    assert majors, f"{action} is not used"
    assert min(majors) >= major, f"{action} v{min(majors)} runs on Node 20: use v{major}+"


def test_dependabot_keeps_the_workflow_pins() -> None:
    config = yaml.safe_load((TOP / ".github" / "dependabot.yml").read_text())
    assert config["version"] == 2
    (actions,) = [u for u in config["updates"] if u["package-ecosystem"] == "github-actions"]
    # `/` covers .github/workflows/ and the root's action.yml.
    assert actions["directory"] == "/"
    assert actions["schedule"]["interval"] in ("daily", "weekly")
