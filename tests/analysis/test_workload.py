"""Workload kind (perfdoctor.analysis.workload) on every real wild trace.

Expected kinds come from each trace's facts file (``workload``) or, where the facts do not
say, from the README's description of the program (serving loops, threads, capture,
all-reduce inside inference steps: no backward pass). Evidence counts are checked against a
direct scan of the JSON.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from perfdoctor.analysis import workload
from perfdoctor.pipeline import load_trace

WILD = Path(__file__).parents[1] / "fixtures" / "wild"
EXPECTED = {
    "h200-train": "training",
    "h200-train-ddp": "training",
    "h200-compiled": "inference",
    "h200-hf-unannotated": "inference",
    "h200-threads": "inference",
    "h200-allreduce": "inference",
    "h200-serve-eager": "inference",
    "h200-serve-graph": "inference",
    "h200-capture": "inference",
    "h200-host-preprocess": "inference",
    "h100-kmeans-scatter": "inference",
    "h100-kmeans-per-cluster": "inference",
}
FACTS = {
    "h200-train": "train.facts.json",
    "h200-train-ddp": "train-ddp.facts.json",
    "h200-compiled": "compiled.facts.json",
    "h200-hf-unannotated": "hf-unannotated.facts.json",
}


def _scan(path: Path) -> tuple[Counter, list[str]]:
    ev = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    ops = Counter(e["name"] for e in ev if e.get("ph") == "X" and e.get("cat") == "cpu_op")
    # Kineto may name one tid twice ("pt_autograd_0", then "python3"): keep every name.
    threads = [e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"]
    return ops, threads


def test_expected_table_covers_every_fixture():
    assert set(EXPECTED) == {p.name.removesuffix(".kineto.json.gz") for p in WILD.glob("*.kineto.json.gz")}
    for fixture, facts in FACTS.items():
        assert json.loads((WILD / facts).read_text())["workload"] == EXPECTED[fixture]


@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_with_cpu_ops(fixture):
    path = WILD / f"{fixture}.kineto.json.gz"
    ops, threads = _scan(path)
    w = workload.classify(load_trace(path), op_counts=ops, thread_names=threads)
    assert w.kind == EXPECTED[fixture], w.text
    evaluate = sum(n for k, n in ops.items() if k.startswith("autograd::engine::evaluate_function: "))
    assert w.backward_ops == evaluate
    assert w.ops_seen == sum(ops.values())
    if w.kind == "training":
        assert w.confidence == "high"
        assert w.backward_ops > 0
        assert w.optimizer_steps == ["Optimizer.step#AdamW.step"]
        assert any("pt_autograd" in t for t in w.autograd_threads)
        assert w.text.startswith(f"training: {evaluate} backward ops, Optimizer.step#AdamW.step")
    else:
        assert w.confidence == ("high" if ops else "medium")
        assert w.backward_ops == 0 and not w.optimizer_steps and not w.autograd_threads
        assert w.text.startswith("inference: no backward op")


@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_profile_alone(fixture):
    """Without CPU ops (the profile alone: the Kineto loader now keeps op counts and thread
    names in meta, so they are passed empty here): the optimizer range and the backward
    kernels still identify training; inference is then medium confidence."""
    path = WILD / f"{fixture}.kineto.json.gz"
    w = workload.classify(load_trace(path), op_counts={}, thread_names=[])
    assert w.kind == EXPECTED[fixture], w.text
    if w.kind == "training":
        ev = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        bw = sum(1 for e in ev if e.get("cat") == "kernel" and re.search(r"backward|_grad_input|GammaBeta", e["name"], re.I))
        assert w.backward_kernels == bw > 0
        assert w.optimizer_steps == ["Optimizer.step#AdamW.step"]
    else:
        assert w.confidence == "medium"


def test_applies():
    train = workload.Workload(kind="training", confidence="high")
    infer = workload.Workload(kind="inference", confidence="high")
    unknown = workload.Workload(kind="unknown", confidence="none")
    assert not workload.applies("inference", train)
    assert workload.applies("inference", infer)
    assert workload.applies("training", train) and not workload.applies("training", infer)
    assert workload.applies(None, train) and workload.applies("any", infer)
    # an unknown workload (no trace read) runs the rules for any workload only: a workload
    # rule (a decode p99 target) is not judged where nothing says what the program is
    assert not workload.applies("inference", unknown) and not workload.applies("training", unknown)
    assert workload.applies(None, unknown) and workload.applies("any", unknown)


@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_loader_keeps_ops_and_thread_names(fixture):
    """The Kineto loader keeps CPU-op counts and thread names: the default classification
    then has the evidence the report header shows ("training: 152 backward ops, ...")."""
    path = WILD / f"{fixture}.kineto.json.gz"
    ev = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    p = load_trace(path)
    assert sum(p.origin.op_counts.values()) == sum(1 for e in ev if e.get("ph") == "X" and e.get("cat") == "cpu_op")
    w = workload.classify(p)
    assert w.kind == EXPECTED[fixture], w.text
    if w.kind == "training":
        evaluate = sum(1 for e in ev if e.get("ph") == "X" and e.get("cat") == "cpu_op" and e["name"].startswith("autograd::engine::evaluate_function: "))
        assert w.backward_ops == evaluate > 0 and w.autograd_threads
    else:
        assert w.confidence == "high"


def test_a_run_bundles_module_classes_name_the_task_its_trace_does_not(tmp_path):
    # Trainer.predict over a BERT classifier (datasets probe, 2026-12-07): the step is the
    # DataLoader's fetch, so the torch pass marks no module range, and aten::embedding alone
    # read the task as LLM decode (and p99-latency failed as an error). The light pass saw
    # the classes called: BertForSequenceClassification is an encoder
    from dataclasses import replace

    import torch
    from torch.profiler import ProfilerActivity, profile

    from perfdoctor.profile import BundleFacts

    model = torch.nn.Sequential(torch.nn.Embedding(64, 8), torch.nn.Linear(8, 2))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with torch.inference_mode():
            for _ in range(3):
                model(torch.randint(0, 64, (4, 16)))
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    p = load_trace(tmp_path / "t.json")
    assert workload.classify(p).task == "llm-decode"  # the trace alone: aten::embedding
    bert = "transformers.models.bert.modeling_bert.BertForSequenceClassification"
    p.origin = replace(p.origin, bundle=BundleFacts(module_classes=(bert, "torch.nn.modules.linear.Linear")))
    assert workload.classify(p).task == "inference"
    llama = "transformers.models.llama.modeling_llama.LlamaForCausalLM"
    p.origin = replace(p.origin, bundle=BundleFacts(module_classes=(llama,)))
    w = workload.classify(p)
    assert (w.task, w.task_evidence) == ("llm-decode", llama)


def test_an_encoder_decoder_generator_is_decode_though_its_front_end_convolves(tmp_path):
    # Whisper's generate (session 34's probe): the light pass notes depths 0-1, so the
    # decoder's layers are named nowhere, and the audio front end's Conv1d read the task as
    # vision (time-between-steps then gave a DataLoader's advice to a decode loop)
    from dataclasses import replace

    import torch
    from torch.profiler import ProfilerActivity, profile

    from perfdoctor.profile import BundleFacts

    model = torch.nn.Sequential(torch.nn.Conv1d(8, 8, 3, padding=1), torch.nn.Linear(16, 4))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with torch.inference_mode():
            for _ in range(3):
                model(torch.randn(1, 8, 16))
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    p = load_trace(tmp_path / "t.json")
    assert workload.classify(p).task == "vision"  # the trace alone: aten::conv1d
    whisper = "transformers.models.whisper.modeling_whisper.WhisperForConditionalGeneration"
    p.origin = replace(p.origin, bundle=BundleFacts(module_classes=(whisper, "torch.nn.modules.conv.Conv1d")))
    w = workload.classify(p)
    assert w.task == "llm-decode" and whisper.startswith(w.task_evidence), w.task_evidence  # cut at 60 characters
