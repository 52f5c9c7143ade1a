"""A plain (uncompressed) trace is mapped into memory, not copied (perfdoctor.io.read_maybe_gzip):
the Profile must be exactly the one a copied read gives, and the input checks must hold the same."""

from __future__ import annotations

import gzip
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from conftest import FIXTURES
from perfdoctor.collectors import torch_profiler
from perfdoctor.errors import UsageError
from perfdoctor.io import UTF8_BOM, read_maybe_gzip

FIXTURE = FIXTURES / "h200-llama1b-eager-5steps.kineto.json.gz"


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mapped") / "trace.json"
    out.write_bytes(gzip.decompress(FIXTURE.read_bytes()))
    return out


def test_a_plain_file_is_mapped_and_holds_the_files_bytes(plain: Path) -> None:
    data = read_maybe_gzip(plain)
    assert isinstance(data, memoryview) and data.readonly
    assert data == plain.read_bytes()


@pytest.mark.parametrize("processes", [1, 2])
def test_the_profile_from_a_mapped_file_is_the_one_from_its_gzip(plain: Path, processes: int) -> None:
    mapped = torch_profiler.load(plain, processes=processes)
    copied = torch_profiler.load(FIXTURE, processes=processes)  # gzip: decompressed into bytes
    for table in ("activities", "calls", "ranges"):
        pd.testing.assert_frame_equal(getattr(mapped, table), getattr(copied, table))
    assert replace(mapped.origin, path=None) == replace(copied.origin, path=None)


def test_a_leading_bom_is_dropped_from_a_mapped_file(plain: Path, tmp_path: Path) -> None:
    bom = tmp_path / "bom.json"
    bom.write_bytes(UTF8_BOM + plain.read_bytes())
    assert read_maybe_gzip(bom) == plain.read_bytes()
    assert len(torch_profiler.load(bom).activities) == len(torch_profiler.load(plain).activities)


def test_the_cap_holds_for_a_mapped_file(plain: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERFDOCTOR_MAX_TRACE_BYTES", str(plain.stat().st_size - 1))
    with pytest.raises(UsageError, match="more than"):
        read_maybe_gzip(plain)
    monkeypatch.setenv("PERFDOCTOR_MAX_TRACE_BYTES", str(plain.stat().st_size))
    assert len(read_maybe_gzip(plain)) == plain.stat().st_size


def test_an_empty_file_is_read_not_mapped_and_refused_in_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    assert read_maybe_gzip(empty) == b""
    with pytest.raises(UsageError, match="empty.json"):
        torch_profiler.load(empty)
