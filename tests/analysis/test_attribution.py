"""Where the step went (perfdoctor.analysis.attribution): the parts add up to the step on
every fixture and every readable shared trace, busy time matches a hand computation from
the raw events, and the costs the shared README names come out first or second."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, SHARED_TRACES, run_cli_inprocess
from perfdoctor.analysis.attribution import BUSY_PARTS, PARTS, WAIT_PARTS, kernel_part
from perfdoctor.errors import UsageError
from perfdoctor.pipeline import diagnose
from perfdoctor.rules.estimates import untraced_idle_ms

ROOT = Path(__file__).resolve().parents[2]
SHARED = SHARED_TRACES
DEMO = ROOT / "perfdoctor" / "demo" / "data"
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".sqlite.gz")
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"the shared traces ({SHARED}) are not here")


def fixture_paths() -> list[Path]:
    files = sorted(p for p in FIXTURES.rglob("*") if p.name.endswith(TRACE_SUFFIXES) and (".kineto." in p.name or ".nsys." in p.name))
    return files + [DEMO / v for v in ("eager", "graph", "fused")]


def shared_paths() -> list[Path]:
    if not SHARED.is_dir():
        return []
    return sorted(p for p in SHARED.rglob("*") if p.is_file() and p.name.endswith(TRACE_SUFFIXES))


def shifted(src: Path, tmp: Path) -> Path:
    """``src`` with every ``ts`` less the smallest one: epoch-µs Kineto traces are refused by
    the reader until the reading branch lands; the times between events are unchanged."""
    opener = gzip.open if src.name.endswith(".gz") else open
    with opener(src, "rt") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    stamps = [e["ts"] for e in events if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
    base = min(stamps) if stamps else 0
    for e in events:
        if isinstance(e, dict) and isinstance(e.get("ts"), (int, float)):
            e["ts"] = e["ts"] - base
    out = tmp / src.name.replace(".gz", "")
    out.write_text(json.dumps(doc))
    return out


def readable(path: Path, tmp: Path):
    """The diagnosis of ``path``, shifting epoch timestamps where the reader refuses them;
    None where the trace is refused for another reason (said by the test's skip)."""
    try:
        return diagnose(path)
    except UsageError as err:
        if "valid 'ts'" in str(err) and path.name.endswith((".json", ".json.gz")):
            return diagnose(shifted(path, tmp))
        pytest.skip(f"{path.name}: refused today ({str(err)[:120]})")


def check_adds_up(d) -> None:
    a = d.analysis.attribution
    if a.reason:
        return  # no step with GPU work: nothing to attribute, and said so
    per = a.per_step
    assert not (per[list(PARTS)] < -1e-9).any().any(), "a negative part"
    total = per[list(PARTS)].sum(axis=1).to_numpy()
    np.testing.assert_allclose(total, per["step_ms"].to_numpy(), rtol=0.01)
    assert sum(a.step.values()) == pytest.approx(a.step_ms, rel=0.01)
    assert min(a.step.values()) >= -1e-9


@pytest.mark.parametrize("path", fixture_paths(), ids=lambda p: p.name)
def test_adds_up_on_every_fixture(path: Path, tmp_path: Path):
    check_adds_up(readable(path, tmp_path))


@needs_shared
@pytest.mark.parametrize("path", shared_paths(), ids=lambda p: p.name)
def test_adds_up_on_every_shared_trace(path: Path, tmp_path: Path):
    check_adds_up(readable(path, tmp_path))


def _raw_gpu(path: Path) -> list[tuple[float, float, str]]:
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh)
    cats = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
    return [(e["ts"] * 1e3, (e["ts"] + e["dur"]) * 1e3, cats[e["cat"].lower()]) for e in doc["traceEvents"]
            if isinstance(e, dict) and str(e.get("cat", "")).lower() in cats and e.get("ph") == "X"]


def _union(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    total, reach = 0.0, lo
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in intervals):
        if e <= reach:
            continue
        total += e - max(s, reach)
        reach = e
    return total


def test_busy_and_copies_against_the_raw_events():
    """Pageable-sync fixture: per step, GPU busy (all activities) and memcpy/memset time inside
    the critical-path window, by a plain sort-and-merge over the raw JSON events."""
    path = FIXTURES / "h200-pageable-sync-10steps.kineto.json.gz"
    d = diagnose(path)
    raw = _raw_gpu(path)
    t = d.analysis.timeline.steps
    per = d.analysis.attribution.per_step
    for row in per.itertuples():
        hi = float(t.loc[row.step, "gpu_end_ns"])
        lo = hi - float(t.loc[row.step, "critical_path_ns"])
        # the step's own activities: those starting inside its host range or later, before its GPU end
        mine = [(s, e) for s, e, _ in raw if e > lo and s < hi]
        copies = [(s, e) for s, e, k in raw if k != "kernel" and e > lo and s < hi]
        assert sum(getattr(row, p) for p in BUSY_PARTS) == pytest.approx(_union(mine, lo, hi) / 1e6, rel=1e-6, abs=1e-5)  # 10 ns: the raw µs stamps round per event
        assert row.memcpy_memset == pytest.approx(_union(copies, lo, hi) / 1e6, rel=1e-6, abs=1e-5)  # 10 ns: the raw µs stamps round per event
        assert sum(getattr(row, p) for p in WAIT_PARTS) == pytest.approx((hi - lo - _union(mine, lo, hi)) / 1e6, rel=1e-6, abs=1e-5)  # 10 ns: the raw µs stamps round per event


@pytest.mark.parametrize(
    "name,kind,family,part",
    [
        ("void cudnn::ops::nchwToNhwcKernel<__half, __half, float, false, true, (cudnnKernelDataType_t)0>(...)", "kernel", "other", "layout_transform"),
        ("void nhwcToNchwKernel<float, __half, float, true, false>(...)", "kernel", "other", "layout_transform"),
        ("void at::native::elementwise_kernel<128, 2, at::native::direct_copy_kernel_cuda(...)>", "kernel", "memory", "layout_transform"),
        ("void cudnn::bn_fw_inf_1C11_kernel_NCHW<__half, float, true, 1>(...)", "kernel", "norm", "normalisation"),
        ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 9, false, false>(...)", "kernel", "softmax", "attention"),
        ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(...)", "kernel", "softmax", "reduction_sampling"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "kernel", "communication", "communication"),
        ("Memcpy HtoD (Pinned -> Device)", "memcpy", "memory", "memcpy_memset"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, ...>", "kernel", "memory", "memcpy_memset"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "kernel", "gemm", "gemm"),
        ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(...)", "kernel", "reduction", "reduction_sampling"),
    ],
)
def test_kernel_parts(name, kind, family, part):
    assert kernel_part(name, kind, family) == part


# --- the shared README's rows about costs: first or second ---------------------------------

def _fails(d) -> list[str]:
    return [f.rule_id for f in d.findings if f.status == "fail"]


@needs_shared
def test_data_loader_first_on_num_workers_0_and_not_on_4(tmp_path: Path):
    w0 = readable(SHARED / "wild" / "kineto__tb_resnet50_num_workers_0.pt.trace.json.gz", tmp_path)
    assert w0.analysis.workload.kind == "training"
    a = w0.analysis.attribution
    assert a.largest(1)[0][0] == "data_loading"
    assert 40 < a.step["data_loading"] < 70.5  # of the README's 69.8 ms __next__, the part the GPU had nothing to do
    assert _fails(w0)[0] == "data-loading"
    w4 = readable(SHARED / "wild" / "kineto__tb_resnet50_num_workers_4.pt.trace.json.gz", tmp_path)
    assert "data-loading" not in _fails(w4)[:2]
    assert w4.analysis.attribution.step["data_loading"] < 5


@needs_shared
@pytest.mark.parametrize("renamed", ["load_batch", "perfdoctor.wait"])
def test_the_same_wait_made_by_no_dataloader_is_still_first(renamed: str, tmp_path: Path):
    """The ResNet-50 num_workers=0 trace with its DataLoader's ranges renamed: an input made
    by the step's own code (a user range ``load_batch``) or waited for from a process pool
    (perfdoctor run's ``perfdoctor.wait``). Before, nothing named the 59 ms the GPU waited at
    the start of each 177 ms step: the top finding was norm-elementwise's 15.5 ms. The wait
    is now the host-before-launch part, as long as the DataLoader's was (the same events),
    and its rule comes first with that time, bounded by the rest of the step it can hide behind."""
    src = SHARED / "wild" / "kineto__tb_resnet50_num_workers_0.pt.trace.json.gz"
    with gzip.open(src, "rt") as fh:
        doc = json.load(fh)
    n = 0
    for e in doc["traceEvents"]:
        if str(e.get("name", "")).startswith("enumerate(DataLoader)"):
            e["name"], e["cat"], n = renamed, "user_annotation", n + 1
    assert n >= 5
    path = tmp_path / "resnet50_renamed.json"
    path.write_text(json.dumps(doc))
    before, after = readable(src, tmp_path), readable(path, tmp_path)
    a, b = before.analysis.attribution, after.analysis.attribution
    assert b.step["data_loading"] == 0
    assert b.step["host_before_launch"] == pytest.approx(a.step["data_loading"] + a.step["host_before_launch"], rel=0.02)
    first = next(f for f in after.findings if f.status == "fail")
    assert first.rule_id == "host-before-launch"
    assert first.recovered_ms == pytest.approx(min(b.step["host_before_launch"], b.step_ms - b.step["host_before_launch"]))
    # where a DataLoader's range names it, it is data loading, said once
    assert "host-before-launch" not in _fails(before)


@needs_shared
def test_a_step_that_is_all_host_work_wins_little_by_preparing_ahead(tmp_path: Path):
    """HTA's call_stack trace: 395 ms of host work before a 45 µs kernel. Making the input
    ahead hides it behind the rest of the step at most: the estimate is the GPU's 45 µs."""
    d = readable(SHARED / "hta" / "call_stack__backward_thread.json", tmp_path)
    a = d.analysis.attribution
    assert a.share("host_before_launch") > 0.99
    (f,) = [f for f in d.findings if f.rule_id == "host-before-launch"]
    assert f.status == "fail" and f.recovered_ms == pytest.approx(a.step_ms - a.step["host_before_launch"]) and f.recovered_ms < 0.1


def _data_loader_next_ms(path: Path) -> list[float]:
    """The DataLoader ``__next__`` CPU ops of a raw Kineto trace, ms each."""
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e["dur"] / 1e3 for e in events if isinstance(e, dict) and e.get("ph") == "X"
            and str(e.get("name", "")).startswith("enumerate(DataLoader)") and "__next__" in str(e.get("name"))]


@needs_shared
@pytest.mark.parametrize("api", ["autograd_api", "profiler_api"])
def test_data_loader_first_whichever_api_traced_the_resnet(api: str, tmp_path: Path):
    """One program, two tracer APIs (README: data loading is the first finding). The
    autograd-API trace's first step is a 4.49 s warm-up with 468 ms of GPU work among
    ~165 ms steps with ~102 ms: averaged in, its GPU work filled the whole median step and
    data loading got 0 ms (issue 28's audit). Left out of the parts as warm-up by its device
    work (steady.device_warmup) and said so; the step stays in the rows and the metrics."""
    path = SHARED / "wild" / f"kineto__tb_resnet50_{api}_num_workers_0.pt.trace.json.gz"
    d = readable(path, tmp_path)
    a = d.analysis.attribution
    assert "data_loading" in [p for p, _ in a.largest(2)]  # beside the convolutions (45-48 ms)
    assert _fails(d)[0] == "data-loading"
    # near what the raw __next__ calls take (autograd: 49-86 ms, mean 52.8; profiler: 40-63, mean 46.6)
    assert a.step["data_loading"] == pytest.approx(float(np.mean(_data_loader_next_ms(path))), rel=0.15)
    assert a.busy_ms < 0.7 * a.step_ms  # the GPU is not busy for the whole step (idle 83 % over the span)
    if api == "autograd_api":
        assert "step 0 left out as warm-up" in a.note
        # kept in the rows and the metrics; the trace's sixth fetch trains whole (its optimizer
        # step too) before the trace ends: a step, since the last iteration ends where its
        # training ended (steps.trained_after_last)
        assert len(a.per_step) == d.analysis.value("steps") == 6
        assert a.step_ms == pytest.approx(d.analysis.value("step_latency_ms_p50"))


def test_the_host_inside_a_pageable_copy_call_is_the_copys_wait_not_host_preparation():
    """h200-pageable-sync: each step's first GPU work is a 4 MiB HtoD copy from pageable
    memory; the driver stages it while cudaMemcpyAsync blocks (~0.23 of the ~0.3 ms before
    the copy starts on the GPU). That part is host sync; only the host's work before the call
    (the dispatch of .to("cuda")) is host before launch. Per traced step, against the lead-in
    intervals less their overlap with the raw copy calls."""
    from perfdoctor.analysis import hostgaps

    d = diagnose(FIXTURES / "h200-pageable-sync-10steps.kineto.json.gz", step="copy_step")
    h = hostgaps.gap_hosts(d.analysis)
    lead = h[(h["where"] == hostgaps.LEAD_IN) & (h["host"] == "unknown")]
    calls = d.profile.calls
    copies = calls[calls["name"].str.startswith("cudaMemcpy")]
    per = d.analysis.attribution.per_step.set_index("step")
    seen = 0
    for step, rows in lead.groupby("step"):
        gap = sum(int(r.length_ns) for r in rows.itertuples())
        in_call = sum(max(0, min(int(c.end_ns), int(r.start_ns + r.length_ns)) - max(int(c.start_ns), int(r.start_ns)))
                      for r in rows.itertuples() for c in copies.itertuples())
        if step > 0:  # the first step's lead-in holds its warm-up too (2.6 ms)
            assert 0.5 * gap < in_call < gap  # most of it, not all: the dispatch comes first
        assert per.loc[step, "host_before_launch"] == pytest.approx((gap - in_call) / 1e6, abs=1e-6)
        seen += 1
    assert seen >= 9


def test_a_host_stall_in_a_steady_step_is_still_reported():
    """h200-serve-graph: one decode step waits 20.5 ms for the host (same 0.1 ms of GPU work as
    every step). It is no warm-up: it stays in the parts, and host-late-launches first."""
    d = diagnose(FIXTURES / "wild" / "h200-serve-graph.kineto.json.gz")
    a = d.analysis.attribution
    assert a.note is None or "warm-up" not in a.note
    assert max(WAIT_PARTS, key=lambda p: a.step[p]) == "host_late"
    assert _fails(d)[0] == "host-late-launches"


@needs_shared
def test_vllm_mi300x_host_side_first_and_no_graph_bubble_title():
    d = diagnose(SHARED / "wild" / "tracemap__vllm_mi300x_1000isl_10osl_32con.pt.trace.json.gz")
    a = d.analysis.attribution
    host = a.step["host_python"] + a.step["host_late"] + a.step["host_sync"]
    assert host > 20  # of ~27 ms idle per step, the host issuing late
    assert _fails(d)[0] in ("host-busy-in-gaps", "host-late-launches")
    assert not any("replayed graph" in f.title for f in d.findings)


@needs_shared
def test_vllm_h100_no_already_one_launch_claim():
    d = diagnose(SHARED / "wild" / "tracemap__vllm_h100_1000isl_10osl_32con.pt.trace.json.gz")
    for f in d.findings:
        if f.status == "fail" and f.remediation is not None:
            assert not any("already one launch per step" in s.lower() for s in f.remediation.steps), f.rule_id
    eager = next(f for f in d.findings if f.rule_id == "launches-per-step").values["eager_launches_per_step"].value
    assert eager > 300  # the README's 412 eager launches beside 81 graph launches (per decode step)


@needs_shared
def test_timesformer_attention_first_or_second():
    path = next((SHARED / "tracelens").glob("h100__facebook_timesformer*"))
    d = diagnose(path)
    busy = sorted(((p, d.analysis.attribution.step[p]) for p in BUSY_PARTS), key=lambda kv: -kv[1])
    assert busy[0][0] == "attention"
    assert "attention" in _fails(d)[:2]


@needs_shared
def test_pinned_copies_fill_the_h100_2gpu_step():
    d = diagnose(SHARED / "wild" / "nsysai__h100_2gpu_1s.sqlite.gz")
    a = d.analysis.attribution
    assert a.largest(1)[0][0] == "memcpy_memset"
    assert a.share("memcpy_memset") > 0.9  # 920 of 969 ms
    assert "memcpy-share" in _fails(d)[:2]


@needs_shared
def test_sglang_stall_behind_a_sync_copy_is_the_host_syncs_finding():
    """The README: a 493 ms stall behind hipMemcpyWithStream must be seen. It is the host
    waiting in a synchronous copy: the attribution's host-sync part, and host-syncs first
    (not a bubble a CUDA graph would remove)."""
    d = diagnose(SHARED / "tracelens" / "inference__sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz")
    a = d.analysis.attribution
    assert a.largest(1)[0][0] == "host_sync" and 480 < a.step["host_sync"] < 500
    first = next(f for f in d.findings if f.status == "fail")
    assert first.rule_id == "host-syncs"
    assert first.recovered_ms == pytest.approx(a.step["host_sync"], rel=0.01)
    assert all(f.recovered_ms is None or f.recovered_ms < 0.1 * a.step_ms for f in d.findings
               if f.status == "fail" and f.rule_id in ("memory-bubbles", "launch-rate", "launches-per-step"))


# --- the demo's graph and fused variants: no failure their own numbers contradict ----------

@pytest.mark.parametrize("variant", ["graph", "fused"])
def test_demo_fails_nothing_its_numbers_contradict(variant: str):
    d = diagnose(DEMO / variant)
    a = d.analysis.attribution
    fails = {f.rule_id: f for f in d.findings if f.status == "fail"}
    busy_share = a.busy_ms / a.step_ms
    if "kernel-share" in fails:
        assert busy_share < 0.6
    if "memory-bubbles" in fails:
        assert 1 - busy_share > 0.15
    rate = d.analysis.metrics["launch_rate_per_s"]
    assert rate.value == pytest.approx(d.analysis.value("launches_per_step") * d.analysis.value("steps_per_s"))
    # The untraced step's idle time: the attribution's (mean busy) or the estimates' cap
    # (median busy); the two summaries of one number differ by a fraction of a per cent.
    idle = max(a.step_ms - a.busy_ms, untraced_idle_ms(d.analysis))
    for f in fails.values():
        assert not any("already one launch per step" in s.lower() for s in f.remediation.steps)
        assert not any(s.lower().startswith(("capture the whole", "capture the decode step", "capture the step")) for s in f.remediation.steps), f.rule_id  # the steps replay a graph
        if f.recovered_ms is not None and f.recovered_ms / a.step_ms < 0.01:
            assert f.severity == "info", f.rule_id  # a sliver of the step is no error
        if f.estimate_kind in ("idle_between_kernels", "graph_replay_gaps", "beside_graph_gaps", "sync_wait_time"):
            assert f.recovered_ms <= idle + 1e-9, f.rule_id  # idle-based: never more than the GPU idled
    # The launch findings split the launch gaps: together no more than the idle time.
    split = [f.recovered_ms for f in fails.values() if f.estimate_kind in ("graph_replay_gaps", "beside_graph_gaps")]
    assert sum(split) <= idle + 1e-9


def test_reports_show_the_attribution_first(tmp_path: Path):
    trace = FIXTURES / "h200-pageable-sync-10steps.kineto.json.gz"
    md = tmp_path / "r.md"
    done = run_cli_inprocess("report", str(trace), "--format", "md", "-o", str(md))
    assert done.returncode == 0, done.stderr
    text = md.read_text()
    assert "### Where the step went" in text
    assert text.index("Where the step went") < text.index("### 1.")
    out = tmp_path / "r.html"
    assert run_cli_inprocess("report", str(trace), "--format", "html", "-o", str(out)).returncode == 0
    html = out.read_text()
    assert html.index("Where the step went") < html.index('class="finding')
    assert 'aria-label="Where the step went: one stacked bar per step"' in html
    js = tmp_path / "f.json"
    assert run_cli_inprocess("report", str(trace), "--format", "json", "-o", str(js)).returncode == 0
    doc = json.loads(js.read_text())
    assert sum(doc["attribution"]["parts"].values()) == pytest.approx(doc["attribution"]["step_ms"], rel=0.01)
    m = tmp_path / "m.json"
    assert run_cli_inprocess("analyze", str(trace), "--json", str(m)).returncode == 0
    metrics = json.loads(m.read_text())
    assert metrics["attribution"]["unit"] == "ms" and len(metrics["attribution"]["steps"]) == 10
