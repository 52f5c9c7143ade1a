"""A number becomes words in one module (house plan step 2, "Out"): perfdoctor/text.py.

Every other module words a number through text.py's formatters (``value``, ``num``,
``count``, ``duration_us``, ``percent``, ...), so one number reads the same in every output
and in every sentence below them (notes, evidence, estimates, reasons). A number formatted
anywhere else fails here: an f-string field with a numeric format spec (``{x:.1f}``,
``{x:,}``, ``{x:.0%}``), ``%``-formatting, ``format(x, spec)`` or ``"...".format`` with one.
The few that are not words for a person (a coordinate, a file name, a name read back) are
listed with why; an entry that no longer formats anything must go, and none may be added
for a sentence.
"""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "perfdoctor"
FORMATTERS = PACKAGE / "text.py"

ALLOWED: dict[tuple[str, str], str] = {  # (module, function) -> why its numbers are not words
    ("perfdoctor/reports/format.py", "svg_number"): "SVG coordinates and sizes: positions for the browser",
    ("perfdoctor/rules/evidence.py", "_r"): "rounds an evidence row's number, which stays a number (findings.json)",
    ("perfdoctor/bundle/store.py", "record_run"): "a baseline entry's folder name: the zero-padded sequence sorts",
    ("perfdoctor/declare.py", "declaration_name"): "a range name that parse_declaration reads back",
    # README.md and the shipped headline.json quote these word for word (tests/demo/test_show.py):
    # they change with a re-recording on the GPU, not here
    ("perfdoctor/demo/show.py", "readme_quotes"): "the README's quoted sentences",
    ("perfdoctor/demo/show.py", "speedup_words"): "the README's quoted sentences",
}
# The engine is a program perfdoctor measures, like a user's: it imports only api and
# collectors.nvml (engine/__init__.py), so its benchmark lines keep their own formats.
APART = ("perfdoctor/engine/",)

# A spec formats a number when it names a numeric type, groups digits or sets a precision
# ("<{}" pads a label, "!r" is a conversion: neither is a number's format).
NUMERIC_SPEC = re.compile(r"[bcdeEfFgGnoxX%]$|[,_]|\.(\d|\{\})")
PERCENT_FORMAT = re.compile(r"%[-+ #0]*(\d+|\*)?(\.(\d+|\*))?[diouxXeEfFgG]")


def _spec(node: ast.JoinedStr) -> str:
    return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)


def number_formats(source: str) -> list[tuple[str, int, str]]:
    """(enclosing function or "", line, what) for every number formatted in ``source``."""
    found: list[tuple[str, int, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        what = None
        if isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            spec = _spec(node.format_spec)
            what = f"{{:{spec}}}" if NUMERIC_SPEC.search(spec) else None
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant)
              and isinstance(node.left.value, str) and PERCENT_FORMAT.search(node.left.value)):
            what = "% formatting"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "format" and len(node.args) == 2:
            what = "format(x, spec)"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
              and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)
              and any(spec and NUMERIC_SPEC.search(spec) for _, _, spec, _ in string.Formatter().parse(node.func.value.value))):
            what = "str.format"
        if what is not None:
            found.append((function, node.lineno, what))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(source), "")
    return found


def test_numbers_become_words_only_in_text_py():
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        if path == FORMATTERS or module.startswith(APART):
            continue
        for function, line, what in number_formats(path.read_text(encoding="utf-8")):
            found.setdefault((module, function), []).append(f"{module}:{line} {what}")
    new = [site for key, sites in found.items() if key not in ALLOWED for site in sites]
    assert not new, "word these numbers with perfdoctor.text (value, num, count, duration_us, percent, ...):\n" + "\n".join(new)
    assert set(ALLOWED) <= set(found), f"formats nothing now, remove from ALLOWED: {sorted(set(ALLOWED) - set(found))}"


def test_the_finder_sees_each_way_to_format_a_number():
    source = '''
def f(x, w):
    a = f"{x:.1f} ms, {x:,} calls, {x:.0%}, {x:+.{w}g}, {x:06d}"
    b = "%.2f ms" % x
    c = format(x, ".3g")
    d = "{:.1f} ms".format(x)
    e = f"{x} {x!r} {x:<{w}} {x:>8}"  # no number format: a str, a repr, padding
    g = "50 % of it" + "%s" % x  # a percent sign in words; %s is no number format
    h = "{} and {name}".format(x, name=x)
SCRIPT = "print(f'{x:.1f}')"  # code in a string is not code here
'''
    found = number_formats(source)
    assert [(fn, what) for fn, _, what in found] == [
        ("f", "{:.1f}"), ("f", "{:,}"), ("f", "{:.0%}"), ("f", "{:+.{}g}"), ("f", "{:06d}"),
        ("f", "% formatting"), ("f", "format(x, spec)"), ("f", "str.format"),
    ]
