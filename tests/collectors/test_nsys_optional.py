"""Nsight Systems exports as other nsys versions write them (issue 30 item 10): columns
and ENUM tables some exports lack are optional, read to the same metrics as the real
H200 export they are made from; an unfinished kernel (end = INT64_MAX) is skipped and
counted, not a timeline covered end to end."""

from __future__ import annotations

import gzip
import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import FIXTURES

SOURCE = FIXTURES / "h200-pageable-sync-10steps.nsys.sqlite.gz"
KEYS = ("steps", "gpu_idle_ratio", "launches_per_step", "kernels_per_step", "pageable_memcpy_bytes")
INT64_MAX = 2**63 - 1


@pytest.fixture
def export(tmp_path: Path) -> Path:
    out = tmp_path / "export.sqlite"
    with gzip.open(SOURCE) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def metrics(path: Path) -> dict[str, float]:
    from perfdoctor.pipeline import diagnose

    m = diagnose(path, rules=None, warnings=False).analysis.metrics
    return {k: m[k].value for k in KEYS}


def edit(path: Path, *sql: str) -> Path:
    with sqlite3.connect(path) as con:
        for s in sql:
            con.execute(s)
    return path


def test_the_source_moves_pageable_bytes(export: Path) -> None:
    want = metrics(export)
    with sqlite3.connect(export) as con:  # by hand: HtoD (1) / DtoH (2) copies with a pageable (0) host side
        pageable = con.execute(
            "SELECT sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE (copyKind = 1 AND srcKind = 0) OR (copyKind = 2 AND dstKind = 0)"
        ).fetchone()[0]
    assert want["steps"] == 10 and pageable > 0
    assert 0 < want["pageable_memcpy_bytes"] <= pageable


def test_optional_columns_missing_read_the_same(export: Path) -> None:
    want = metrics(export)
    edit(
        export,
        *(f"ALTER TABLE CUPTI_ACTIVITY_KIND_{t} DROP COLUMN graphNodeId" for t in ("KERNEL", "MEMCPY", "MEMSET")),
        "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN dynamicSharedMemory",
        "ALTER TABLE TARGET_INFO_GPU DROP COLUMN computeMajor",
        "UPDATE NVTX_EVENTS SET text = (SELECT value FROM StringIds WHERE id = textId) WHERE text IS NULL",
        "ALTER TABLE NVTX_EVENTS DROP COLUMN textId",
    )
    assert metrics(export) == want


def test_missing_enum_tables_fall_back_to_the_known_numbers(export: Path) -> None:
    from perfdoctor.pipeline import load_trace

    want = metrics(export)
    edit(export, "DROP TABLE ENUM_CUDA_MEMCPY_OPER", "DROP TABLE ENUM_CUDA_MEM_KIND", "DROP TABLE ENUM_NSYS_EVENT_TYPE")
    assert metrics(export) == want  # pageable bytes not 0, the NVTX steps still found
    assert load_trace(export).origin.warnings == ()


def test_an_unknown_copy_kind_is_said(export: Path) -> None:
    from perfdoctor.pipeline import load_trace

    edit(export, "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET srcKind = 99 WHERE copyKind = 1")
    p = load_trace(export)
    assert any("host memory kind the export does not say" in w for w in p.origin.warnings), p.origin


def test_a_kernel_ending_at_int64_max_is_skipped_and_counted(export: Path) -> None:
    from perfdoctor.pipeline import diagnose

    before = diagnose(export, rules=None, warnings=False)
    edit(export, f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = {INT64_MAX} WHERE rowid = (SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)")
    after = diagnose(export, rules=None, warnings=False)
    assert len(after.profile.activities) == len(before.profile.activities) - 1
    assert "skipped 1 rows of CUPTI_ACTIVITY_KIND_KERNEL: no valid start / end" in after.profile.origin.warnings
    assert after.analysis.metrics["gpu_idle_ratio"].value > 0
