"""record/ stays split by concern (house plan step 3): no function in it, the bootstrap's
included, grows past 80 lines."""

from __future__ import annotations

import ast
from pathlib import Path

RECORD = Path(__file__).resolve().parents[2] / "perfdoctor" / "record"
MAX_LINES = 80


def long_functions(root: Path, limit: int) -> list[str]:
    """``path:line name (n lines)`` for every function or method under ``root`` (nested ones
    too) longer than ``limit`` lines, from its ``def`` to its last line."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > limit:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_in_record_is_longer_than_80_lines():
    assert long_functions(RECORD, MAX_LINES) == []


def test_the_length_check_sees_methods_and_nested_functions(tmp_path):
    (tmp_path / "m.py").write_text("class C:\n    def f(self):\n        def g():\n            a = 1\n            b = 2\n            return a + b\n        return g\n")
    assert long_functions(tmp_path, 4) == [f"{tmp_path.name}/m.py:2 f (6 lines)"]
    assert sorted(long_functions(tmp_path, 3)) == [f"{tmp_path.name}/m.py:2 f (6 lines)", f"{tmp_path.name}/m.py:3 g (4 lines)"]
