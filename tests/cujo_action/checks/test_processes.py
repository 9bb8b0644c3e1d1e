"""Each check process starts as a module that exists and runs that check."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from cujo_action.checks.modules import CHECK_MODULES
from cujo_action.schema import ALL_CHECKS


def test_every_check_has_a_module_that_exists() -> None:
    assert sorted(CHECK_MODULES) == sorted(ALL_CHECKS)
    for check, module in CHECK_MODULES.items():
        spec = importlib.util.find_spec(module)
        assert spec is not None, (check, module)
        assert spec.origin is not None, (check, module)


def test_each_module_runs_its_own_check() -> None:
    """The module's ``check_main(<name>, ...)`` (``static_check_main`` for a check that runs
    no command) names the check it is started for."""
    for check, module in CHECK_MODULES.items():
        spec = importlib.util.find_spec(module)
        assert spec is not None
        assert spec.origin is not None
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        named = [
            node.args[0].value
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and getattr(node.func, "id", None) in ("check_main", "static_check_main")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ]
        assert named == [check], (module, named)
