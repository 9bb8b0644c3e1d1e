"""`make demo`'s review as an ordinary user: clean and blocked with ``isolation: full``.

What `make demo` runs after its set-up (examples/demo/run_demo.py), run as ``nobody``
with the harness installed where that account can run it (``unprivileged.py``); the
root version is tests/e2e/test_demo.py's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator

import pytest
import unprivileged
from repo_paths import TOP

REASON = unprivileged.why_not()
pytestmark = [pytest.mark.root, pytest.mark.skipif(REASON is not None, reason=f"{REASON}")]


@pytest.fixture(scope="module")
def user() -> Iterator[unprivileged.Account]:
    made = unprivileged.account()
    yield made
    made.close()


def test_as_an_ordinary_user_the_demo_is_clean_and_blocked_with_full_isolation(
    user: unprivileged.Account,
) -> None:
    demo = user.root / "demo"
    shutil.copytree(TOP / "examples" / "demo", demo)
    subprocess.run(["chmod", "-R", "a+rX", str(demo)], check=True)
    work = unprivileged.owned(user.root / "work")
    data = work / "data"
    done = subprocess.run(
        user.argv(user.python, str(demo / "run_demo.py")),
        env=user.env({"CUJO_DEMO_DATA": str(data), "CUJO_DEMO_BOARD": "0"}),
        cwd=work,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-4000:]
    assert "Demo: benign → clean, exfil → blocked" in done.stdout, said[-4000:]
    assert said.count("isolation full: bubblewrap, without root") == 2, said[-4000:]
    assert "isolation PARTIAL" not in said
    # Each record says so too: both reviews ran with full isolation, as the account.
    isolations = set()
    for report in data.glob("runs/*/tests.json"):
        isolations.add(json.loads(report.read_text())["isolation"])
    assert isolations == {"full"}, isolations  # (two runs, one tests report each)
