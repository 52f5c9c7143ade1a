"""Dump what ``perfdoctor analyze`` computes for every trace under tests/fixtures.

For each fixture trace (Kineto ``.json.gz``, nsys ``.sqlite.gz``, tests/fixtures/wild
included) this runs the real ``perfdoctor analyze --json`` in this process and records its
metrics.json (less the input path) and findings.json (less the path and the cited sources, pack data). The committed
``tests/golden/fixtures.json`` was written by this script run against the main branch
before the speed work of issue 15 (``PYTHONPATH=/work/main python tests/golden/dump.py``),
so ``tests/e2e/test_golden.py`` can show that making the analysis fast changed no number.

    python tests/golden/dump.py -o tests/golden/fixtures.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def fixture_traces() -> list[Path]:
    """Every trace under tests/fixtures, in a stable order."""
    found = sorted(FIXTURES.glob("*.kineto.json.gz")) + sorted(FIXTURES.glob("*.nsys.sqlite.gz"))
    return found + sorted((FIXTURES / "wild").glob("*.kineto.json.gz"))


def analyze_outputs(trace: Path) -> dict:
    """metrics.json and findings.json of ``perfdoctor analyze TRACE`` (paths dropped)."""
    from perfdoctor.io import dumps_json
    from perfdoctor.pipeline import diagnose
    from perfdoctor.reports.json import document

    d = diagnose(trace, rules=(), warnings=False)
    metrics = d.analysis.to_json()
    metrics["meta"].pop("path", None)
    findings = document(d.findings, d.analysis, d.packs)
    findings["source"].pop("path", None)
    # The cited sources are the pack's data, not numbers the analysis computes (docs/rules.md).
    findings.pop("sources", None)
    for f in findings["findings"]:
        f.pop("citations", None)
    # through JSON exactly as analyze writes metrics.json (numpy scalars made Python, NaN null)
    return json.loads(dumps_json({"metrics": metrics, "findings": findings}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--out", type=Path, required=True)
    args = ap.parse_args()
    out = {str(t.relative_to(FIXTURES)): analyze_outputs(t) for t in fixture_traces()}
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"{args.out}: {len(out)} traces", file=sys.stderr)


if __name__ == "__main__":
    main()
