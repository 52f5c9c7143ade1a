"""``diff`` and ``gate`` on Nsight Systems exports of several processes (one per GPU): each
process is compared with its like, as ``analyze`` shows them (ranks in process-id order),
never one merged timeline where one GPU's idle time hides behind the other's work.

The real pair ``wild/nsysai__mfu_2gpu_before`` → ``_after`` of the shared corpus (two
processes on two GPUs each), run as the user runs it: the ``perfdoctor`` command.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest

from conftest import run_cli_inprocess

ROOT = Path(__file__).resolve().parents[2]
WILD = ROOT.parent / "shared" / "traces" / "wild"
BEFORE, AFTER = WILD / "nsysai__mfu_2gpu_before.sqlite.gz", WILD / "nsysai__mfu_2gpu_after.sqlite.gz"
pytestmark = pytest.mark.skipif(not BEFORE.exists(), reason=f"the shared real traces are not here ({WILD})")


def _kernel_pids(path: Path, tmp_path: Path) -> list[int]:
    """The processes that ran kernels, by plain SQL on the export (pid = globalPid bits 24-47)."""
    db = tmp_path / path.name.removesuffix(".gz")
    db.write_bytes(gzip.decompress(path.read_bytes()))
    with sqlite3.connect(db) as con:
        return sorted(r[0] for r in con.execute("SELECT DISTINCT (globalPid >> 24) & 16777215 FROM CUPTI_ACTIVITY_KIND_KERNEL"))


@pytest.fixture(scope="module")
def diffed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nsysdiff")
    done = run_cli_inprocess("diff", BEFORE, AFTER, "--no-rules", "--json", tmp / "diff.json")
    analyzed = run_cli_inprocess("analyze", BEFORE, "--json", tmp / "before.json")
    return done, json.loads((tmp / "diff.json").read_text()), analyzed, json.loads((tmp / "before.json").read_text()), tmp


def test_diff_compares_each_process_with_its_like(diffed) -> None:
    done, d, analyzed, before, tmp = diffed
    assert done.returncode == 0, done.stderr
    assert analyzed.returncode == 0, analyzed.stderr
    assert d["schema"] == "perfdoctor.diff-ranks/1" and sorted(d["ranks"]) == ["0", "1"]
    pids_before, pids_after = _kernel_pids(BEFORE, tmp), _kernel_pids(AFTER, tmp)
    assert len(pids_before) == len(pids_after) == 2
    for k in (0, 1):
        r = d["ranks"][str(k)]
        assert r["before"].endswith(f"(rank {k}: pid {pids_before[k]})")
        assert r["after"].endswith(f"(rank {k}: pid {pids_after[k]})")
        # each side's numbers are that process's, as analyze shows it
        mine = before["per_rank"][str(k)]["metrics"]
        for key in ("gpu_idle_ratio", "steps", "kernels_per_step"):
            assert r["metrics"][key]["before"] == pytest.approx(mine[key]["value"], rel=1e-9), key
    assert "rank 0" in done.stdout and "rank 1" in done.stdout
    # the merged timeline (both GPUs as one) is not what either process did
    idle = [d["ranks"][k]["metrics"]["gpu_idle_ratio"]["before"] for k in ("0", "1")]
    assert idle[0] != pytest.approx(idle[1], rel=0.05)


def test_gate_checks_every_process(tmp_path: Path) -> None:
    # idle after/before: rank 0 0.070 -> 0.197 (+181 %), rank 1 0.099 -> 0.151 (+52 %):
    # a +100 % budget fails on rank 0 only, which a merged timeline could not say
    done = run_cli_inprocess("gate", AFTER, "--baseline", BEFORE, "--fail-on", "gpu_idle_ratio:+100%", "--json", tmp_path / "gate.json")
    assert done.returncode == 1, done.stdout + done.stderr
    checks = json.loads((tmp_path / "gate.json").read_text())["checks"]
    status = {c["name"]: c["status"] for c in checks}
    assert status == {"rank 0: budget gpu_idle_ratio:+100%": "fail", "rank 1: budget gpu_idle_ratio:+100%": "pass"}, checks


def test_one_process_of_several_against_a_single_process_run_is_not_comparable(tmp_path: Path) -> None:
    # a Kineto trace of one process (world size 1) against the two-process export: its
    # rank 0 only, and said loudly, as for a multi-rank bundle against a single run
    single = ROOT / "tests" / "fixtures" / "h200-decode-eager-5steps.kineto.json.gz"
    done = run_cli_inprocess("diff", single, BEFORE, "--no-rules", "--json", tmp_path / "d.json")
    assert done.returncode == 0, done.stderr
    d = json.loads((tmp_path / "d.json").read_text())
    assert d["after"].endswith("(rank 0: pid 144)")
    assert "world_size: before 1, after 2" in d["not_comparable"]
