"""Remediation steps that name a cause are given only where the trace shows it (``needs``).

H200, 2026-12-02, unmodified programs (tests/programs/real): the vision variant of
memory-bubbles told a ViT-small at batch 1 to "fold batch norm into the convolutions" (a ViT
has LayerNorm and one patch-embedding convolution) and told it and ResNet-50 b1 to use
"DataLoader workers and pinned memory" (neither program has a data loader). The two traces
are kept in docs/results/h200-real-2026-12-02/. Whether batch norm, convolutions or a data
loader are there is counted here from the raw Kineto events, with no perfdoctor code.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from conftest import SHARED_TRACES, run_cli_inprocess
from perfdoctor.errors import UsageError
from perfdoctor.analysis.metrics import Metric
from perfdoctor.pipeline import diagnose
from perfdoctor.rules.engine import evaluate_rule, load_rules, step_holds

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "docs" / "results" / "h200-real-2026-12-02"
VIT = RUN / "vit_small_b1-trace.json.gz"
RESNET = RUN / "resnet50_b1-trace.json.gz"

BATCH_NORM_TEXT = "Fold batch norm"
AROUND_CONVS = "around the convolutions"
DATALOADER_TEXT = "DataLoader"
CUDA_GRAPH_TEXT = "torch.compile(model, mode='reduce-overhead')"


def _raw(path: Path) -> dict[str, object]:
    """What the raw events say, by plain loops: batch norm by name (kernels and CPU ops), a
    DataLoader range, and the convolution kernels' share of kernel time (cuDNN names them
    conv / fprop / implicit_convolve; ATen's GEMMs, norms and elementwise kernels do not)."""
    with gzip.open(path, "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    kernels = [e for e in events if str(e.get("cat", "")).lower() == "kernel"]
    named = [e["name"] for e in events if e.get("cat") in ("kernel", "cpu_op")]
    conv = sum(e["dur"] for e in kernels if re.search(r"conv|fprop", e["name"], re.I))
    return {
        "batch_norm": any(re.search(r"batch_norm|bn_fw", n) for n in named),
        "dataloader": any("DataLoader" in str(e.get("name", "")) for e in events),
        "conv_share": conv / sum(e["dur"] for e in kernels),
    }


@pytest.fixture(scope="module")
def vit():
    return diagnose(VIT, warnings=False)


@pytest.fixture(scope="module")
def resnet():
    return diagnose(RESNET, warnings=False)


def _bubbles(d):
    return next(f for f in d.findings if f.rule_id == "memory-bubbles")


def test_vit_is_not_told_to_fold_batch_norm_or_use_a_dataloader(vit):
    raw = _raw(VIT)
    assert not raw["batch_norm"] and not raw["dataloader"] and raw["conv_share"] < 0.10  # a ViT: one patch-embedding conv
    f = _bubbles(vit)
    assert vit.analysis.workload.task == "vision" and f.status == "fail"
    text = " ".join(f.remediation.steps)
    assert CUDA_GRAPH_TEXT in text
    assert BATCH_NORM_TEXT not in text and "batch norm" not in text
    assert AROUND_CONVS not in text
    assert DATALOADER_TEXT not in text
    assert any("Fuse the elementwise and normalisation kernels" in s for s in f.remediation.steps)


def test_resnet_b1_is_told_to_fold_batch_norm_but_not_to_use_a_dataloader(resnet):
    raw = _raw(RESNET)
    assert raw["batch_norm"] and not raw["dataloader"] and raw["conv_share"] >= 0.10
    f = _bubbles(resnet)
    assert resnet.analysis.workload.task == "vision" and f.status == "fail"
    text = " ".join(f.remediation.steps)
    assert CUDA_GRAPH_TEXT in text and BATCH_NORM_TEXT in text and AROUND_CONVS in text
    assert DATALOADER_TEXT not in text


def test_norm_elementwise_folds_batch_norm_only_where_it_runs(vit, resnet):
    """The same condition on another rule's step: norm-elementwise's batch-norm folding."""
    steps = {name: next(f for f in d.findings if f.rule_id == "norm-elementwise").remediation.steps for name, d in (("vit", vit), ("resnet", resnet))}
    assert not any("batch norm" in s for s in steps["vit"])
    assert any("batch norm" in s for s in steps["resnet"])
    assert any("torch.compile" in s for s in steps["vit"])  # the unconditional step stays


def test_snippets_follow_the_steps_conditions():
    """A snippet's parts have conditions as steps do: failed on purpose (thresholds 0), the
    ViT's layout-transforms snippet has no channels-last (one patch-embedding convolution)
    and its norm-elementwise snippet no batch-norm folding; the ResNet's have both. Before,
    every model was shown the channels-last code, whatever its steps said."""
    shown = {}
    for name, path in (("vit", VIT), ("resnet", RESNET)):
        d = diagnose(path, warnings=False, thresholds=["layout-transforms=0", "norm-elementwise=0"])
        raw = _raw(path)
        for rule in ("layout-transforms", "norm-elementwise"):
            f = next(f for f in d.findings if f.rule_id == rule)
            assert f.status == "fail"
            shown[name, rule] = (f.remediation.snippet, " ".join(f.remediation.steps))
        snippet, steps = shown[name, "layout-transforms"]
        assert ("channels_last" in snippet) == (raw["conv_share"] >= 0.10) == ("channels-last" in steps)
        assert "torch.compile(model)" in snippet  # the part given always
        snippet, steps = shown[name, "norm-elementwise"]
        assert ("fuse_modules" in snippet) == raw["batch_norm"] == ("batch norm" in steps)
        assert snippet.startswith("model = torch.compile(model.eval())")
    assert shown["vit", "layout-transforms"][0] != shown["resnet", "layout-transforms"][0]


@pytest.mark.parametrize("bias", [True, False])
def test_bias_advice_only_where_a_convolution_before_a_batch_norm_has_one(tmp_path: Path, bias: bool):
    """The training variant of norm-elementwise says "bias=False" only where a convolution
    with a bias runs right before a batch norm: torchvision's ResNet-50 (every such
    convolution bias=False) was told to remove a bias it does not have. A small CNN trained
    under torch.profiler(record_shapes=True) on this CPU, its bias counted from the raw
    events (aten::convolution's third input)."""
    import torch

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, bias=bias), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 8, 3, bias=True), torch.nn.Flatten(), torch.nn.LazyLinear(4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 4, (4,))
    model(x)  # the lazy layer's shape
    path = tmp_path / "trace.json"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
                                schedule=torch.profiler.schedule(wait=0, warmup=1, active=4, repeat=1),
                                on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(5):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            prof.step()
    convs = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("name") == "aten::convolution"]
    assert {len(e["args"]["Input Dims"][2]) > 0 for e in convs} == {True, bias}  # the second convolution's bias, no BN after it
    d = diagnose(path, warnings=False, thresholds=["norm-elementwise=0"])
    assert d.analysis.workload.kind == "training"
    f = next(f for f in d.findings if f.rule_id == "norm-elementwise")
    assert any("bias=False" in s for s in f.remediation.steps) == bias
    assert any("torch.compile" in s for s in f.remediation.steps)  # the unconditional steps stay


def test_torchvision_resnet_has_no_bias_before_its_batch_norms(resnet):
    from perfdoctor.rules.signals import conv_bias_before_bn

    with gzip.open(RESNET, "rt") as fh:
        convs = [e for e in json.load(fh)["traceEvents"] if e.get("name") == "aten::convolution"]
    assert convs and all(e["args"]["Input Dims"][2] == [] for e in convs)
    m = conv_bias_before_bn(resnet.analysis)
    assert m.value == 0.0 and f"none of {len(convs)} convolutions" in m.note


@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason=f"the shared traces ({SHARED_TRACES}) are not here")
@pytest.mark.parametrize(
    "name",
    ["hta/ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "wild/kineto__tb_resnet50_num_workers_0.pt.trace.json.gz"],
)
def test_training_input_pipeline_advice_follows_the_dataloader(name: str):
    """The training variant's DataLoader step: given for the ResNet trained from a DataLoader
    (its __next__ ranges are in the trace), not for HTA's ResNet training trace, which has none."""
    path = SHARED_TRACES / name
    d = diagnose(path, warnings=False)
    assert d.analysis.workload.kind == "training"
    steps, snippet = _bubbles(d).remediation.steps, _bubbles(d).remediation.snippet
    assert any("DataLoader(" in s for s in steps) == _raw(path)["dataloader"] == ("DataLoader(" in snippet)  # the snippet's part too
    assert any("autograd thread" in s for s in steps)  # the unconditional steps stay
    assert "fused=True" in snippet  # and the snippet's


# --- the mechanism itself, on made-up values and packs ------------------------------------

def test_step_conditions():
    values = {"flag1": Metric(1.0, "flag", "t"), "flag0": Metric(0.0, "flag", "t"), "share": Metric(0.3, "ratio", "t"),
              "missing": Metric(None, "ratio", "t", reason="not collected")}
    assert step_holds("", values)
    assert step_holds("flag1", values) and not step_holds("flag0", values)
    assert not step_holds("missing", values) and not step_holds("absent", values)  # unknown is not shown
    assert step_holds("share >= 0.3", values) and not step_holds("share < 0.3", values)
    assert not step_holds("missing < 0.3", values)


def test_a_step_may_need_a_variant_condition_or_its_negation():
    # `compiled` is the engine's threshold on compiled_kernel_ratio (COMPILED_KERNELS): a
    # step names it instead of copying the number into the pack
    from perfdoctor.rules.engine import COMPILED_KERNELS

    for ratio, compiled in ((COMPILED_KERNELS, True), (COMPILED_KERNELS / 2, False), (0.0, False)):
        values = {"compiled_kernel_ratio": Metric(ratio, "ratio", "t")}
        assert step_holds("compiled", values) is compiled and step_holds("not compiled", values) is not compiled
        assert step_holds("  not   compiled ", values) is not compiled


PACK = '''
[[rule]]
id = "demo-needs"
title = "Demo"
metric = "gpu_idle_ratio"
comparator = "<"
threshold = 0.5
severity = "warning"
citation = "test"
[rule.remediation]
steps = [
    "always",
    { text = "only with batch norm", needs = "batch_norm_in_steps" },
    { text = "only with many convolutions", needs = "convolution_ratio >= 0.5" },
    { text = "only uncompiled", needs = "not  compiled" },
]
'''


def test_a_pack_step_with_needs_is_chosen_by_the_values(tmp_path: Path):
    path = tmp_path / "p.toml"
    path.write_text(PACK)
    rule = load_rules([path], seed=False).get("demo-needs")
    analysis = type("A", (), {"workload": None})()

    def steps(**vals: float) -> list[str]:
        values = {"gpu_idle_ratio": Metric(0.9, "ratio", "t"), **{k: Metric(v, "ratio", "t") for k, v in vals.items()}}
        return list(evaluate_rule(rule, analysis, values, {}).remediation.steps)

    assert steps(compiled_kernel_ratio=0.9) == ["always"]
    assert steps(batch_norm_in_steps=1.0, convolution_ratio=0.2, compiled_kernel_ratio=0.9) == ["always", "only with batch norm"]
    assert steps(batch_norm_in_steps=0.0, convolution_ratio=0.6, compiled_kernel_ratio=0.9) == ["always", "only with many convolutions"]
    assert steps(compiled_kernel_ratio=0.0) == ["always", "only uncompiled"]
    assert rule.remediation.conditions()[-1] == "not compiled"  # as `rules explain` prints it


SNIPPET = """snippet = [
    "always()",
    { code = '''
with_bn()
''', needs = "batch_norm_in_steps" },
    { code = "uncompiled()", needs = "not compiled" },
]
"""


def test_a_pack_snippet_part_with_needs_is_chosen_by_the_values(tmp_path: Path):
    path = tmp_path / "p.toml"
    path.write_text(PACK + SNIPPET)
    rule = load_rules([path], seed=False).get("demo-needs")
    analysis = type("A", (), {"workload": None})()

    def snippet(**vals: float) -> str:
        values = {"gpu_idle_ratio": Metric(0.9, "ratio", "t"), **{k: Metric(v, "ratio", "t") for k, v in vals.items()}}
        return evaluate_rule(rule, analysis, values, {}).remediation.snippet

    assert rule.remediation.snippet == "always()\nwith_bn()\nuncompiled()"  # the rule's own: every part
    assert snippet(compiled_kernel_ratio=0.9) == "always()"
    assert snippet(batch_norm_in_steps=1.0, compiled_kernel_ratio=0.0) == "always()\nwith_bn()\nuncompiled()"
    assert snippet(batch_norm_in_steps=1.0, compiled_kernel_ratio=0.9) == "always()\nwith_bn()"
    explained = run_cli_inprocess("rules", "explain", "demo-needs", "--rules", path)
    assert explained.returncode == 0 and "# [only where batch_norm_in_steps]\nwith_bn()" in explained.stdout


def _with_steps(steps: str) -> str:
    return re.sub(r"steps = \[.*?\n\]", f"steps = {steps}", PACK, flags=re.S)


def _with_snippet(snippet: str) -> str:
    return PACK + f"snippet = {snippet}\n"


@pytest.mark.parametrize(
    "pack,message",
    [
        (_with_steps('[{ text = "x", needs = "batch_norm_in_stepz" }, "y"]'), "unknown metric 'batch_norm_in_stepz'"),
        (_with_steps('[{ text = "x", needs = "convolution_ratio >> 1" }, "y"]'), "expected KEY or KEY OP NUMBER"),
        (_with_steps('[{ text = "x", needs = "not compild" }, "y"]'), "or [not] CONDITION (one of graphed, persistent, compiled"),
        (_with_steps('[{ text = "x", needs = "not convolution_ratio" }, "y"]'), "or [not] CONDITION"),
        (_with_steps('[{ text = "x", needs = "batch_norm_in_steps" }]'), "at least one step must be given always"),
        (_with_steps('[{ text = "x", when = "vision" }, "y"]'), "unknown field"),
        (_with_snippet('[{ code = "x", needs = "batch_norm_in_stepz" }]'), "field 'remediation.snippet.needs': unknown metric 'batch_norm_in_stepz'"),
        (_with_snippet('[{ text = "x", needs = "compiled" }]'), "unknown field"),
        (_with_snippet('[{ code = "", needs = "compiled" }]'), "field 'remediation.snippet.code': required"),
        (_with_snippet("3"), "field 'remediation.snippet': expected a string, or a list of parts"),
    ],
)
def test_bad_step_and_snippet_conditions_are_refused(tmp_path: Path, pack: str, message: str):
    path = tmp_path / "p.toml"
    path.write_text(pack)
    with pytest.raises(UsageError, match=re.escape(message)):
        load_rules([path], seed=False)
