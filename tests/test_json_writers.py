"""One JSON writer (house plan step 2, "Out"): every JSON text perfdoctor writes is made by
:func:`perfdoctor.io.dumps_json` (strict: NaN and infinities are null) and written by
:func:`perfdoctor.io.write_json`, or by :func:`perfdoctor.bundle.layout.write_json_atomic`
where ``perfdoctor run`` needs the OSError. ``json.dump``/``json.dumps`` elsewhere is allowed
only where listed, with why."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "perfdoctor"
ALLOWED: dict[str, int] = {  # module -> how many json.dump(s) calls it may make
    # the results the bootstrap writes at the target's exit: the C encoder, compact (dumps_json
    # indents, which takes json's pure-Python encoder, on series of every step and module call)
    "perfdoctor/record/bootstrap/session.py": 1,
    "perfdoctor/collectors/nvml.py": 1,  # the sampler's JSON Lines, one row at a time, not a JSON file
    "perfdoctor/reports/html.py": 1,  # the data embedded in the HTML report's <script>
}


def json_calls(path: Path) -> int:
    """How many ``json.dump(...)``/``json.dumps(...)`` calls ``path`` makes (code in strings,
    such as the scripts ``record/launch.py`` hands to torchrun, is not code here)."""
    return sum(
        1 for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("dump", "dumps")
        and isinstance(node.func.value, ast.Name) and node.func.value.id == "json"
    )


def test_json_is_written_through_perfdoctor_io():
    found = {p.relative_to(ROOT).as_posix(): json_calls(p) for p in sorted(PACKAGE.rglob("*.py")) if p != PACKAGE / "io.py"}
    found = {path: n for path, n in found.items() if n}
    assert found == ALLOWED, "write JSON with perfdoctor.io.write_json (or dumps_json); a listed module's count only shrinks"


def test_the_finder_counts_calls_not_strings(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('import json\nSCRIPT = "json.dump(x, f)"\njson.dump({}, f)\ntext = json.dumps([])\njson.loads("1")\n')
    assert json_calls(module) == 2
