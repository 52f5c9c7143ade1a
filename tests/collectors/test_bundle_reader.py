"""collectors/bundle.py: a run bundle read into one Profile, what it says about itself kept."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from conftest import run_cli_inprocess

DEMO = Path(__file__).resolve().parents[2] / "perfdoctor" / "demo" / "data" / "fused"


def test_the_traces_warnings_and_the_bundles_are_both_kept(tmp_path: Path) -> None:
    """A bundle whose trace has a damaged event (the trace reader's warning) and whose
    light.json has no step series (the bundle reader's): both reach the Profile and the
    terminal. The bundle's warnings used to replace the trace's. And the one damaged event
    is the only one skipped: the per-event fallback used to skip every op with recorded
    shapes too (2,023 of this trace's events), its shapes being fields only JSON text fills."""
    from perfdoctor.pipeline import load_trace

    b = tmp_path / "bundle"
    shutil.copytree(DEMO, b)
    trace = b / "raw" / "torch-trace.json.gz"
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    doc["traceEvents"].append({"ph": "X", "args": [1, 2]})  # not a trace event
    trace.write_bytes(gzip.compress(json.dumps(doc).encode()))
    (b / "raw" / "light.json").write_text("{}")
    warnings = load_trace(b).origin.warnings
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("skipped 1 events: not a valid trace event")
    assert warnings[1].startswith("light.json: no readable step series for 'decode_step'")
    done = run_cli_inprocess("analyze", b)
    assert done.returncode == 0, done.stderr
    assert "skipped 1 events" in done.stderr and "no readable step series" in done.stderr, done.stderr
