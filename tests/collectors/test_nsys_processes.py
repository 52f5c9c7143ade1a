"""Several processes in one Nsight Systems export (perfdoctor.collectors.nsys).

CUPTI numbers correlation ids per process, so a two-process export (``torchrun`` under
``nsys profile``) repeats ids: they are keyed by (process, id), and each process is its own
timeline, analysed like the ranks of a job. Truth is computed in the tests with sqlite3
from the raw tables: the union of kernel + memcpy + memset intervals per process.
"""

from __future__ import annotations

import gzip
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli_inprocess
from perfdoctor.analysis.metrics import analyze
from perfdoctor.analysis.ranks import nsys_processes
from perfdoctor.collectors import nsys

ROOT = Path(__file__).parents[2]
WILD = ROOT.parent / "shared" / "traces" / "wild"
ACTIVITY_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def _two_processes(path: Path) -> Path:
    """Two processes (pids 100 and 200) whose launches both use correlation ids 1 and 2:
    process 100 runs 10 ns kernels named a, process 200 runs 1000 ns kernels named b."""
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE StringIds (id INTEGER, value TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER, correlationId INTEGER,
            demangledName INTEGER, registersPerThread INTEGER, gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER,
            blockY INTEGER, blockZ INTEGER, staticSharedMemory INTEGER, dynamicSharedMemory INTEGER, graphNodeId INTEGER, globalPid INTEGER);
        INSERT INTO StringIds VALUES (1, 'cudaLaunchKernel'), (2, 'a'), (3, 'b');
        """
    )
    for pid, dev, name, dur, t0 in ((100, 0, 2, 10, 1000), (200, 1, 3, 1000, 5000)):
        for corr in (1, 2):
            start = t0 + corr * 2000
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, 1)", (start, start + 5, (pid << 24) | 7, corr))
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, 7, ?, ?, 32, 1, 1, 1, 32, 1, 1, 0, 0, NULL, ?)",
                        (start + 100, start + 100 + dur, dev, corr, name, pid << 24))
    con.commit()
    con.close()
    return path


def test_colliding_correlation_ids_stay_with_their_process(tmp_path):
    db = _two_processes(tmp_path / "two.sqlite")
    merged = nsys.load(db)
    calls = merged.calls.set_index("correlation")
    assert merged.calls["correlation"].is_unique  # ids 1 and 2 of both processes, told apart
    for k in merged.activities.itertuples():
        launcher = calls.loc[k.correlation]
        assert launcher["tid"] >> 24 == (100 if k.name == "a" else 200)  # launched by its own process
        assert launcher["start_ns"] + 100 == k.start_ns
    split = nsys.load_processes(db)
    assert sorted(split) == [100, 200]
    for pid, name, dur in ((100, "a", 10), (200, "b", 1000)):
        p = split[pid]
        assert p.activities["name"].tolist() == [name, name]
        assert (p.activities["end_ns"] - p.activities["start_ns"]).tolist() == [dur, dur]
        assert sorted(p.calls["correlation"]) == [1, 2] and set(p.calls["tid"].to_numpy() >> 24) == {pid}


def test_one_process_keeps_its_ids(tmp_path):
    fixture = ROOT / "tests" / "fixtures" / "h200-decode-eager-5steps.nsys.sqlite.gz"
    db = tmp_path / "one.sqlite"
    db.write_bytes(gzip.decompress(fixture.read_bytes()))
    con = sqlite3.connect(db)
    raw = sorted(r[0] for r in con.execute("SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    con.close()
    p = nsys.load(db)
    assert sorted(p.activities.loc[p.activities["kind"] == "kernel", "correlation"]) == raw
    assert len(nsys.load_processes(db)) == 1


def _db(name: str, tmp_path: Path) -> Path:
    src = WILD / name
    if not src.exists():
        pytest.skip(f"{WILD} is absent (the shared real traces)")
    db = tmp_path / name.removesuffix(".gz")
    db.write_bytes(gzip.decompress(src.read_bytes()))
    return db


def _union(iv: list[tuple[int, int]], lo: int | None = None, hi: int | None = None) -> int:
    total, reach = 0, None
    for s, e in sorted(iv):
        if lo is not None:
            s, e = max(s, lo), min(e, hi)
            if e <= s:
                continue
        total += max(0, e - (s if reach is None else max(s, reach)))
        reach = e if reach is None else max(reach, e)
    return total


def _intervals(db: Path, where: str = "1") -> dict[int, list[tuple[int, int]]]:
    """Per process (pid), the kernel, memcpy and memset intervals, straight from the tables."""
    con = sqlite3.connect(db)
    out: dict[int, list[tuple[int, int]]] = {}
    for t in ACTIVITY_TABLES:
        for s, e, proc in con.execute(f"SELECT start, end, globalPid >> 24 FROM {t} WHERE {where}"):
            out.setdefault(proc & 0xFFFFFF, []).append((s, e))
    con.close()
    return dict(sorted(out.items()))


@pytest.mark.parametrize("name, readme", [("nsysai__mfu_2gpu_before.sqlite.gz", (0.087, 0.105)),
                                          ("nsysai__mfu_2gpu_after.sqlite.gz", (0.198, 0.151))])
def test_idle_per_gpu_of_a_two_process_export(name, readme, tmp_path):
    db = _db(name, tmp_path)
    raw = _intervals(db)
    assert len(raw) == 2
    # the traces README: idle of each process's whole span (its first to its last GPU work)
    hand = [1 - _union(iv) / (max(e for _, e in iv) - min(s for s, _ in iv)) for iv in raw.values()]
    assert hand == pytest.approx(list(readme), abs=0.001)
    profiles, _, _, _ = nsys_processes(db)
    assert len(profiles) == 2
    for (pid, iv), p in zip(raw.items(), profiles.values()):
        assert p.origin.process == pid
        a = analyze(p)
        lo, hi = a.steps.span
        # gpu_idle_ratio over the steps' span S, the union taken from the raw events
        assert a.metrics["gpu_idle_ratio"].value == pytest.approx(1 - _union(iv, lo, hi) / (hi - lo), abs=1e-6)


def test_flash_kernels_per_process(tmp_path):
    counts = {}
    for name in ("nsysai__mfu_2gpu_before.sqlite.gz", "nsysai__mfu_2gpu_after.sqlite.gz"):
        db = _db(name, tmp_path)
        con = sqlite3.connect(db)
        raw = dict(con.execute("SELECT k.globalPid >> 24 & 16777215, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
                               "ON s.id = k.demangledName WHERE s.value LIKE '%flash_fwd_kernel%' GROUP BY 1"))
        con.close()
        got = {pid: int(p.activities["name"].str.contains("flash_fwd_kernel").sum()) for pid, p in nsys.load_processes(db).items()}
        assert got == raw
        counts[name] = sum(got.values())
    assert list(counts.values()) == [68, 60]  # the traces README


def test_pinned_copies_fill_each_gpu(tmp_path):
    db = _db("nsysai__h100_2gpu_1s.sqlite.gz", tmp_path)
    con = sqlite3.connect(db)
    pinned = {r[0]: r[1] for r in con.execute("SELECT id, name FROM ENUM_CUDA_MEM_KIND")}
    htod = {r[0] for r in con.execute("SELECT id FROM ENUM_CUDA_MEMCPY_OPER WHERE name = 'CUDA_MEMCPY_KIND_HTOD'")}
    rows = con.execute("SELECT start, end, globalPid >> 24 & 16777215, copyKind, srcKind FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchall()
    con.close()
    spans = {pid: max(e for _, e in iv) - min(s for s, _ in iv) for pid, iv in _intervals(db).items()}
    for pid, p in nsys.load_processes(db).items():
        hand = _union([(s, e) for s, e, q, k, src in rows if q == pid and k in htod and pinned[src].endswith("PINNED")])
        a = p.activities
        mine = a[(a["copy_kind"] == "HtoD") & (a["host_mem"] == "pinned")]
        assert _union(list(zip(mine["start_ns"], mine["end_ns"]))) == hand
        assert 915e6 < hand < 925e6 and 965e6 < spans[pid] < 975e6  # 920 of 969 ms (the traces README)


def test_analyze_shows_one_row_per_process(tmp_path):
    db = _two_processes(tmp_path / "two.sqlite")
    done = run_cli_inprocess("analyze", str(db))
    assert done.returncode == 0, done.stderr
    assert "one timeline per process" in done.stdout
    assert "ranks by process id: rank 0 = pid 100, rank 1 = pid 200" in done.stdout + done.stderr
