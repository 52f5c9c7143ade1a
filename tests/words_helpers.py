"""What tests/compare/test_words.py and tests/rules/test_rule_words.py read of a room's code:
the strings it composes and the text fields of its dataclasses (house plan step 2, "Out":
a room below reports/ hands up numbers and reasons, reports/ words them)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
import typing
from pathlib import Path
from typing import Hashable, Iterable


def composed(tree: ast.AST) -> list[tuple[str, int]]:
    """(enclosing function, line) of every string composed outside a ``raise``: an f-string,
    a join or ``format`` on a literal, a literal ``+`` something."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.Raise):
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if isinstance(node, ast.JoinedStr):
            found.append((function, node.lineno))
            return
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("join", "format") \
                and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str):
            found.append((function, node.lineno))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and any(
                isinstance(s, ast.Constant) and isinstance(s.value, str) for s in (node.left, node.right)):
            found.append((function, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, "")
    return found


def _text(annotation: str, module: object) -> bool:
    """Does a field of this annotation hold text? A module's Union alias (``Formula``, ``Said``)
    counts with its members; a key of a dict is a name, not text."""
    def expand(m: re.Match[str]) -> str:
        alias = getattr(module, m.group(0), None)
        return str(alias) if getattr(alias, "__origin__", None) is typing.Union else m.group(0)

    return re.search(r"\bstr\b", re.sub(r"dict\[str, ", "dict[", re.sub(r"\b[A-Za-z_]\w*\b", expand, annotation))) is not None


def text_fields(package: str, files: list[Path]) -> set[str]:
    """``Class.field`` of every dataclass field defined in ``files`` (modules of ``package``)
    whose annotation holds text."""
    fields = set()
    for path in files:
        module = importlib.import_module(f"{package}.{path.stem}")
        for obj in vars(module).values():
            if dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__:
                fields |= {f"{obj.__name__}.{f.name}" for f in dataclasses.fields(obj) if _text(str(f.type), module)}
    return fields


def imports_of(path: Path, module: str) -> set[str]:
    """The names ``path`` imports from ``module`` (``import module`` itself as ``*``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == module:
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.Import) and any(a.name == module for a in node.names):
            names.add("*")
    return names


def composed_in(paths: list[Path]) -> dict[tuple[str, str], list[int]]:
    """(file name, function) -> lines, of every string composed in ``paths`` (:func:`composed`)."""
    found: dict[tuple[str, str], list[int]] = {}
    for path in paths:
        for function, line in composed(ast.parse(path.read_text(encoding="utf-8"))):
            found.setdefault((path.name, function), []).append(line)
    return found


def unlisted(found: Iterable[Hashable], listed: Iterable[Hashable]) -> tuple[list, list]:
    """(found but not listed, listed but not found): what a test's list lacks, and what it
    names that is gone."""
    found, listed = set(found), set(listed)
    return sorted(found - listed), sorted(listed - found)
