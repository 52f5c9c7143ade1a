"""Making the analysis fast changed no number: metrics.json and findings.json of every
fixture trace against the values the main branch computed before the speed work (issue 15).

``tests/golden/fixtures.json`` was written by ``tests/golden/dump.py`` run on main
(33e793e). Floats are compared to a relative 1e-12 (summation order may round the last
bit), everything else exactly. A deliberate change to a metric regenerates the file with
that script and says so in its commit.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, run_cli_inprocess

sys.path.insert(0, str(Path(__file__).parents[1] / "golden"))
from dump import analyze_outputs, fixture_traces  # noqa: E402

GOLDEN = json.loads((Path(__file__).parents[1] / "golden" / "fixtures.json").read_text())


def differences(got: object, want: object, where: str = "$") -> list[str]:
    """Where ``got`` and ``want`` differ (floats to a relative 1e-12)."""
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return [] if math.isclose(got, want, rel_tol=1e-12, abs_tol=0.0) else [f"{where}: {got!r} != {want!r}"]
    if type(got) is not type(want):
        return [f"{where}: {type(got).__name__} {got!r} != {type(want).__name__} {want!r}"]
    if isinstance(want, dict):
        out = [f"{where}: keys {sorted(set(got) ^ set(want))} differ"] if set(got) != set(want) else []
        for k in want:
            if k in got:
                out += differences(got[k], want[k], f"{where}.{k}")
        return out
    if isinstance(want, list):
        if len(got) != len(want):
            return [f"{where}: {len(got)} items != {len(want)}"]
        return [d for i, (g, w) in enumerate(zip(got, want)) for d in differences(g, w, f"{where}[{i}]")]
    return [] if got == want else [f"{where}: {got!r} != {want!r}"]


def test_every_fixture_has_a_golden_entry():
    assert sorted(GOLDEN) == sorted(str(t.relative_to(FIXTURES)) for t in fixture_traces())


@pytest.mark.parametrize("trace", fixture_traces(), ids=lambda t: str(t.relative_to(FIXTURES)))
def test_analyze_matches_main(trace: Path, tmp_path: Path):
    want = GOLDEN[str(trace.relative_to(FIXTURES))]
    out = tmp_path / "metrics.json"
    done = run_cli_inprocess("analyze", trace, "--json", out)
    assert done.returncode == 0, done.stderr
    metrics = json.loads(out.read_text())
    metrics["meta"].pop("path", None)
    assert differences(metrics, want["metrics"]) == []
    assert differences(analyze_outputs(trace)["findings"], want["findings"]) == []


def test_differences_finds_a_change():
    """The comparison itself can fail: a last-digit float change passes, a real one does not."""
    assert differences({"a": [1.0, "x"]}, {"a": [1.0 + 1e-15, "x"]}) == []
    assert differences({"a": [1.001, "x"]}, {"a": [1.0, "x"]}) != []
    assert differences({"a": None}, {"a": 0.0}) != []
    assert differences({"a": 1}, {"a": 1, "b": 2}) != []
