"""Write the findings reports into a run bundle: ``report.md``, ``report.html``, ``findings.json``."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from perfdoctor.io import write_text
from perfdoctor.analysis.metrics import Analysis
from perfdoctor.reports import html, json, markdown
from perfdoctor.rules.engine import Finding

BUNDLE_FILES = ("report.md", "report.html", "findings.json")


__all__ = ["BUNDLE_FILES", "write_reports", "write_text"]  # write_text: perfdoctor.io's, atomic


def write_reports(directory: Path, findings: Sequence[Finding], analysis: Analysis, packs: Sequence[str] = ()) -> list[Path]:
    """Write the three report files into ``directory`` (each atomically, replacing a link or
    FIFO at the name rather than writing through it); returns their paths."""
    texts = {
        "report.md": markdown.render(findings, analysis),
        "report.html": html.render(findings, analysis, packs),
        "findings.json": json.render(findings, analysis, packs),
    }
    paths = []
    for name, text in texts.items():
        path = Path(directory) / name
        write_text(path, text, follow_links=False)  # a bundle is downloaded: its links are not ours to follow
        paths.append(path)
    return paths
