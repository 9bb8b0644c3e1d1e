"""Where the repository and the tests' own data are, wherever a test file stands."""

from __future__ import annotations

from pathlib import Path

TOP = Path(__file__).resolve().parents[2]
TESTS = TOP / "tests"
SAMPLES = TESTS / "samples"
