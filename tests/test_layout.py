"""Test-suite hygiene: shared fakes come from tests/fakes.py, never from conftest or a test."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_no_test_imports_conftest_or_another_test_module():
    offenders = {
        f"{path.relative_to(TESTS)}: {module}"
        for path in TESTS.rglob("*.py")
        for module in imported_modules(path)
        if module.startswith("tests.")
        and (module.endswith("conftest") or module.rsplit(".", 1)[-1].startswith("test_"))
    }
    assert offenders == set()
