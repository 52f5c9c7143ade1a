"""perfdoctor diff: statistics, kernel matching, comparability, rendering, the command.

Real H200 traces where the claim is about GPUs (eager vs CUDA graph, two runs of one
program); CRAFTED variants of a real trace (tests/diffgate_helpers.py) where a test needs a
change of known size.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES
from diffgate_helpers import cli, cli_inprocess, other_gpu, renamed_kernels, stretched
from perfdoctor.names.kernels import match_key as normalize_kernel_name
from perfdoctor.pipeline import load_trace
from perfdoctor.compare.diff import diff_runs
from perfdoctor.pipeline import Diagnosis, diagnose
from perfdoctor.analysis.metrics import analyze
from perfdoctor.errors import UsageError
from perfdoctor.reports.diff_report import document, kernel_summary, render_markdown, sample_reason, verdict
from perfdoctor.compare.stats import Why, bootstrap_median_ratio, compare_samples, mann_whitney_u

EAGER5 = FIXTURES / "h200-llama1b-eager-5steps.kineto.json.gz"
STEP = "decode_step"


def real_fixture(pattern: str) -> Path:
    """A recorded H200 decode trace (tests/fixtures/README.md says how it was made)."""
    found = sorted(FIXTURES.glob(pattern))
    assert found, f"missing H200 fixture {pattern} in tests/fixtures (see README.md)"
    return found[0]


@pytest.fixture(scope="module")
def eager5():
    return diagnose(EAGER5, step=STEP, rules=None)


@pytest.fixture(scope="module")
def slow_path(tmp_path_factory) -> Path:
    return stretched(EAGER5, tmp_path_factory.mktemp("crafted") / "slow.kineto.json.gz", 1.5)


# --------------------------------------------------------------------------- statistics


def test_mann_whitney_matches_scipy_exact_and_asymptotic() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(7)
    methods = set()
    for trial in range(300):
        m, n = int(rng.integers(1, 25)), int(rng.integers(1, 25))
        if trial % 3 == 0:  # ties: integer step counts, like kernels per step
            x, y = rng.integers(0, 4, m).astype(float), rng.integers(0, 5, n).astype(float)
        else:
            x, y = rng.normal(0, 1, m), rng.normal(0.6, 1, n)
        ours = mann_whitney_u(x, y)
        ref = scipy_stats.mannwhitneyu(x, y, alternative="two-sided")
        methods.add(ours.method)
        assert ours.u == pytest.approx(ref.statistic, abs=1e-9)
        assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-12), (m, n, ours)
    assert methods == {"exact", "asymptotic"}


def test_mann_whitney_known_values() -> None:
    # Complete separation of 5 vs 5: exact two-sided p = 2 / C(10, 5) = 2 / 252.
    assert mann_whitney_u([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]).p_value == pytest.approx(2 / 252)
    assert mann_whitney_u([3, 3, 3], [3, 3, 3]).p_value == 1.0
    with pytest.raises(ValueError):
        mann_whitney_u([], [1.0])


def test_bootstrap_interval_is_reproducible_and_brackets_the_ratio() -> None:
    rng = np.random.default_rng(0)
    before, after = rng.normal(40, 1, 30), rng.normal(20, 0.5, 30)
    a = bootstrap_median_ratio(before, after)
    assert a == bootstrap_median_ratio(before, after)  # fixed seed
    assert a.low <= a.ratio <= a.high
    assert 0.45 < a.low < a.high < 0.55


def test_verdicts_and_too_few_steps() -> None:
    slow, fast = [40.0, 41, 39, 40.5, 39.5, 40.2], [20.0, 21, 19, 20.5, 19.5, 20.1]
    assert compare_samples(slow, fast).verdict == "lower"
    assert compare_samples(fast, slow).verdict == "higher"
    same = compare_samples(slow, list(reversed(slow)))
    assert same.verdict == "no significant change" and same.p_value == 1.0
    few = compare_samples(slow[:3], fast[:3])
    assert (few.verdict, few.why, few.p_value) == ("inconclusive", Why.TOO_FEW, None) and "need more steps" in sample_reason(few)
    one = compare_samples([40.0], fast)
    assert (one.verdict, one.why) == ("inconclusive", Why.SINGLE_STEP) and "single step" in sample_reason(one)
    assert compare_samples([], fast).verdict == "inconclusive"


def test_noise_floor_is_symmetric_and_only_hides_small_shifts() -> None:
    base = [10.0, 10.1, 9.9, 10.05, 9.95, 10.02]
    up = [v * 1.2 for v in base]  # 1.2x slower: significant within the runs (p = 0.0022)
    down = [v / 1.2 for v in base]  # 1.2x faster
    assert compare_samples(base, up).verdict == "higher"
    for other in (up, down):
        c = compare_samples(base, other, noise_floor=0.25)
        assert (c.verdict, c.why) == ("no significant change", Why.WITHIN_NOISE) and c.p_value < 0.05
        assert "noise floor" in sample_reason(c)
    assert compare_samples(base, [v * 1.3 for v in base], noise_floor=0.25).verdict == "higher"
    assert compare_samples(base, [v / 1.3 for v in base], noise_floor=0.25).verdict == "lower"


# --------------------------------------------------------------------------- kernel names


@pytest.mark.parametrize(
    "raw, normalized",
    [
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
            "at::native::vectorized_elementwise_kernel",
        ),
        (
            "void at::native::(anonymous namespace)::CatArrayBatchedCopy_vectorized<at::native::(anonymous "
            "namespace)::OpaqueType<2u>, unsigned int, 4, 128, 1, 16, 8>(char*, unsigned int)",
            "at::native::{anonymous}::CatArrayBatchedCopy_vectorized",
        ),
        ("triton_poi_fused_add_mul_0", "triton_poi_fused_add_mul"),
        ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_12", "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt"),
        ("triton__0d1d2d3de4de", "triton_"),
        ("my_kernel_0x7f3a91c0", "my_kernel"),
        ("fused_rmsnorm_a1b2c3d4e5f6_3", "fused_rmsnorm"),
        ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"),
        ("cublasLt::splitKreduce_kernel<32, 16, int, float>(cublasLt::cublasSplitKParams<float>)", "cublasLt::splitKreduce_kernel"),
        ("void foo::operator()<int>(int)", "foo::operator{call}"),
    ],
)
def test_normalize_kernel_name(raw: str, normalized: str) -> None:
    assert normalize_kernel_name(raw) == normalized


def test_template_instantiations_and_launch_ids_match() -> None:
    assert normalize_kernel_name("gemm<128, 4>(float*)") == normalize_kernel_name("gemm<64, 8>(half*)")
    assert normalize_kernel_name("triton_poi_fused_add_3") == normalize_kernel_name("triton_poi_fused_add_11")


# --------------------------------------------------------------------------- diff on traces


def test_same_trace_has_no_significant_change(eager5) -> None:
    d = diff_runs(eager5, eager5)
    assert d.samples["step_latency_ms"].verdict == "no significant change"
    assert d.metric("step_latency_ms_p50").verdict == "no significant change"
    assert all(m.status in ("unchanged", "absent") for m in d.metrics)
    assert d.comparable and not d.mismatches
    assert {r.status for r in d.kernels.rows} == {"matched"}
    assert d.kernels.kernels_before == d.kernels.kernels_after == 945
    # With 5 steps there are only 4 completion intervals: steps_per_s cannot be tested.
    assert d.metric("steps_per_s").verdict == "inconclusive — need more steps"


def test_crafted_slower_gpu_timeline_is_a_significant_regression(eager5, slow_path) -> None:
    d = diff_runs(eager5, diagnose(slow_path, step=STEP, rules=None))
    lat = d.samples["step_latency_ms"]
    assert lat.verdict == "higher" and lat.p_value < 0.05
    assert lat.interval.low > 1.0  # the whole bootstrap interval says "slower"
    for key in ("step_latency_ms_p50", "step_latency_ms_p99", "step_gpu_ms_p50"):
        assert d.metric(key).verdict == "regressed", key
        assert d.metric(key).status == "worse"
    assert d.metric("launches_per_step").verdict == "no significant change"
    assert "regressed" in verdict(d)
    gemm = next(r for r in d.kernels.rows if r.name.startswith("nvjet_sm90_tst_64x8_64x16_2x1"))
    assert gemm.time_us_after == pytest.approx(1.5 * gemm.time_us_before, rel=1e-3)
    # and the reverse direction reads as an improvement
    back = diff_runs(diagnose(slow_path, step=STEP, rules=None), eager5)
    assert back.metric("step_latency_ms_p50").verdict == "improved"


def test_crafted_other_gpu_is_not_like_for_like(eager5, tmp_path) -> None:
    path = other_gpu(EAGER5, tmp_path / "a100.kineto.json.gz", "NVIDIA A100-SXM4-80GB", 12040)
    d = diff_runs(eager5, diagnose(path, step=STEP, rules=None))
    assert {m.field for m in d.mismatches} == {"gpu", "cuda_driver"}
    md = render_markdown(d)
    assert "not like for like" in md and "A100" in md


def test_step_name_mismatch_is_flagged(eager5) -> None:
    other = diagnose(EAGER5, step="decode_*", rules=None)  # same steps, found under a different pattern
    d = diff_runs(eager5, other)
    assert [m.field for m in d.mismatches] == ["step_name"]


def _no_steps_run() -> Diagnosis:
    """CRAFTED: the matmul H200 trace cut to one launch and its GPU work, without ranges:
    nothing repeats, so no step is found (contract v2 finds the full file's steps
    automatically, so it no longer serves as a trace without steps)."""
    p = load_trace(FIXTURES / "h200-matmul-20steps.nsys.sqlite.gz")
    p.ranges = p.ranges.iloc[0:0]
    keep = p.calls[p.calls["name"].str.startswith("cudaLaunchKernel") & p.calls["correlation"].isin(p.activities["correlation"])].iloc[:1]
    p.calls = keep.reset_index(drop=True)
    p.activities = p.activities[p.activities["correlation"].isin(keep["correlation"])].reset_index(drop=True)
    return Diagnosis(p, analyze(p), None, label="no-steps")


def test_missing_steps_make_latency_inconclusive(eager5) -> None:
    no_steps = _no_steps_run()
    assert no_steps.analysis.steps.count == 0
    d = diff_runs(no_steps, eager5)
    assert d.metric("step_latency_ms_p50").status == "added"
    assert d.metric("step_latency_ms_p50").verdict is None
    assert d.samples["step_latency_ms"].verdict == "inconclusive"
    assert d.kernels.per == "trace"
    assert "gpu" not in {m.field for m in d.mismatches}  # both H200


def test_json_and_markdown_outputs(eager5, slow_path) -> None:
    d = diff_runs(eager5, diagnose(slow_path, step=STEP, rules=None))
    doc = json.loads(json.dumps(document(d)))
    assert doc["schema"] == "perfdoctor.diff/1"
    assert doc["metrics"]["step_latency_ms_p50"]["verdict"] == "regressed"
    assert doc["samples"]["step_latency_ms"]["p_value"] < 0.05
    assert doc["samples"]["step_latency_ms"]["median_ratio"]["low"] > 1
    md = render_markdown(d)
    for section in ("### Metrics", "### Step statistics", "### Kernels", "`step_latency_ms_p50`", "regressed"):
        assert section in md


def test_markdown_escapes_trace_names(eager5, tmp_path) -> None:
    path = renamed_kernels(EAGER5, tmp_path / "evil.kineto.json.gz", "splitKreduce", "x|<script>alert(1)</script>_kernel")
    md = render_markdown(diff_runs(eager5, diagnose(path, step=STEP, rules=None)))
    assert "<script>" not in md


# --------------------------------------------------------------------------- the command


def test_diff_command_writes_md_and_json(tmp_path, slow_path) -> None:
    md, js = tmp_path / "d.md", tmp_path / "d.json"
    r = cli("diff", EAGER5, slow_path, "--step", STEP, "--md", md, "--json", js)
    assert r.returncode == 0, r.stderr
    assert "regressed" in r.stdout
    assert "### Kernels" in md.read_text()
    assert json.loads(js.read_text())["metrics"]["step_latency_ms_p99"]["verdict"] == "regressed"


def test_diff_command_bad_input_exits_2(tmp_path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    for args in ((EAGER5, bad), (EAGER5, tmp_path / "missing.json.gz"), (EAGER5, EAGER5, "--step", "no_such_range")):
        r = cli_inprocess("diff", *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr


def test_step_before_and_after_apply_to_one_side_each(tmp_path) -> None:
    js = tmp_path / "d.json"
    r = cli_inprocess("diff", EAGER5, EAGER5, "--step-before", STEP, "--step-after", "decode_*", "--json", js)
    assert r.returncode == 0, r.stderr
    doc = json.loads(js.read_text())
    assert doc["facts"]["before"]["step_name"] == STEP and doc["facts"]["after"]["step_name"] == "decode_*"
    assert [m["field"] for m in doc["mismatches"]] == ["step_name"]
    assert "NOT LIKE FOR LIKE" in r.stdout
    with pytest.raises(UsageError):
        diagnose(EAGER5, step="no_such_range", rules=None)


# --------------------------------------------------------------------------- real H200 runs
# tests/fixtures/README.md says how each was recorded: the same Llama-3.2-1B-shaped decode,
# eager (5 steps) and CUDA graph (10 steps), each recorded twice by independent processes.

EAGER = FIXTURES / "h200-decode-eager-5steps.kineto.json.gz"
EAGER_RERUN = FIXTURES / "h200-decode-eager-5steps-rerun.kineto.json.gz"
GRAPH = FIXTURES / "h200-decode-graph-10steps.kineto.json.gz"
GRAPH_RERUN = FIXTURES / "h200-decode-graph-10steps-rerun.kineto.json.gz"
GRAPH_NSYS = FIXTURES / "h200-decode-graph-10steps.nsys.sqlite.gz"
EAGER_NSYS = FIXTURES / "h200-decode-eager-5steps.nsys.sqlite.gz"


@pytest.fixture(scope="module")
def real():
    return {p.name: diagnose(p, step=STEP, rules=None) for p in (EAGER, EAGER_RERUN, GRAPH, GRAPH_RERUN)}


def test_real_eager_vs_graph_is_a_significant_improvement(real) -> None:
    d = diff_runs(real[EAGER.name], real[GRAPH.name])
    assert d.comparable, d.mismatches
    lat = d.samples["step_latency_ms"]
    assert lat.verdict == "lower" and lat.p_value < 0.05, lat
    assert lat.interval.high < 0.5  # the whole 95 % interval: more than 2x faster
    for key in ("step_latency_ms_p50", "step_gpu_ms_p50", "launches_per_step"):
        assert d.metric(key).verdict == "improved", key
    launches = d.metric("launches_per_step")
    assert (launches.before, launches.after) == (863, 1)
    assert kernel_summary(d.kernels).startswith("launches/step 863 → 1;")
    # Same kernels, replayed from a graph instead of launched one by one: all matched.
    assert not d.kernels.vanished and not d.kernels.appeared
    assert d.kernels.kernels_before == d.kernels.kernels_after == 863
    assert "step latency improved" in verdict(d)


def test_real_two_runs_of_one_program_show_no_significant_change(real) -> None:
    for first, second in ((GRAPH, GRAPH_RERUN), (GRAPH_RERUN, GRAPH), (EAGER, EAGER_RERUN)):
        d = diff_runs(real[first.name], real[second.name])
        assert d.comparable, d.mismatches
        assert d.metric("launches_per_step").change == 0
        assert {r.status for r in d.kernels.rows} == {"matched"}
        lat = d.samples["step_latency_ms"]
        assert lat.verdict == "no significant change", (first.name, lat)
        assert d.metric("step_latency_ms_p50").verdict == "no significant change"
    # The within-run test alone would have called the graph rerun 17 % faster (p = 0.014):
    # the run-to-run noise floor is what keeps tracer noise from being reported as a change.
    strict = diff_runs(real[GRAPH.name], real[GRAPH_RERUN.name], noise_floor=0.0)
    assert strict.samples["step_latency_ms"].verdict == "lower"
    # ... and the GPU side of a graph replay is untouched by the tracer: 0.02 % apart.
    assert strict.samples["step_gpu_ms"].verdict == "no significant change"


def test_real_mixed_kineto_and_nsys(real) -> None:
    d = diff_runs(diagnose(EAGER_NSYS, step=STEP, rules=None), real[GRAPH.name])
    assert d.metric("launches_per_step").before == 863 and d.metric("launches_per_step").after == 1
    assert d.samples["step_latency_ms"].verdict == "lower"
    assert d.facts_before["gpu"] == d.facts_after["gpu"] == "NVIDIA H200"
    same = diff_runs(diagnose(GRAPH_NSYS, step=STEP, rules=None), real[GRAPH.name])
    assert same.samples["step_gpu_ms"].verdict == "no significant change"
