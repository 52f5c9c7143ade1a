"""The light pass's AOTInductor hook (record.bootstrap.steps.install_aoti_steps) when the
program imported the package's module before the bootstrap ran: wrapped at once, and once
(the run through an import hook: tests/record/test_real_programs.py, aoti_infer.py)."""

from __future__ import annotations

import sys

import pytest

from perfdoctor.record.bootstrap import steps

pytest.importorskip("torch")


class _Session:
    mode, disabled = "light", False

    def __init__(self) -> None:
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
