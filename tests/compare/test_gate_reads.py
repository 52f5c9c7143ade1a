"""How often ``perfdoctor gate RUN --baseline BASE --rules seed`` reads each input: the
one door (:func:`perfdoctor.pipeline.open`) reads and validates a bundle's manifest once and
carries it, and the rule pack is parsed once per command (house plan, step 2)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from diffgate_helpers import cli_inprocess

DEMO = Path(__file__).resolve().parents[2] / "perfdoctor" / "demo" / "data"


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> tuple[Counter[str], Counter[str]]:
    """Files read through perfdoctor.io (by name) and rule packs parsed (by name)."""
    import perfdoctor.io
    import perfdoctor.rules.engine as engine

    reads: Counter[str] = Counter()
    parses: Counter[str] = Counter()
    read_capped, read_pack = perfdoctor.io.read_capped, engine._read_pack

    def counting_read(path, *args, **kwargs):
        reads[Path(path).name] += 1
        return read_capped(path, *args, **kwargs)

    def counting_parse(path):
        parses[Path(path).name] += 1
        return read_pack(path)

    monkeypatch.setattr(perfdoctor.io, "read_capped", counting_read)
    monkeypatch.setattr(engine, "_read_pack", counting_parse)
    return reads, parses


def test_gate_reads_each_manifest_once_and_parses_the_rule_pack_once(counted) -> None:
    reads, parses = counted
    r = cli_inprocess("gate", DEMO / "graph", "--baseline", DEMO / "eager", "--rules", "seed",
                      "--fail-on", "step_latency_ms_p50:+5%")
    assert r.returncode in (0, 1), r.stderr
    # Before the door (8885748): manifest.json read 10 times (ranks asked 4 times, the bundle
    # checked and loaded, the diff's own read), seed.toml parsed once.
    assert reads["manifest.json"] == 2, reads  # one per bundle
    assert parses == {"seed.toml": 1}, parses


def test_diff_parses_the_rule_pack_once_for_both_sides(counted) -> None:
    reads, parses = counted
    r = cli_inprocess("diff", DEMO / "eager", DEMO / "graph")
    assert r.returncode == 0, r.stderr
    # Before the door (8885748): manifest.json read 10 times, seed.toml parsed twice (once a side).
    assert reads["manifest.json"] == 2, reads
    assert parses == {"seed.toml": 1}, parses


def test_analyze_on_a_folder_of_ranks_parses_the_rule_pack_once(counted, tmp_path) -> None:
    """Every rank's rules from one parse: the door loads the packs, then diagnoses each rank."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("many_ranks", Path(__file__).parents[2] / "bench" / "many_ranks.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.build(tmp_path / "ranks", 4)
    _, parses = counted
    r = cli_inprocess("analyze", tmp_path / "ranks")
    assert r.returncode == 0, r.stderr
    assert "Findings of rank" in r.stdout  # the every-rank view, with 4 ranks' rules evaluated
    assert parses == {"seed.toml": 1}, parses


WILD = Path(__file__).resolve().parents[3] / "shared" / "traces" / "wild"


@pytest.mark.skipif(not (WILD / "nsysai__mfu_2gpu_before.sqlite.gz").exists(), reason=f"the shared real traces are not here ({WILD})")
def test_gate_over_ranks_parses_the_rule_pack_once(counted) -> None:
    """Two processes with GPU work a side, gated rank by rank: one parse for both ranks."""
    _, parses = counted
    r = cli_inprocess("gate", WILD / "nsysai__mfu_2gpu_after.sqlite.gz", "--baseline", WILD / "nsysai__mfu_2gpu_before.sqlite.gz",
                      "--rules", "seed", "--fail-on", "gpu_idle_ratio:+100%")
    assert r.returncode in (0, 1), r.stderr
    assert "rank 0: budget gpu_idle_ratio:+100%" in r.stdout and "rank 1: budget gpu_idle_ratio:+100%" in r.stdout
    assert parses == {"seed.toml": 1}, parses
