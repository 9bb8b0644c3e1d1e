"""The module each check process runs as (``python -I -m``, or forked from the zygote)."""

from __future__ import annotations

from typing import Final

from cujo_action.schema import CheckName

# The module each check process runs as (``python -m``): the check's own name, but for the
# base, whose module is ``base_commit`` (a module named ``base`` reads as a base class).
CHECK_MODULES: Final[dict[CheckName, str]] = {
    "install": "cujo_action.checks.install",
    "detonation": "cujo_action.checks.detonation",
    "tests": "cujo_action.checks.tests",
    "probes": "cujo_action.checks.probes",
    "smoke": "cujo_action.checks.smoke",
    "workflows": "cujo_action.checks.workflows",
    "privileged": "cujo_action.checks.privileged",
    "base": "cujo_action.checks.base_commit",
}
