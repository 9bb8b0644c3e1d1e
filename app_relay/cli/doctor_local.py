"""`cujo doctor --local`: which isolation a review gets on this machine, why, and the fix.

The sandbox side knows (``python -m cujo_action isolation``, from the kernel's switches,
the tools and bubblewrap's version); this prints its answer in one or two lines. Exit 0
for full isolation, 1 for partial (a review here can then be at best unproven), 3 when
the answer could not be had.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

_ASK_TIMEOUT_S = 60


def local_lines(found: dict[str, Any]) -> tuple[int, list[str]]:
    """Return the exit code and the lines that say ``found`` (the sandbox's answer)."""
    isolation, how = found.get("isolation"), str(found.get("how", ""))
    if isolation == "full":
        by = "as root" if how == "root" else "without root (unprivileged user namespaces)"
        return 0, [f"ok    isolation: full, {by}: a review here can be clean"]
    if isolation != "partial":
        return 3, [f"FAIL  isolation unknown: the sandbox answered {found!r}"]
    lines = [
        f"FAIL  isolation: partial: {found.get('why') or 'no reason given'}; "
        "every review here ends unproven at best"
    ]
    if fix := found.get("fix"):
        lines.append(f"      fix: {fix}")
    return 1, lines


def doctor_local() -> int:
    """Ask the sandbox side which isolation this machine gives; print it with the fix."""
    try:
        done = subprocess.run(
            # -P: a `cujo_action/` in the working folder (a clone) is never the one asked.
            [sys.executable, "-P", "-m", "cujo_action", "isolation"],
            capture_output=True,
            text=True,
            timeout=_ASK_TIMEOUT_S,
            check=False,
        )
        found = json.loads(done.stdout)
        if not isinstance(found, dict):
            raise ValueError("not an object")
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        print(f"FAIL  isolation unknown: the sandbox could not be asked ({exc})", flush=True)
        return 3
    code, lines = local_lines(found)
    for line in lines:
        print(line, flush=True)
    return code
