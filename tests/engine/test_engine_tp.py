"""The engine's tensor-parallel variant (--tp N) on CPU with gloo: its numerics against the
one-process engine, its command line, and perfdoctor's multi-rank report on it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from perfdoctor.engine.config import TINY, BadInput  # noqa: E402
from perfdoctor.engine.parallel import shard_config, shard_hf_state_dict  # noqa: E402
from perfdoctor.engine.weights import random_hf_state_dict  # noqa: E402
from perfdoctor.analysis.ranks import cross_rank  # noqa: E402

ROOT = Path(__file__).parents[2]
PROGRAMS = Path(__file__).parents[1] / "programs"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
ENGINE = ["-m", "perfdoctor.engine", "--config", "tiny", "--device", "cpu", "--tokens", "12", "--ctx", "32"]


def run(cmd: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


def test_shards_tile_the_full_weights():
    """Column-parallel shards stack back to the full matrix, row-parallel ones side by side."""
    hf = random_hf_state_dict(TINY, 0, "cpu", torch.float32)
    shards = [shard_hf_state_dict(TINY, hf, r, 2) for r in range(2)]
    for name, full in hf.items():
        parts = [s[name] for s in shards]
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            assert torch.equal(torch.cat(parts, dim=1), full)
        elif name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight", "up_proj.weight")):
            assert torch.equal(torch.cat(parts, dim=0), full)
        else:
            assert all(p is full for p in parts)  # replicated
    local = shard_config(TINY, 2)
    assert (local.q_heads, local.kv_heads, local.intermediate) == (2, 1, 64)
    with pytest.raises(BadInput, match="kv_heads 2 is not divisible by 4"):
        shard_config(TINY, 4)


def test_tp2_logits_and_tokens_match_one_process(tmp_path):
    done = run([*TORCHRUN, str(PROGRAMS / "tp_logits.py"), str(tmp_path / "out.json")], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["shard_q_heads"] == TINY.q_heads // 2
    assert out["max_abs_diff"] < 1e-4  # fp32: only the summation order differs
    assert out["tp_tokens"] == out["tokens"]


@pytest.mark.extended  # the same tokens: test_tp2_logits_and_tokens_match_one_process; the CLI's --tp 2: test_perfdoctor_run_on_the_tp_engine
def test_engine_cli_tp2_decodes_the_same_tokens(tmp_path):
    one = run([sys.executable, *ENGINE], tmp_path)
    two = run([*TORCHRUN, *ENGINE, "--tp", "2"], tmp_path)
    assert one.returncode == 0 and two.returncode == 0, two.stderr[-3000:]
    tokens = [line for line in one.stdout.splitlines() if line.startswith("tokens:")]
    assert tokens and tokens == [line for line in two.stdout.splitlines() if line.startswith("tokens:")]
    assert "tensor parallel" in two.stdout and two.stdout.count("decode:") == 1  # rank 0 prints


def test_engine_cli_tp_refused_outside_torchrun(tmp_path):
    done = run([sys.executable, *ENGINE, "--tp", "2"], tmp_path)
    assert done.returncode == 2 and done.stderr.strip() == "error: --tp 2 runs under torchrun --nproc-per-node 2 (WORLD_SIZE is not set)"
    fused = run([*TORCHRUN, *ENGINE, "--tp", "2", "--variant", "fused"], tmp_path)
    assert fused.returncode != 0 and "--tp works with the eager and graph variants" in fused.stderr


def test_perfdoctor_run_on_the_tp_engine(tmp_path):
    """Two all-reduces per layer per decode step, seen as the ranks' collectives."""
    cmd = [sys.executable, "-m", "perfdoctor", "run", "-q", "--out", "runs", "--steps", "8", "--", *TORCHRUN,
           *ENGINE[:-4], "--tokens", "40", "--ctx", "64", "--tp", "2"]
    done = run(cmd, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (bundle,) = (tmp_path / "runs").iterdir()
    view = cross_rank(bundle)
    table = view.table().set_index("rank")
    assert list(table.index) == [0, 1]
    assert (table["collectives_per_step"] == 2 * TINY.layers).all()
    assert view.runs[0].analysis.steps.name == "decode_step"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
@pytest.mark.parametrize("variant", ["eager", "graph"])
def test_gpu_tp2_decodes_the_one_gpu_tokens(tmp_path, variant):
    """NCCL all-reduces, captured in the CUDA graph for `graph`; fp32 so that the tokens match exactly."""
    gpu = ["-m", "perfdoctor.engine", "--config", "tiny", "--device", "cuda", "--dtype", "fp32", "--tokens", "32", "--ctx", "64", "--variant", variant]
    one = run([sys.executable, *gpu], tmp_path)
    two = run([*TORCHRUN, *gpu, "--tp", "2"], tmp_path)
    assert one.returncode == 0 and two.returncode == 0, two.stderr[-3000:]
    tokens = [line for line in one.stdout.splitlines() if line.startswith("tokens:")]
    assert tokens and tokens == [line for line in two.stdout.splitlines() if line.startswith("tokens:")]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_gpu_perfdoctor_run_on_the_tp2_graph_engine(tmp_path):
    """Llama-3.2-1B, TP 2, graph-captured: NCCL kernels are the ranks' communication, 2 per layer per step."""
    cmd = [sys.executable, "-m", "perfdoctor", "run", "-q", "--out", "runs", "--steps", "20", "--timeout", "500", "--", *TORCHRUN,
           "-m", "perfdoctor.engine", "--variant", "graph", "--tp", "2", "--tokens", "128"]
    done = run(cmd, tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (bundle,) = (tmp_path / "runs").iterdir()
    view = cross_rank(bundle)
    table = view.table().set_index("rank")
    assert set(view.comm_source.values()) == {"communication kernels (GPU)"}
    assert (table["collectives_per_step"] == 2 * 16).all()
    report = run([sys.executable, "-m", "perfdoctor", "analyze", str(bundle)], tmp_path)
    print(report.stdout)  # the report for docs/performance.md
    assert report.returncode == 0
