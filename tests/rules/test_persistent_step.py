"""The `persistent` condition: a step that is already one persistent kernel is not told to
fuse itself into a megakernel (the demo's megakernel recording, H200)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfdoctor import pipeline

DATA = Path(__file__).resolve().parents[2] / "perfdoctor" / "demo" / "data"


def first_finding(variant: str):
    d = pipeline.diagnose(DATA / variant)
    return d, d.findings[0]


@pytest.mark.parametrize(
    ("variant", "kernels"),
    # The engine's own facts: fused runs 5 kernels x 16 layers + the LM head in its graph,
    # and one position update beside it; the megakernel one kernel and the update.
    [("fused", 5 * 16 + 1 + 1), ("megakernel", 1 + 1)],
)
def test_step_kernels_count_the_steps_own_kernels(variant: str, kernels: int) -> None:
    from perfdoctor.rules.signals import step_kernels_p50

    d = pipeline.diagnose(DATA / variant)
    assert step_kernels_p50(d.analysis).value == kernels


def test_the_megakernel_is_pointed_inside_its_kernel_and_at_fewer_bytes() -> None:
    _, f = first_finding("megakernel")
    assert f.rule_id == "dram-bandwidth" and "persistent" in f.context
    steps = " ".join(f.remediation.steps)
    assert "already one persistent kernel" in steps and "Move fewer bytes" in steps
    assert "Fuse the step" not in steps


def test_the_fused_step_is_still_told_to_fuse() -> None:
    _, f = first_finding("fused")
    assert f.rule_id == "dram-bandwidth" and "persistent" not in f.context
    assert f.remediation.steps[0].startswith("Fuse the step")


def test_a_step_without_kernels_or_a_capture_is_not_persistent() -> None:
    """A CPU step runs no kernel, a capture's steps record theirs as graph nodes: neither is
    a megakernel's step."""
    from perfdoctor.analysis.metrics import Metric
    from perfdoctor.rules.engine import PREDICATES

    persistent = PREDICATES["persistent"][0]
    busy = {"kernel_time_ratio": Metric(0.99, "ratio", "trace")}
    assert [persistent({**busy, "step_kernels_p50": Metric(v, "count", "trace")}) for v in (0.0, 1.0, 2.0, 3.0)] == [False, True, True, False]
    capture = {**busy, "step_kernels_p50": Metric(1.0, "count", "trace"), "capture_trace": Metric(1.0, "flag", "kineto")}
    assert not persistent(capture)


@pytest.mark.parametrize("busy", [0.0018, 0.019, None])
def test_one_short_kernel_amid_host_work_is_not_persistent(busy) -> None:
    """HTA's trace_compare and event-sync samples run one kernel per step for 0.2 % and 1.9 %
    of it: host-bound steps, not a megakernel's; an unknown share says nothing either."""
    from perfdoctor.analysis.metrics import Metric
    from perfdoctor.rules.engine import PREDICATES

    values = {"step_kernels_p50": Metric(1.0, "count", "trace"), "kernel_time_ratio": Metric(busy, "ratio", "trace")}
    assert not PREDICATES["persistent"][0](values)
