"""compare/stats.py against scipy.stats, where the other tests do not already check it.

Mann-Whitney (tests/compare/test_diff.py) and the t-distribution, Welch and paired
intervals (tests/record/test_repeats.py) are compared with scipy there; this file checks
the bootstrap. scipy stays out of perfdoctor's dependencies (docs/architecture.md, "Library
decisions": 143 MB installed, seconds of import for what these few functions do), so it
is the independent computation the tests check the hand-written statistics against.
"""

from __future__ import annotations

import numpy as np
import pytest

from perfdoctor.compare.stats import bootstrap_median_ratio


@pytest.mark.parametrize("shift", [1.0, 0.8, 1.3])
def test_bootstrap_median_ratio_matches_scipy_percentile_bootstrap(shift: float) -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(11)
    # Step latencies: lognormal around 2 ms, with a few slow outliers, as a loaded host gives.
    before = np.exp(rng.normal(np.log(2.0), 0.08, 300))
    after = np.exp(rng.normal(np.log(2.0 * shift), 0.08, 300))
    before[:6] *= 5
    ours = bootstrap_median_ratio(before, after, resamples=4000)
    ref = stats.bootstrap((before, after), lambda b, a, axis=-1: np.median(a, axis=axis) / np.median(b, axis=axis),
                          method="percentile", n_resamples=20000, confidence_level=0.95, vectorized=True,
                          random_state=np.random.default_rng(3))
    assert ours.ratio == pytest.approx(np.median(after) / np.median(before), rel=1e-12)
    # Two Monte Carlo estimates of the same percentiles (fixed seeds: the same every run) agree
    # within 0.1 %; a 90 % interval in place of the 95 % one moves each end by ~0.25 % here.
    assert ours.low == pytest.approx(ref.confidence_interval.low, rel=1e-3)
    assert ours.high == pytest.approx(ref.confidence_interval.high, rel=1e-3)
    assert bootstrap_median_ratio(before, after, resamples=4000, level=0.9).low != pytest.approx(ref.confidence_interval.low, rel=1e-3)
    assert ours.low < ours.ratio < ours.high
