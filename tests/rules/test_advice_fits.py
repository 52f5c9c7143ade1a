"""Issue 28, audit of 2026-12-02: advice for one patient is not given to another.

Every trace in the shared corpus was reported and its first findings read against what the
trace is (docs/results/audit-2026-12-02.md). Classes of wrong advice found there:

* a token embedding alone made a model a decode loop: BERT (``BertEmbeddings``) and the video
  transformer TimeSformer (``TimesformerEmbeddings``, a patch convolution) were ``llm-decode``
  and were told to write a MegaKernel and quantise to int4 (GPTQ) by ``dram-bandwidth``;
* the base texts were the decode tutorial's, so any inference task without its own variant (a
  model not recognised, an encoder, a serving engine; the vision / diffusion ``launches-per-step``
  snippet) was told to "capture the whole decode step", fuse "RMSNorm, rotary" or given a
  ``decode_step`` snippet;
* a ResNet *training* step was told to "fold batch norm into the preceding convolution" on an
  ``eval()`` model.

What a trace is, is read here from the raw events with plain Python, not from perfdoctor.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import SHARED_TRACES
from perfdoctor.analysis.steps import call_groups
from perfdoctor.pipeline import diagnose
from perfdoctor.reports.estimates import formula

ROOT = Path(__file__).resolve().parents[2]
SHARED = SHARED_TRACES
RUN = ROOT / "docs" / "results" / "h200-real-2026-12-02"
DEMO = ROOT / "perfdoctor" / "demo" / "data"
BERT = SHARED / "tracelens" / "mi300__gaunernst_bert-small-uncased__1016001.json.gz"
TIMESFORMER = SHARED / "tracelens" / "h100__facebook_timesformer-base-finetuned-k400__1016002.json.gz"
TOY = SHARED / "hta" / "critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz"
RESNET_TRAIN = SHARED / "hta" / "ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
VLLM_EAGER = SHARED / "tracelens" / "b200__eager_trace.json.gz"

DECODE_WORDS = re.compile(r"decode[ _](?:step|loop)|per token|rmsnorm|rotary|megakernel per|static_tok|gptq|int4", re.I)
need_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"the shared traces ({SHARED}) are not here")


def _names(path: Path, cat: str | None = None) -> list[str]:
    """The names of the trace's complete events (of category ``cat`` only, when given)."""
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return [str(e.get("name", "")) for e in events if e.get("ph") == "X" and (cat is None or e.get("cat") == cat)]


def _decoder_named(names: list[str]) -> bool:
    """What a decoder language model names (norm, rotary positions, KV cache, head, generation)."""
    return any(re.search(r"rms_?norm|rotary|kv_?cache|lm_head|causallm|generate", n, re.I) for n in names if not n.startswith("<built-in"))


def _failed(report):
    return [f for f in report.findings if f.status == "fail"]


def _advice(f) -> str:
    r = f.remediation
    return " ".join([*r.steps, r.snippet or ""]) if r is not None else ""


@need_shared
@pytest.mark.parametrize("path,task", [(BERT, "inference"), (TIMESFORMER, "vision")])
def test_an_embedding_alone_is_not_a_decode_loop(path: Path, task: str):
    names = _names(path)
    assert any("Embeddings" in n for n in names) and not _decoder_named(names)  # what the trace is
    report = diagnose(path, warnings=False)
    assert report.analysis.workload.task == task
    dram = next(f for f in report.findings if f.rule_id == "dram-bandwidth")
    assert dram.status != "fail"  # TimeSformer's was #3, an error: "MegaKernel ... int4 (GPTQ)"


@need_shared
@pytest.mark.parametrize("path", [BERT, TOY], ids=["bert", "toy-matmul"])
def test_inference_not_recognised_is_not_told_about_decode(path: Path):
    assert not _decoder_named(_names(path))
    report = diagnose(path, warnings=False)
    failed = _failed(report)
    assert any(f.rule_id == "memory-bubbles" for f in failed)
    wrong = {f.rule_id: DECODE_WORDS.findall(_advice(f)) for f in failed if DECODE_WORDS.search(_advice(f))}
    assert not wrong


def test_an_image_model_gets_no_decode_snippet():
    report = diagnose(RUN / "vit_small_b1-trace.json.gz", warnings=False)
    lps = next(f for f in report.findings if f.rule_id == "launches-per-step")
    assert lps.status == "fail" and "decode_step" not in _advice(lps)
    assert not [f.rule_id for f in _failed(report) if DECODE_WORDS.search(_advice(f))]


@pytest.mark.parametrize("trace,want,not_want", [("vit_small_b1", "the matmuls", "convolutions"), ("resnet50_b1", "convolutions", "matmuls")])
def test_an_image_model_s_fusion_advice_names_what_its_kernels_sit_between(trace: str, want: str, not_want: str):
    """ViT-small has one patch convolution; its short kernels sit between linear layers'
    GEMMs. short-kernels told it the kernels "between convolutions" fuse."""
    report = diagnose(RUN / f"{trace}-trace.json.gz", warnings=False)
    for rule_id in ("short-kernels", "memory-bubbles"):
        f = next(f for f in report.findings if f.rule_id == rule_id)
        assert f.status == "fail" and want in _advice(f) and not_want not in _advice(f), (rule_id, _advice(f))


SLIDE_BUNDLE = ROOT / "docs" / "results" / "h100-2026-12-05d" / "slide_seg_512-bundle"


def test_sliding_window_inference_is_told_to_batch_its_windows(tmp_path: Path):
    """mmsegmentation's slide_inference on the H100: 25 crops per image, each a forward of a
    few small kernels; the GPU idles for most of the step. The fix is the windows in one
    batch, before CUDA graphs. The bundle was recorded before the run wrote ``windows`` into
    its module step: its own light series says so, read by today's rule, and the manifest
    gets what the run writes now."""
    light = json.loads((SLIDE_BUNDLE / "raw" / "light.json").read_text())
    calls = light["modules"]["0"]["Sequential.forward"]
    groups = call_groups(calls["host_start_ns"], calls["host_end_ns"], calls["tid"], None, calls["window"])
    assert groups is not None and groups.windows and groups.sizes == [25] * 40
    bundle = tmp_path / "bundle"
    shutil.copytree(SLIDE_BUNDLE, bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["light_pass"]["module"]["windows"] = True
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    for path, windowed in [(bundle, True), (SLIDE_BUNDLE, False)]:
        report = diagnose(path, warnings=False)
        mb = next(f for f in report.findings if f.rule_id == "memory-bubbles")
        assert mb.status == "fail" and mb.rank == 1
        assert ("stack the windows into one batch" in mb.remediation.steps[0]) == windowed, mb.remediation.steps[0]


def test_decode_keeps_the_decode_wording():
    report = diagnose(DEMO / "eager", warnings=False)
    assert report.analysis.workload.task == "llm-decode"
    mb = next(f for f in report.findings if f.rule_id == "memory-bubbles")
    assert mb.status == "fail" and "Capture the whole decode step" in _advice(mb)


@need_shared
def test_a_training_step_is_not_told_to_fold_batch_norm():
    names = _names(RESNET_TRAIN)
    assert any("Backward" in n for n in names) and any(re.search(r"batch_norm|bn_fw", n) for n in names)
    report = diagnose(RESNET_TRAIN, warnings=False)
    ne = next(f for f in report.findings if f.rule_id == "norm-elementwise")
    assert ne.status == "fail"
    assert not re.search(r"fold|fuse_modules|eval\(\)", _advice(ne)), _advice(ne)


@need_shared
def test_a_serving_engine_is_told_about_its_own_graphs():
    names = _names(VLLM_EAGER)
    assert any(n.startswith("execute_context_") for n in names)
    assert not any("GraphLaunch" in n for n in names)  # eager: no graph replayed
    report = diagnose(VLLM_EAGER, warnings=False)
    mb = next(f for f in report.findings if f.rule_id == "memory-bubbles")
    assert mb.status == "fail" and "enforce_eager" in _advice(mb) and "decode_step" not in _advice(mb)


SD35 = SHARED / "tracelens" / "inference__xdit_sd_3.5__profile_trace_rank_0.json.gz"
VLLM_MI300X = SHARED / "wild" / "tracemap__vllm_mi300x_1000isl_10osl_32con.pt.trace.json.gz"


@need_shared
@pytest.mark.parametrize("path,want", [(VLLM_EAGER, "scheduling"), (VLLM_MI300X, "scheduling"), (SD35, "reduce-overhead")],
                         ids=["vllm-b200", "vllm-mi300x", "sd3.5"])
def test_host_python_in_an_engine_is_not_a_data_loader(path: Path, want: str):
    """The host Python the GPU waits for in a serving engine is its scheduler; in a compiled
    denoiser, inductor's wrapper launching kernels. No DataLoader is in these programs."""
    assert not any("DataLoader" in n for n in _names(path))
    report = diagnose(path, warnings=False)
    f = next(f for f in report.findings if f.rule_id == "host-busy-in-gaps")
    assert f.status == "fail" and f.rank <= 2  # the first or second finding on each
    assert "DataLoader" not in _advice(f) and want in _advice(f)


@need_shared
def test_a_transformer_with_one_patch_convolution_is_not_told_channels_last():
    """TimeSformer converts NCHW<->NHWC around its one patch-embedding convolution; its GEMMs
    are linear layers. Before: layout-transforms added 0.14 × 56.6 ms of convolution + GEMM +
    normalisation as an "NCHW penalty" (18.7 ms) and led with channels-last."""
    with gzip.open(TIMESFORMER, "rt") as fh:
        kernels = [e for e in json.load(fh)["traceEvents"] if e.get("cat") == "kernel"]
    conv = sum(e["dur"] for e in kernels if re.search(r"fprop|conv", e["name"], re.I) and "nchwToNhwc" not in e["name"])
    assert conv / sum(e["dur"] for e in kernels) < 0.01  # the convolution is a sliver of the GPU time
    report = diagnose(TIMESFORMER, warnings=False)
    f = next(f for f in report.findings if f.rule_id == "layout-transforms")
    layout_ms = report.analysis.attribution.step["layout_transform"]
    assert f.status == "fail" and f.recovered_ms == pytest.approx(layout_ms)  # no penalty on the GEMMs
    assert not any("channels-last" in s or "channels_last" in s for s in f.remediation.steps)


def test_a_convolution_network_keeps_channels_last():
    report = diagnose(RUN / "resnet50_b1-trace.json.gz", warnings=False)
    f = next(f for f in report.findings if f.rule_id == "layout-transforms")
    assert f.status == "fail" and "NCHW penalty" in formula(f.estimate)
    assert any("channels_last" in s for s in f.remediation.steps)


VLLM_H100 = SHARED / "wild" / "tracemap__vllm_h100_1000isl_10osl_32con.pt.trace.json.gz"
TRAINING_WORDS = re.compile(r"DDP|FSDP|DistributedDataParallel|gradient|backward", re.I)


@need_shared
@pytest.mark.parametrize("path,rule_id", [(VLLM_H100, "comm-overlap"), (VLLM_MI300X, "comm-share")], ids=["vllm-h100", "vllm-mi300x"])
def test_an_inference_server_is_not_told_about_gradients(path: Path, rule_id: str):
    """vLLM at TP=2 (tracemap): its collectives are tensor parallelism's all-reduces; the
    trace has no backward op and no optimizer step."""
    names = _names(path)
    assert any(re.search(r"all_?reduce|nccl|rccl", n, re.I) for n in names)
    assert not any(re.search(r"Backward\d*$|^Optimizer\.step", n) for n in names)
    report = diagnose(path, warnings=False)
    f = next(f for f in report.findings if f.rule_id == rule_id)
    assert f.status == "fail" and f.rank <= 3
    assert not TRAINING_WORDS.search(_advice(f)), _advice(f)


SGLANG_DECODE = SHARED / "tracelens" / "inference__sglang_decode__sglang_Qwen3-8B_decode.json.gz"
SGLANG_PD = SHARED / "tracelens" / "inference__sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz"


@need_shared
@pytest.mark.parametrize("path", [SGLANG_DECODE, SGLANG_PD], ids=["decode", "prefilldecode"])
def test_a_serving_engine_sync_is_the_engine_s(path: Path):
    """SGLang's long stall is a hipMemcpyWithStream issued by the engine itself; the user is
    not told to remove .item() from a decode loop they do not own."""
    with gzip.open(path, "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    memcpy = max((e["dur"] for e in events if e.get("name") == "hipMemcpyWithStream"), default=0)
    assert memcpy > 400_000  # µs: the stall is in the raw trace
    report = diagnose(path, warnings=False)
    f = next(f for f in report.findings if f.rule_id == "host-syncs")
    assert f.status == "fail" and f.rank == 1
    assert ".item()" not in _advice(f) and "engine" in _advice(f)


# --- launch-rate's decode ideal on inference whose task is not recognised ------------------

DECODE_FIXTURE = ROOT / "tests" / "fixtures" / "h200-decode-eager-5steps.kineto.json.gz"


@need_shared
def test_bert_is_not_failed_as_an_error_against_a_decode_loop_s_launch_rate():
    """launch-rate's < 50 launches/s is the low-latency decode tutorial's ideal (megakernel
    §5.2). BERT on MI300 is one 3.9 ms encoder forward of 60 launches (raw events below): the
    task is not recognised, so the rule runs (it could be a decode loop) but at info, from the
    pack's `unrecognised` variant; what its launches cost is judged by the generic rules."""
    with gzip.open(BERT, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    launches = [e for e in events if e.get("ph") == "X" and re.search(r"LaunchKernel", str(e.get("name")))]
    assert len(launches) == 60 and len([e for e in events if e.get("cat") == "kernel"]) == 60
    report = diagnose(BERT, warnings=False)
    assert report.analysis.workload.task == "inference"
    failed = _failed(report)
    lr = next(f for f in failed if f.rule_id == "launch-rate")
    assert lr.severity == "info" and "unrecognised" in lr.context and "not recognised as decode" in lr.title
    # the GPU idles ~89 % of the step: the generic findings lead, at their own severities
    assert [f.rule_id for f in failed[:3]] == ["memory-bubbles", "launches-per-step", "short-kernels"]
    assert failed[0].severity == "error" and failed[1].severity == "warning"
    assert failed[1].values["launches_per_step"].value == 60
    # no rule meant for decode or serving fails above info on it
    decode_only = {"launch-rate", "p99-latency", "dram-bandwidth", "model-fits-bandwidth", "batching"}
    assert not [f.rule_id for f in failed if f.rule_id in decode_only and f.severity != "info"]


def test_a_decode_loop_keeps_launch_rate_at_the_pack_s_severity():
    report = diagnose(DECODE_FIXTURE, warnings=False)
    assert report.analysis.workload.task == "llm-decode"
    lr = next(f for f in report.findings if f.rule_id == "launch-rate")
    assert lr.status == "fail" and lr.severity == "error" and "unrecognised" not in lr.context
    assert lr.title == "Too many kernel launches per second"


def test_a_variant_severity_must_be_a_severity(tmp_path: Path):
    from perfdoctor.errors import UsageError
    from perfdoctor.rules.engine import load_rules

    pack = tmp_path / "p.toml"
    pack.write_text('[[rule]]\nid = "launch-rate"\n[[rule.variant]]\nwhen = "unrecognised"\nseverity = "fatal"\n')
    with pytest.raises(UsageError, match="severity"):
        load_rules([pack])


def test_a_variant_says_its_estimate_or_why_none_not_both(tmp_path: Path):
    from perfdoctor.errors import UsageError
    from perfdoctor.rules.engine import load_rules

    pack = tmp_path / "p.toml"
    pack.write_text('[[rule]]\nid = "uneven-steps"\n[[rule.variant]]\nwhen = "after-pauses"\nno_estimate = "why"\n'
                    'estimate = { kind = "slow_step_time", saved = 1.0 }\n')
    with pytest.raises(UsageError, match="no_estimate"):
        load_rules([pack])
    pack.write_text('[[rule]]\nid = "uneven-steps"\n[[rule.variant]]\nwhen = "after-pauses"\nno_estimate = 3\n')
    with pytest.raises(UsageError, match="no_estimate"):
        load_rules([pack])


TRITON_EXAMPLE = SHARED / "hta" / "triton_example__triton_example.json.gz"  # a torch.compile'd model (HTA's example)
COMPILE_ADVICE = re.compile(r"^torch\.compile the|with torch\.compile|torch\.compile the model")


@need_shared
def test_a_compiled_model_is_not_told_to_torch_compile_the_model():
    """A trace whose steps run torch.compile's own kernels (inductor names them triton_*) has
    taken the advice "torch.compile the model": short-kernels and norm-elementwise say what is
    left (graph breaks, max-autotune) instead. An eager trace still gets the advice."""
    names = _names(TRITON_EXAMPLE, "kernel")
    assert sum(n.startswith("triton_") for n in names) > len(names) / 2  # read from the raw events
    d = diagnose(TRITON_EXAMPLE, warnings=False)
    k = d.analysis.timeline.step_kernels["name"]
    share = sum(str(n).startswith("triton_") for n in k) / len(k)  # the steps' own kernels, counted by hand
    from perfdoctor.rules.signals import compiled_kernel_ratio

    assert compiled_kernel_ratio(d.analysis).value == pytest.approx(share)
    fired = {f.rule_id: f for f in _failed(d)}
    assert {"short-kernels", "norm-elementwise"} <= set(fired), sorted(fired)
    for rid in ("short-kernels", "norm-elementwise"):
        f = fired[rid]
        assert "compiled" in f.context
        assert f.remediation.steps[0].startswith("The model is already compiled"), f.remediation.steps
        assert not any(COMPILE_ADVICE.search(s) for s in f.remediation.steps), f.remediation.steps
        assert "max-autotune" in f.remediation.snippet

    eager = diagnose(VLLM_EAGER, warnings=False)
    f = next(f for f in _failed(eager) if f.rule_id == "short-kernels")
    assert "compiled" not in f.context
    assert not f.remediation.steps[0].startswith("The model is already compiled")


WORKERS_0 = SHARED / "wild" / "kineto__tb_resnet50_num_workers_0.pt.trace.json.gz"  # TensorBoard plugin's sample: num_workers=0


def _data_loading_steps(path: Path) -> list[str]:
    f = next(f for f in _failed(diagnose(path, warnings=False)) if f.rule_id == "data-loading")
    return list(f.remediation.steps)


@need_shared
def test_a_loader_with_workers_is_not_told_to_use_worker_processes(tmp_path):
    """The DataLoader's range names its iterator: _SingleProcessDataLoaderIter (num_workers=0) is
    told to load in worker processes; the same trace with the iterator the workers hand out
    (_MultiProcessingDataLoaderIter, everything else unchanged) is told that its workers are too
    slow, not to add what it has."""
    raw = gzip.open(WORKERS_0, "rb").read()
    assert raw.count(b"_SingleProcessDataLoaderIter") >= 2 and b"_MultiProcessingDataLoaderIter" not in raw
    single = _data_loading_steps(WORKERS_0)
    assert single[0].startswith("Load and augment in worker processes")
    assert not any("already loads in worker processes" in s for s in single)
    multi_path = tmp_path / "workers.pt.trace.json.gz"
    multi_path.write_bytes(gzip.compress(raw.replace(b"_SingleProcessDataLoaderIter", b"_MultiProcessingDataLoaderIter")))
    multi = _data_loading_steps(multi_path)
    assert multi[0].startswith("The DataLoader already loads in worker processes")
    assert not any(s.startswith("Load and augment in worker processes") for s in multi)
    assert single[1:] == multi[1:]  # pinned memory, GPU decode: the same for both
    # pin_memory is advised because this trace's host-to-device copies are pageable (its memcpy
    # events' names); a loader that pins (pageable_memcpy_bytes 0) is not told to pin
    assert b"Memcpy HtoD (Pageable -> Device)" in raw
    assert any(s.startswith("pin_memory=True") for s in single)


XDIT = SHARED / "tracelens" / "inference__xdit_sd_3.5__profile_trace_rank_0.json.gz"  # xDiT's SD 3.5, its transformer compiled


@need_shared
def test_a_compiled_denoiser_is_told_to_graph_it_not_to_compile_it():
    names = _names(XDIT, "kernel")
    assert sum(n.startswith("triton_") for n in names) > len(names) / 4  # inductor's kernels, read from the raw events
    f = next(f for f in _failed(diagnose(XDIT, warnings=False)) if f.rule_id == "memory-bubbles")
    assert {"compiled", "diffusion"} <= set(f.context)
    assert f.remediation.steps[0].startswith("The denoiser is already compiled: capture its calls in CUDA graphs")
    assert not any(s.startswith("Compile the denoiser") for s in f.remediation.steps)


def test_a_cpu_run_is_not_told_about_the_cuda_allocator():
    # uneven-steps' random causes: a CPU-only run (a DDPM sampler on the shared 2-core box, no
    # kernel in its trace) was told to read torch.cuda.memory_stats(); it is told of the other
    # processes on its CPUs, and a GPU run (the demo's eager decode) keeps the allocator's line
    for bundle, gpu in ((ROOT / "tests" / "fixtures" / "bundles" / "ddpm-cpu-loaded", False), (DEMO / "eager", True)):
        f = next(f for f in diagnose(bundle, warnings=False).findings if f.rule_id == "uneven-steps")
        advice = _advice(f)
        assert ("torch.cuda.memory_stats()" in advice) == gpu, advice
        assert "other processes taking the CPUs" in advice
