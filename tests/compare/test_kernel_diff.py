"""compare/kernels.py: kernels matched across runs by normalized name, per step.

CRAFTED variants of the real H200 eager trace (tests/diffgate_helpers.py) where a test
needs a kernel renamed.
"""

from __future__ import annotations

import pytest

from conftest import FIXTURES
from diffgate_helpers import renamed_kernels
from perfdoctor.compare.kernels import compare_kernels, kernel_table
from perfdoctor.pipeline import diagnose
from perfdoctor.reports.diff_report import kernel_summary

EAGER5 = FIXTURES / "h200-llama1b-eager-5steps.kineto.json.gz"
STEP = "decode_step"


@pytest.fixture(scope="module")
def eager5():
    return diagnose(EAGER5, step=STEP, rules=None)


def test_kernel_table_counts_what_kernels_per_step_counts(eager5) -> None:
    table, divisor, per = kernel_table(eager5.analysis)
    assert (per, divisor) == ("step", 5)
    assert table["count"].sum() == pytest.approx(eager5.analysis.value("kernels_per_step"))
    assert (table["variants"] >= 1).all()


def test_crafted_renamed_kernels_appear_and_vanish(eager5, tmp_path) -> None:
    path = renamed_kernels(EAGER5, tmp_path / "fused.kineto.json.gz", "vectorized_elementwise_kernel", "triton_poi_fused_mul_7")
    k = compare_kernels(eager5.analysis, diagnose(path, step=STEP, rules=None).analysis)
    assert [r.name for r in k.vanished] == ["at::native::vectorized_elementwise_kernel"]
    assert [r.name for r in k.appeared] == ["triton_poi_fused_mul"]
    assert k.appeared[0].count_after == 425
    assert k.rows == sorted(k.rows, key=lambda r: (-abs(r.time_change_us), r.name))  # largest movers first
    assert kernel_summary(k) == "launches/step 945 → 945; kernels/step 945 (14 names) → 945 (14 names); 1 vanished, 1 appeared"
