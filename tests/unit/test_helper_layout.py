"""The rule for helpers (workloads/__init__.py, tests/support/__init__.py), checked: the demo,
the benchmarks and workloads/ import nothing of the test suite's own helpers."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Code that runs outside pytest, and what it may not import.
OUTSIDE_THE_SUITE = {
    "workloads": ("tests",),
    "scripts": ("tests.support", "tests.integration", "tests.unit"),
    "tests/benchmarks": ("tests.support", "tests.integration", "tests.unit"),
}


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_the_demo_and_the_benchmarks_use_no_test_only_helper():
    problems = []
    for folder, forbidden in OUTSIDE_THE_SUITE.items():
        files = sorted((ROOT / folder).rglob("*.py"))
        assert files, f"no Python files under {folder}: this test would prove nothing"
        for path in files:
            for module in imported_modules(path):
                if any(module == f or module.startswith(f + ".") for f in forbidden):
                    problems.append(f"{path.relative_to(ROOT)} imports {module}: move it to workloads/")
    assert not problems, "\n".join(problems)
