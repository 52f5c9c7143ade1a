"""Write the findings reports into a run bundle: ``report.md``, ``report.html``, ``findings.json``."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from perfdoctor.errors import UsageError
from perfdoctor.metrics import Analysis
from perfdoctor.reports import html, json, markdown
from perfdoctor.rules.engine import Finding

BUNDLE_FILES = ("report.md", "report.html", "findings.json")


def write_text(path: Path, text: str) -> None:
    """Write UTF-8 text; an unwritable destination is the user's problem, said in one line."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot write ({exc.strerror or exc})") from None


def write_reports(directory: Path, findings: Sequence[Finding], analysis: Analysis, packs: Sequence[str] = ()) -> list[Path]:
    """Write the three report files into ``directory``; returns their paths."""
    texts = {
        "report.md": markdown.render(findings, analysis),
        "report.html": html.render(findings, analysis, packs),
        "findings.json": json.render(findings, analysis, packs),
    }
    paths = []
    for name, text in texts.items():
        path = Path(directory) / name
        write_text(path, text)
        paths.append(path)
    return paths
