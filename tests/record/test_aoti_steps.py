"""The bootstrap's wrappers of calls no module call or range marks, on CPU: the AOTInductor
hook (record.bootstrap.steps.install_aoti_steps) when the program imported the package's
module before the bootstrap ran (wrapped at once, and once; the run through an import hook:
tests/record/test_real_programs_more.py, aoti_infer.py), and the graph replays' wrapper, which
shares its naming and its range with it, on a stand-in graph class (the real replays:
tests/record/test_run_gpu.py)."""

from __future__ import annotations

import sys

import pytest

from perfdoctor.record.bootstrap import steps

pytest.importorskip("torch")


class _Session:
    disabled, modules = False, None

    def __init__(self, mode: str = "light", pattern: str | None = None) -> None:
        self.mode, self.pattern = mode, pattern
        self.ranges: list[tuple[str, str]] = []

    def range_start(self, name: str) -> None:
        self.ranges.append(("start", name))

    def range_end(self, name: str) -> None:
        self.ranges.append(("end", name))


def test_an_imported_package_module_is_wrapped_at_once_and_once(monkeypatch) -> None:
    for name in steps.AOTI_MODULES:  # both: where torch 2.13 defines the class, where it did before
        pytest.importorskip(name)
    model_class = sys.modules[steps.AOTI_MODULES[0]].AOTICompiledModel
    monkeypatch.setattr(model_class, "__call__", lambda self, x: x + 1)  # the compiled C++, as far as the wrapper sees
    before = list(sys.meta_path)
    session = _Session()
    steps.install_aoti_steps(session)
    steps.install_aoti_steps(session)  # a second install leaves the first wrapper alone
    assert sys.meta_path == before  # no import hook: the modules were there
    first, second = model_class(None), model_class(None)
    assert first(1) == 2 and second(1) == 2 and first(5) == 6
    names = ["AOTInductor: model #1", "AOTInductor: model #2", "AOTInductor: model #1"]
    assert session.ranges == [e for n in names for e in (("start", n), ("end", n))]


def test_the_import_hook_waits_for_its_module_only() -> None:
    seen = []
    hook = steps._AfterImport("json.tool", seen.append)
    sys.meta_path.insert(0, hook)
    try:
        import csv  # noqa: F401 - another module: the hook stays
        assert hook in sys.meta_path and not seen
        sys.modules.pop("json.tool", None)
        import json.tool  # noqa: F401
        assert seen and seen[0].__name__ == "json.tool" and hook not in sys.meta_path
    finally:
        if hook in sys.meta_path:
            sys.meta_path.remove(hook)


def test_a_traced_pass_stepping_on_something_else_wraps_no_model() -> None:
    module = pytest.importorskip(steps.AOTI_MODULES[0])
    call, before = module.AOTICompiledModel.__call__, list(sys.meta_path)
    steps.install_aoti_steps(_Session("torch", pattern="Transformer.forward"))
    assert module.AOTICompiledModel.__call__ is call and sys.meta_path == before


class _Graph:
    def replay(self) -> str:
        return "replayed"


class _Depth:
    depth = 0


class _Modules:
    local = _Depth()


def test_graph_replays_are_named_by_first_replay_and_timed_outside_module_calls() -> None:
    session = _Session()
    session.modules = _Modules()
    replays = steps.GraphReplays(session, _Graph)
    try:
        a, b = _Graph(), _Graph()
        session.modules.local.depth = 1  # inside a module call: named, not timed
        assert b.replay() == "replayed" and session.ranges == []
        session.modules.local.depth = 0
        assert a.replay() == b.replay() == a.replay() == "replayed"
        names = ["CUDAGraph.replay #2", "CUDAGraph.replay #1", "CUDAGraph.replay #2"]
        assert session.ranges == [e for n in names for e in (("start", n), ("end", n))]
    finally:
        replays.uninstall()
    assert _Graph.replay is not replays.wrapper
