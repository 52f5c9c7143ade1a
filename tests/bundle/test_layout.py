"""A bundle's names are spelled once (house plan step 3, "each constant defined once"):
every file, folder, range and schema name of :mod:`perfdoctor.bundle.layout` is written as a
string only there; the other modules import it."""

from __future__ import annotations

import ast
from pathlib import Path

from perfdoctor.bundle import layout

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "perfdoctor"
NAMES = ("MANIFEST", "RAW", "TORCH_TRACE", "NSYS_SQLITE", "NSYS_REP", "NCU_CSV", "SCHEMA", "CLOCK_SYNC_RANGE", "NCU_RANGE")
VALUES = {getattr(layout, name): name for name in NAMES}
# The same text meaning something else, or spelled where layout cannot be imported.
ALLOWED: dict[str, set[str]] = {
    # below bundle/ on the floors: check_outputs refuses to write into a bundle's manifest and raw/
    "perfdoctor/io.py": {"manifest.json", "raw"},
    "perfdoctor/compare/kernels.py": {"raw"},  # the kernel table's column of raw kernel names
}


def spelled(path: Path) -> set[str]:
    """The layout values ``path`` spells as a whole string constant (docstrings aside)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in VALUES and id(node) not in docstrings}


def test_bundle_names_are_spelled_only_in_layout():
    found = {p.relative_to(ROOT).as_posix(): spelled(p) for p in sorted(PACKAGE.rglob("*.py")) if p != PACKAGE / "bundle" / "layout.py"}
    new = {path: sorted(VALUES[v] for v in values - ALLOWED.get(path, set())) for path, values in found.items()
           if values - ALLOWED.get(path, set())}
    assert not new, f"import these from perfdoctor.bundle.layout: {new}"
    stale = {path: sorted(values - found.get(path, set())) for path, values in ALLOWED.items() if values - found.get(path, set())}
    assert not stale, f"no longer spelled there: remove from ALLOWED: {stale}"


def test_the_finder_sees_a_path_join_and_not_a_docstring(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""manifest.json"""\ndef f(p):\n    """raw"""\n    return p / "manifest.json", "raw/x", f"{p}/raw"\n')
    assert spelled(module) == {"manifest.json"}
