"""The contract across the process boundary (:mod:`perfdoctor.bundle.protocol`): every
document round-trips, the recorded bundles read, and its keys are spelled in one place."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from perfdoctor.bundle import layout, protocol
from perfdoctor.bundle.protocol import (Collector, FailedRank, LightPass, Manifest, PassConfig, PassResults, PassRun,
                                        Pairing, Rank, RankStatus, RepeatProcess, TimedOut)
from perfdoctor.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "perfdoctor"
DEMO = sorted((PACKAGE / "demo" / "data").glob("*/manifest.json"))
# Real H200 runs (docs/performance.md's readings): each folder keeps the run's manifest and
# its light pass's results (raw/light.json, beside the manifest); the traces were not kept.
RESULTS = sorted((ROOT / "docs" / "results").glob("*/*/manifest.json"))
# tests/fixtures holds traces, not bundles, today: any bundle added there is read too
FIXTURES = sorted((ROOT / "tests" / "fixtures").rglob("manifest.json"))
DOCUMENTS = (PassConfig, PassResults, LightPass, Manifest)
# Entries the manifest keeps as JSON; their own keys (name, files, kernels, ...) are words too
# common across the package's other documents for the grep test to police.
ENTRIES = (PassRun, Collector, TimedOut, FailedRank, RepeatProcess, Pairing, Rank, RankStatus)
KEYS = frozenset().union(*(protocol.keys(cls) for cls in DOCUMENTS))


def filled(cls: type) -> object:
    """An instance with every field set (None-able fields too), and an unknown key."""
    values = {}
    for f in dataclasses.fields(cls):
        if f.name == "extra":
            values[f.name] = {"from_a_later_version": [1, 2]}
        elif f.name == "light_pass" and cls is Manifest:  # a Rank keeps its light pass as JSON
            values[f.name] = filled(LightPass)
        elif f.name == "schema":
            values[f.name] = layout.SCHEMA
        elif f.name == "step_latency_ms":
            values[f.name] = [1.5, 2.0]
        elif f.name in ("exit_code", "world_size"):
            values[f.name] = 3
        elif f.name in ("gpu", "calibration", "collectors", "ranks", "environment", "clock_sync"):
            values[f.name] = {}
        elif f.name == "children":
            values[f.name] = {"__main__.worker (spawn)": 2}
        else:
            values[f.name] = f"value of {f.name}"
    return cls(**values)


@pytest.mark.parametrize("cls", DOCUMENTS + ENTRIES, ids=lambda c: c.__name__)
def test_every_document_round_trips_through_json(cls):
    for doc in (cls(**({"results": "raw/light.json"} if cls is PassConfig else {})), filled(cls)):
        text = json.dumps(doc.to_json())
        assert cls.from_json(json.loads(text)) == doc


def test_a_null_the_format_keeps_is_written_and_an_unset_field_is_left_out():
    doc = Manifest(status="running").to_json()
    assert doc["exit_code"] is None and doc["calibration"] is None and "gpu" not in doc
    assert PassConfig(pass_="ncu", results="r.json").to_json()["pass"] == "ncu"


def test_a_light_pass_writes_a_null_gpm_interval_only_after_sampling():
    # null: the NVML sampler ran without GPM; absent: there was no sampler
    assert LightPass(nvml_sampled=True).to_json()["gpm_interval_ms"] is None
    assert "gpm_interval_ms" not in LightPass(nvml_sampled=False).to_json()
    assert list(LightPass().to_json()) == ["step_name", "how", "step_end_clock"]


def read_back(cls: type, path: Path) -> object:
    """The recorded document ``path`` as ``cls``, checked to round-trip: written back it has
    every key the file has, with the file's value, and adds only nulls (fields a recording
    older than them did not write); read again it is the same; it holds no unknown key."""
    doc = json.loads(path.read_text())
    read = cls.from_json(doc, str(path))
    written = read.to_json()
    assert {k: written.get(k, "<dropped>") for k in doc} == doc, f"{path}: a key changed or was dropped on the way back"
    added = {k: v for k, v in written.items() if k not in doc}
    assert all(v is None for v in added.values()), f"{path}: written back with values it did not hold: {added}"
    assert cls.from_json(written) == read and read.extra == {}, f"{path}: not the same read again, or keys this version does not know"
    return read


def test_there_are_recorded_bundles_to_read() -> None:
    """The round trip below reads real recordings: the demo's and the H200 runs' in docs/results."""
    assert len(DEMO) >= 4 and len(RESULTS) >= 10, (DEMO, RESULTS)


@pytest.mark.parametrize("manifest", DEMO + RESULTS + FIXTURES, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_the_recorded_bundles_read_through_the_protocol(manifest):
    m = read_back(Manifest, manifest)
    assert m.schema == layout.SCHEMA and m.light_pass is not None and m.light_pass.step_name
    whole = (manifest.parent / layout.RAW).is_dir()  # a bundle; else a results folder (its files beside the manifest)
    raw = manifest.parent / layout.RAW if whole else manifest.parent
    for name in layout.PASSES:
        if (raw / f"{name}.json").exists():
            results = read_back(PassResults, raw / f"{name}.json")
            assert results.pass_ == name
            if whole or (raw / f"{name}.config.json").exists():
                assert read_back(PassConfig, raw / f"{name}.config.json").pass_ == name
    light = read_back(PassResults, raw / "light.json")
    assert light.step_series()[m.light_pass.step_name]["gpu_end_ns"]
    # the recorded files hold no key this version does not know
    assert m.light_pass.extra == {}
    for entry in m.passes:
        assert PassRun.from_json(entry).to_json() == entry and PassRun.from_json(entry).extra == {}
    for entry in m.collectors.values():
        assert Collector.from_json(entry).to_json() == entry and Collector.from_json(entry).extra == {}
    for entry in (m.repeat or {}).get("processes", []):
        assert RepeatProcess.from_json(entry).to_json() == entry
    if (m.repeat or {}).get("pairing") is not None:
        assert Pairing.from_json(m.repeat["pairing"]).to_json() == m.repeat["pairing"]
    for entry in (m.ranks or {}).values():
        assert Rank.from_json(entry).to_json() == entry
        for status in entry["passes"].values():
            assert RankStatus.from_json(status).to_json() == status


# A 2-rank job's entries as perfdoctor run writes them (tests/e2e/test_hostile3.py's job):
# rank 1 died before writing results, rank 0 was stopped by torchrun before its bootstrap
# knew its exit code.
RANKS = {
    "0": {"rank": 0, "local_rank": 0, "world_size": 2, "host": "vm", "device": "cpu", "passes": {"light": {
        "status": "terminated (SIGTERM: torchrun stopped it after another rank failed, or the run timed out)",
        "exit_code": None, "ended_at_ns": 1796228014113089058}}, "light_pass": {"step_name": None, "how": None, "step_end_clock": "host"}},
    "1": {"rank": 1, "passes": {"light": {"status": "no results (the rank died before writing them: exit 5, as torchrun saw it)",
                                          "exit_code": 5, "torchrun_time_s": 1796228014}}},
}


def test_both_shapes_of_a_rank_status_keep_their_nulls():
    for entry in RANKS.values():
        assert Rank.from_json(entry).to_json() == entry
        assert list(Rank.from_json(entry).to_json()) == list(entry)
    # a rank that wrote results: its end, null when the bootstrap did not say; one that wrote
    # none: the exit code and time torchrun saw, null when torchrun did not say
    assert RankStatus(status="ok").to_json() == {"status": "ok", "exit_code": None, "ended_at_ns": None}
    silent = RankStatus(status="no results (the rank died before writing them: killed, or it never started)")
    assert list(silent.to_json()) == ["status", "exit_code", "torchrun_time_s"] and silent.no_results()
    assert Manifest.from_json({"ranks": RANKS}).rank_light_pass("0") == LightPass(step_end_clock="host")


def test_a_manifest_of_the_wrong_shape_is_one_error_naming_the_field():
    with pytest.raises(UsageError, match="light_pass.step_latency_ms"):
        Manifest.from_json({"light_pass": {"step_latency_ms": [1, -2]}})
    with pytest.raises(UsageError, match="field 'pass'"):
        PassConfig.from_json({"results": "x.json"})
    with pytest.raises(UsageError, match="clock_sync.monotonic_ns"):
        PassResults.from_json({"clock_sync": {"monotonic_ns": "soon"}})
    for children in (["__main__.worker"], {"__main__.worker (spawn)": "2"}):
        with pytest.raises(UsageError, match="field 'children'"):
            PassResults.from_json({"children": children})
    assert PassResults.from_json({"children": {"w (spawn)": 2}}).children_note() == (
        "the program ran work in child processes (w (spawn) x2), and perfdoctor times and traces only the process it starts")


# Keys that cannot move this round, per module. Each entry must still be needed: a key a
# module no longer spells fails the test, so the list only shrinks.
ALLOWED: dict[str, set[str]] = {
    # record/ builds the Manifest, its entries and the LightPass, and reads PassResults; what
    # it still spells are the keys of the rank facts a PassConfig carries, of the torchrun
    # facts and failures, Launch.to_json and doctor's own JSON.
    "perfdoctor/record/doctor.py": {"calibration", "collectors", "reason", "schema"},
    "perfdoctor/record/launch.py": {"exit_code", "how", "module", "options", "rank", "world_size"},
    # The same words as keys of other documents (metrics.json, rules, the baseline store,
    # engine configs, ranks.json, gate.json, the demo's headline.json, Kineto's
    # distributedInfo), not of the manifest: the readers below read it through
    # Manifest, LightPass, PassRun, Collector, RepeatProcess and PassResults.
    "perfdoctor/analysis/attribution.py": {"reason", "step", "steps"},
    "perfdoctor/analysis/bounds.py": {"reason", "step", "steps"},
    "perfdoctor/analysis/cpu.py": {"step_latency_ms", "steps"},
    "perfdoctor/analysis/hostgaps.py": {"step"},
    "perfdoctor/analysis/metrics.py": {"declared", "device", "reason", "schema", "steady_reason", "steady_start", "step", "step_name", "steps"},
    # ranks.json and distributedInfo
    "perfdoctor/analysis/ranks.py": {"device", "rank", "ranks", "schema", "step", "world_size"},
    "perfdoctor/analysis/serving.py": {"steps"},
    "perfdoctor/analysis/timeline.py": {"step"},
    "perfdoctor/bundle/store.py": {"reason", "schema"},
    "perfdoctor/cli/diff.py": {"ranks", "schema"},
    "perfdoctor/collectors/kineto_events.py": {"device"},
    "perfdoctor/collectors/nsys.py": {"device"},
    "perfdoctor/collectors/nvml.py": {"reason"},
    "perfdoctor/compare/comparability.py": {"gpu", "step_name", "steps", "tokens_per_step", "world_size"},
    "perfdoctor/compare/samples.py": {"step_latency_ms"},
    "perfdoctor/declare.py": {"step"},
    # headline.json, run_numbers' verdict; "steps" and "warmup" also of RunOptions' JSON (record/options.py)
    "perfdoctor/demo/show.py": {"collectors", "command", "device", "pass", "schema", "status", "steps", "warmup"},
    "perfdoctor/engine/fused.py": {"device"},
    "perfdoctor/engine/kernels/decode_attention.py": {"device"},
    "perfdoctor/engine/megakernel.py": {"device"},
    "perfdoctor/pipeline.py": {"world_size"},  # an nsys process's Origin.distributed, as Kineto's
    "perfdoctor/reports/attribution.py": {"steps"},
    "perfdoctor/reports/common.py": {"pass"},  # the findings' verdict counts
    # diff.json's reasons, and why each mismatched fact matters (MISMATCH_WHY, by fact)
    "perfdoctor/reports/diff_report.py": {"gpu", "reason", "schema", "step_name", "tokens_per_step", "world_size"},
    "perfdoctor/reports/gate_report.py": {"exit_code", "pass", "schema", "status"},  # gate.json and its checks
    "perfdoctor/reports/html.py": {"device", "step"},  # the activity table's columns
    "perfdoctor/reports/json.py": {"device", "rank", "reason", "schema", "status", "step_name", "steps"},  # findings.json and its entries
    "perfdoctor/reports/markdown.py": {"pass"},
    "perfdoctor/reports/ranks.py": {"device", "rank"},
    "perfdoctor/reports/summary.py": {"steps"},
    "perfdoctor/reports/terminal.py": {"pass"},
    "perfdoctor/rules/engine.py": {"pass", "schema", "status", "steps"},
    "perfdoctor/rules/estimates.py": {"step"},
    "perfdoctor/rules/evidence.py": {"step"},  # the timeline's gap table: each gap's step
    "perfdoctor/schema.py": {"device"},
}


def spelled_keys(path: Path) -> set[str]:
    """The protocol keys ``path`` spells as string constants used as keys: ``x["key"]``,
    ``x.get("key")`` (also setdefault and pop) and ``{"key": ...}``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Subscript):
            candidates = [node.slice]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "setdefault", "pop"):
            candidates = node.args[:1]
        elif isinstance(node, ast.Dict):
            candidates = [k for k in node.keys if k is not None]
        else:
            continue
        found |= {c.value for c in candidates if isinstance(c, ast.Constant) and c.value in KEYS}
    return found


def test_no_protocol_key_is_spelled_outside_the_protocol():
    spelled = {p.relative_to(ROOT).as_posix(): spelled_keys(p) for p in sorted(PACKAGE.rglob("*.py"))}
    spelled.pop("perfdoctor/bundle/protocol.py")
    new = {path: sorted(keys - ALLOWED.get(path, set())) for path, keys in spelled.items() if keys - ALLOWED.get(path, set())}
    assert not new, f"spell these through perfdoctor.bundle.protocol's fields: {new}"
    stale = {path: sorted(keys - spelled.get(path, set())) for path, keys in ALLOWED.items() if keys - spelled.get(path, set())}
    assert not stale, f"no longer spelled there: remove from ALLOWED: {stale}"
