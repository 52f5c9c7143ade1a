"""The house plan holds: rooms on floors, imports only down, no cycle, every module on the map.

The floors are docs/architecture.md's ("The floors"); shared/design/house-plan.md says why.
Every import counts, the ones inside functions too: a lazy import up the floors is still a
dependency up the floors.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "perfdoctor"

FLOORS = [
    {"cli"},
    {"demo"},
    {"record", "reports", "engine"},
    {"compare"},
    {"pipeline"},
    {"rules"},
    {"analysis"},
    {"collectors"},
    {"bundle"},
    {"profile", "schema", "names", "declare", "api"},
    {"io", "text", "errors", "console"},
]
FLOOR = {room: i for i, rooms in enumerate(FLOORS) for room in rooms}

# Imports up the floors that the house plan's later steps remove; each must still exist (a
# stale exception would hide a new one) and none may be added.
KNOWN_UP: set[tuple[str, str]] = set()


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports() -> set[tuple[str, str]]:
    """(importer, imported) for every perfdoctor import in the package, lazy ones included."""
    mods = modules()

    def owner(name: str) -> str:
        while name not in mods:
            name = name.rpartition(".")[0]
        return name

    edges = set()
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module for a in node.names]
            else:
                continue
            edges |= {(mod, owner(n)) for n in names if n.split(".")[0] == "perfdoctor" and owner(n) != mod}
    return edges


def room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None  # the package itself is the facade, outside the floors


def test_every_module_lives_in_a_room_on_a_floor() -> None:
    rooms = {room(m) for m in modules()} - {None, "__main__"}
    assert rooms <= set(FLOOR), f"rooms on no floor: {sorted(rooms - set(FLOOR))}"


def test_imports_go_down_the_floors() -> None:
    up = set()
    for a, b in imports():
        ra, rb = room(a), room(b)
        if ra in FLOOR and rb in FLOOR and ra != rb and FLOOR[rb] < FLOOR[ra]:
            up.add((a, b))
    assert up - KNOWN_UP == set(), f"imports up the floors: {sorted(up - KNOWN_UP)}"
    assert KNOWN_UP - up == set(), f"gone, remove from KNOWN_UP: {sorted(KNOWN_UP - up)}"


def find_cycle(edges: set[tuple[str, str]]) -> list[str] | None:
    """One import cycle among ``edges`` as the modules along it, or None."""
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [node, nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, path + [node])):
                return found
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node, [])):
            return found
    return None


def test_no_import_cycle_between_modules() -> None:
    cycle = find_cycle(imports())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_known_cycle() -> None:
    assert find_cycle({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}) == ["a", "b", "c", "a"]
    assert find_cycle({("a", "b"), ("b", "c"), ("a", "c")}) is None


def test_at_most_twelve_modules_on_the_top_level() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 12, top


def test_every_room_says_what_it_is_for_and_may_import() -> None:
    for init in sorted(PACKAGE.glob("*/__init__.py")) + [PACKAGE / "record" / "bootstrap" / "__init__.py"]:
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "May import" in doc or "imports the standard library" in doc, init


def test_every_module_is_named_in_architecture_md() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    missing = [str(p.relative_to(PACKAGE)) for p in sorted(PACKAGE.rglob("*.py")) if f"`{p.relative_to(PACKAGE)}`" not in doc]
    assert not missing, f"docs/architecture.md does not name {missing}"


def test_test_modules_have_distinct_names() -> None:
    """tests/ mirrors the rooms, so two rooms can grow a test file of one name; pytest imports
    test files by basename (tests/ has no packages) and refuses to collect the second one, which
    CI reports as one collection error while the other file's tests silently do not run."""
    seen: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert not {name: paths for name, paths in seen.items() if len(paths) > 1}


def literal_constants(path: Path) -> dict[str, str]:
    """A module's top-level constants whose value is a literal (a string, a number, or a
    tuple/frozenset of them): name -> the value's AST dump."""
    out = {}
    for node in ast.parse(path.read_text()).body:
        target, value = (node.targets[0], node.value) if isinstance(node, ast.Assign) and len(node.targets) == 1 else (
            (node.target, node.value) if isinstance(node, ast.AnnAssign) and node.value is not None else (None, None))
        if not isinstance(target, ast.Name) or not target.id.isupper():
            continue
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "frozenset" and value.args:
            value = value.args[0]
        literal = isinstance(value, ast.Constant) or (
            isinstance(value, (ast.Tuple, ast.Set, ast.List)) and all(isinstance(e, ast.Constant) for e in value.elts))
        if literal:
            out[target.id] = ast.dump(value)
    return out


def test_each_constant_is_defined_once() -> None:
    """One constant, one definition (house plan step 3): the same name given the same literal
    in two modules is a copy that can drift (NEEDS_RANKS and DATA_LOADER_SOURCE were); the
    others import it. An alias (``X = other.X``) is not a literal and not counted."""
    seen: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name, value in literal_constants(path).items():
            seen.setdefault((name, value), []).append(str(path.relative_to(PACKAGE)))
    assert not {name: paths for (name, _), paths in seen.items() if len(paths) > 1}


def test_the_constant_finder_sees_literals_not_aliases(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('A = "x"\nB: int = 3\nC = ("a", "b")\nD = frozenset({"a"})\nE = other.E\nf = 1\nG = compute()\n')
    assert set(literal_constants(module)) == {"A", "B", "C", "D"}
