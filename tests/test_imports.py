"""The package's import graph has no cycle, and the analysis path imports no torch.

Every ``import`` / ``from ... import`` of a ``perfdoctor`` module inside another, at any depth
of the file (function-level imports included: a lazy import still ties the two modules
together), is an edge. A cycle means two modules that cannot be understood apart.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "perfdoctor"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                # `from pkg import mod` depends on mod; `from pkg import name` on pkg's own code.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                # the deepest perfdoctor module the import names (a.b.c -> a.b.c, else a.b)
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_finder_sees_a_cycle_when_there_is_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_import_graph_sees_lazy_imports():
    graph = import_graph()
    # perfdoctor.engine.fused imports GraphedStep inside a function.
    assert "perfdoctor.engine.graphs" in graph["perfdoctor.engine.fused"]


def test_the_package_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def imported_in_a_fresh_process(imports: str) -> list[str]:
    """Which of pandas, numpy, torch, typer and rich a fresh interpreter has loaded after
    running ``imports`` (nothing else on its path but this checkout)."""
    import subprocess
    import sys

    code = (
        f"import sys\n{imports}\n"
        "print(','.join(m for m in ('pandas', 'numpy', 'torch', 'typer', 'rich') if m in sys.modules))\n"
    )
    env = {"PYTHONPATH": str(PACKAGE.parent), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return [m for m in r.stdout.strip().split(",") if m]


def test_import_perfdoctor_stays_light():
    """``import perfdoctor`` is what a user program does to call ``perfdoctor.region``: it
    must not pull in pandas, numpy, torch or the CLI (``perfdoctor.diagnose`` is lazy)."""
    assert imported_in_a_fresh_process("import perfdoctor\nassert callable(perfdoctor.region) and callable(perfdoctor.diagnose)") == []


def test_the_cli_and_the_kineto_decode_import_no_pandas():
    """A large trace's decoders fork before pandas is imported, which then imports while
    they decode (``collectors.start_loading``): that holds only while the command line and
    the decoding import no pandas themselves. Nor rich: only a report prints with it, so
    ``--help`` and the building of the command line do not pay for it."""
    loaded = imported_in_a_fresh_process(
        "import perfdoctor.cli, perfdoctor.collectors, perfdoctor.collectors.torch_profiler, perfdoctor.pipeline"
    )
    assert "pandas" not in loaded and "rich" not in loaded
    assert "numpy" in loaded  # the decoders' columns
