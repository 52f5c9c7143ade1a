"""Serving steps (perfdoctor.analysis.serving) on the real serving-loop traces.

The traces mark steps as SGLang (``step[DECODE bs=32]``, ``step[PREFILL bs=4 tokens=512]``)
and vLLM (``execute_context_0(0)_generation_32(32)``) do; the facts files list the step
names in order. Tokens and queue delays are recomputed from the JSON in the test.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfdoctor.analysis import serving
from perfdoctor.pipeline import load_trace
from perfdoctor.analysis.steps import find_steps

WILD = Path(__file__).parents[1] / "fixtures" / "wild"


def _tokens_by_hand(name: str) -> tuple[str, int, int]:
    """(kind, batch, tokens) read with plain string operations."""
    if name.startswith("execute_context_"):
        ctx, gen = name[len("execute_context_"):].split("_generation_")
        c, ct = ctx.rstrip(")").split("(")
        g, gt = gen.rstrip(")").split("(")
        c, ct, g, gt = int(c), int(ct), int(g), int(gt)
        kind = "mixed" if c and g else "prefill" if c else "decode"
        return kind, c + g, ct + gt
    inner = name[len("step["):-1].split()
    fields = dict(f.split("=") for f in inner[1:])
    bs = int(fields["bs"])
    toks = int(fields.get("tokens", fields.get("toks", bs)))
    return {"DECODE": "decode", "PREFILL": "prefill", "EXTEND": "prefill"}[inner[0]], bs, toks


def _json_steps(path: Path) -> list[dict]:
    ev = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
    ns = lambda v: round(v * 1000)  # noqa: E731
    ranges = sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["name"]) for e in ev if e.get("cat") == "user_annotation")
    calls = [(ns(e["ts"]), e["args"]["correlation"]) for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})]
    gpu = {}
    for e in ev:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            gpu.setdefault(e["args"]["correlation"], []).append(ns(e["ts"]))
    out = []
    for lo, hi, name in ranges:
        firsts = [(min(gpu[c]), t) for t, c in calls if lo <= t <= hi and c in gpu]
        first_gpu, launch = min(firsts)
        out.append({"name": name, "start": lo, "end": hi, "first_gpu": first_gpu, "launch": launch})
    return out


@pytest.mark.parametrize("fixture,facts", [("h200-serve-eager", "serve-eager.facts.json"), ("h200-serve-graph", "serve-graph.facts.json")])
def test_serving_steps(fixture, facts):
    path = WILD / f"{fixture}.kineto.json.gz"
    facts = json.loads((WILD / facts).read_text())
    p = load_trace(path)
    # find_steps picks every serving step (vLLM and SGLang names), not just the most frequent name
    s = find_steps(p)
    assert s.name == serving.STEP_NAME and s.count == len(facts["steps"])
    assert s.table["name"].tolist() == facts["steps"]
    # --step with an exact name that fnmatch would misread ("[...]" is a character class)
    assert find_steps(p, "step[DECODE bs=32]").count == facts["steps"].count("step[DECODE bs=32]")
    assert find_steps(p, "serving").count == len(facts["steps"])

    ranges = serving.step_ranges(p)
    assert ranges["name"].tolist() == facts["steps"]
    table, own = serving.steps_table(p, ranges)
    truth = _json_steps(path)
    assert [t["name"] for t in truth] == facts["steps"]

    for i, t in enumerate(truth):
        kind, batch, tokens = _tokens_by_hand(t["name"])
        assert table.loc[i, "kind"] == kind
        assert table.loc[i, "batch"] == batch
        assert table.loc[i, "tokens"] == tokens
        assert table.loc[i, "engine"] == ("vllm" if t["name"].startswith("execute_") else "sglang")
    assert set(table.loc[table["kind"] == "decode", "batch"]) == {facts["batch"]}

    q = serving.queue_delay(p, table, own.activity_step)
    for i, t in enumerate(truth):
        assert q.loc[i, "first_gpu_ns"] == t["first_gpu"]
        assert q.loc[i, "launch_ns"] == t["launch"]
        assert q.loc[i, "queue_delay_ns"] == t["first_gpu"] - t["launch"]
        assert q.loc[i, "host_to_gpu_ns"] == t["first_gpu"] - t["start"]
        assert q.loc[i, "queue_delay_ns"] >= 0

    tp = serving.throughput(table)
    for i, t in enumerate(truth):
        _, _, tokens = _tokens_by_hand(t["name"])
        ms = (t["end"] - t["start"]) / 1e6
        assert tp.loc[i, "ms_per_token"] == pytest.approx(ms / tokens)
        assert tp.loc[i, "tokens_per_s"] == pytest.approx(tokens / (ms / 1e3))
    tot = serving.totals(tp)
    decode = [t for t in truth if _tokens_by_hand(t["name"])[0] == "decode"]
    ms = sum(t["end"] - t["start"] for t in decode) / 1e6
    assert tot["decode"]["tokens"] == 32 * len(decode)
    assert tot["decode"]["tokens_per_s"] == pytest.approx(32 * len(decode) / (ms / 1e3))
    assert tot["prefill"]["tokens"] == 512 * 2


def test_graph_steps_own_replayed_kernels():
    """Graph-replayed decode steps own every replayed kernel (one cudaGraphLaunch each)."""
    p = load_trace(WILD / "h200-serve-graph.kineto.json.gz")
    table, _ = serving.steps_table(p)
    eager, _ = serving.steps_table(load_trace(WILD / "h200-serve-eager.kineto.json.gz"))
    dec = table["kind"] == "decode"
    assert (table.loc[dec, "kernels"].to_numpy() == eager.loc[dec, "kernels"].to_numpy()).all()
    assert (table.loc[dec, "launches"] < eager.loc[dec, "launches"]).all()


def test_names():
    cases = {
        "execute_context_0(0)_generation_32(32)": ("vllm", "decode", 32, 32, 0, 32),
        "execute_context_4(512)_generation_0(0)": ("vllm", "prefill", 4, 512, 512, 0),
        "execute_context_5(10)_generation_3(8)": ("vllm", "mixed", 8, 18, 10, 8),
        "step[DECODE bs=64]": ("sglang", "decode", 64, 64, 0, 64),
        "step[EXTEND bs=17 toks=8192]": ("sglang", "prefill", 17, 8192, 8192, 0),
        "step[ EXTEND bs=4 toks=512 ]": ("sglang", "prefill", 4, 512, 512, 0),
        "step[PREFILL bs=4 tokens=512]": ("sglang", "prefill", 4, 512, 512, 0),
        "step[MIXED bs=8 toks=100]": ("sglang", "mixed", 8, 108, 100, 8),
        "step[IDLE bs=0]": ("sglang", "idle", 0, 0, 0, 0),
        "step[decode bs=2]": ("sglang", "decode", 2, 2, 0, 2),
    }
    for name, want in cases.items():
        assert serving.parse_name(name) == want, name
    for name in ["ProfilerStep#3", "step", "decode_step", "step[DECODE]", "execute_model", None]:
        assert serving.parse_name(name) is None
    parsed = serving.parse(pd.Series(list(cases) + ["x", None]))
    assert parsed["engine"].tolist()[-2:] == ["", ""]
    assert np.isnan(parsed["tokens"].iloc[-1])


def test_nested_serving_ranges_keep_the_outer():
    from perfdoctor.profile import RANGE_COLUMNS, Profile, frame

    r = frame(
        RANGE_COLUMNS,
        {
            "name": ["step[DECODE bs=8]", "execute_context_0(0)_generation_8(8)", "step[DECODE bs=8]", "execute_context_0(0)_generation_8(8)"],
            "start_ns": [0, 10, 100, 110],
            "end_ns": [90, 80, 190, 180],
            "tid": [0, 0, 0, 0],
            "source": ["record_function"] * 4,
        },
    )
    got = serving.step_ranges(Profile(ranges=r))
    assert got["start_ns"].tolist() == [0, 100]
