"""Two-sample statistics for comparing step-time distributions, in numpy only.

Two runs of the same program never give identical step latencies: the GPU clock boosts,
the host thread gets preempted, the allocator warms up. Before `diff` says "faster" or
`gate` fails a build, it asks whether the difference is larger than that noise:

- ``mann_whitney_u``: the Mann-Whitney U (Wilcoxon rank-sum) test. It compares ranks, not
  means, so one 100 ms hiccup among 2 ms steps cannot flip the verdict, and it assumes no
  distribution shape. Exact p-value for small samples without ties, otherwise the normal
  approximation with tie and continuity corrections (the same choices as
  ``scipy.stats.mannwhitneyu(..., alternative="two-sided")``, which the tests check against).
- ``bootstrap_median_ratio``: a percentile bootstrap interval for median(after) /
  median(before), so the report can say "0.42x (0.40-0.45)" rather than only a p-value.
  A fixed seed makes the interval reproducible run to run.

scipy is deliberately not a dependency: `perfdoctor analyze/diff/gate` must stay a small
install.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np

# Like scipy's "auto" method: the exact distribution when there are no ties and the smaller
# sample has at most 8 values. The exact counts cost ~ min(m,n)^2 * max(m,n) big-integer
# operations, so beyond EXACT_MAX_PAIRS pairs the normal approximation (already accurate
# there) is used even then.
EXACT_MAX_MIN_N = 8
EXACT_MAX_PAIRS = 10_000

MIN_SAMPLES = 5  # fewer steps than this per side: a test has too little power to mean anything
ALPHA = 0.05


@dataclass(frozen=True)
class MannWhitney:
    u: float  # U statistic of the first sample (number of (x, y) pairs with x > y, ties 1/2)
    p_value: float  # two-sided
    method: str  # "exact" | "asymptotic"


def _ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks with ties given the mean of the ranks they span (midranks)."""
    order = np.argsort(values, kind="mergesort")
    sorted_vals = values[order]
    # Start of each run of equal values in sorted order.
    new_run = np.r_[True, sorted_vals[1:] != sorted_vals[:-1]]
    run_id = np.cumsum(new_run) - 1
    run_start = np.flatnonzero(new_run)
    run_end = np.r_[run_start[1:], len(values)]  # exclusive
    mid = (run_start + run_end + 1) / 2.0  # mean of ranks start+1 .. end
    ranks = np.empty(len(values))
    ranks[order] = mid[run_id]
    return ranks


def _exact_counts(m: int, n: int) -> np.ndarray:
    """Number of orderings of m x's and n y's giving each U = 0..m*n (U counts x > y pairs).

    These counts are the coefficients of the Gaussian binomial [m+n choose m](q)
    = prod_{k=1..m} (1 - q^(n+k)) / (1 - q^k): each factor pair keeps the partial
    product a polynomial, so the series arithmetic below (truncated at degree m*n) is
    exact. Python integers (object arrays) because the counts pass 2**53 quickly.
    """
    m, n = min(m, n), max(m, n)  # symmetric in m, n; the loop runs over the smaller
    size = m * n + 1
    poly = np.zeros(size, dtype=object)
    poly[0] = 1
    for k in range(1, m + 1):
        shift = n + k
        if shift < size:  # multiply by (1 - q^shift)
            poly[shift:] = poly[shift:] - poly[: size - shift]
        # divide by (1 - q^k): coefficient i gains coefficient i-k, in increasing order,
        # i.e. a cumulative sum along each residue class modulo k.
        padded = np.concatenate([poly, np.zeros(-size % k, dtype=object)])
        poly = np.cumsum(padded.reshape(-1, k), axis=0).reshape(-1)[:size]
    return poly


def _norm_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def mann_whitney_u(x, y) -> MannWhitney:
    """Two-sided Mann-Whitney U test of "x and y come from the same distribution".

    Returns U for ``x`` and the p-value. Raises ValueError on an empty sample.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    m, n = len(x), len(y)
    if m == 0 or n == 0:
        raise ValueError("both samples need at least one value")
    both = np.concatenate([x, y])
    ranks = _ranks(both)
    u1 = float(ranks[:m].sum() - m * (m + 1) / 2.0)
    u2 = m * n - u1
    big = max(u1, u2)  # two-sided: the more extreme of the two tails, doubled
    _, tie_counts = np.unique(both, return_counts=True)
    has_ties = bool((tie_counts > 1).any())

    if not has_ties and min(m, n) <= EXACT_MAX_MIN_N and m * n <= EXACT_MAX_PAIRS:
        counts = _exact_counts(m, n)
        # P(U >= big) as an exact fraction of integers, then one float division.
        p_upper = sum(counts[int(round(big)):]) / sum(counts)
        return MannWhitney(u1, float(min(1.0, 2.0 * p_upper)), "exact")

    total = m + n
    tie_term = float((tie_counts.astype(float) ** 3 - tie_counts).sum())
    var = m * n / 12.0 * ((total + 1) - tie_term / (total * (total - 1)))
    if var <= 0:  # every value identical: no evidence of any difference
        return MannWhitney(u1, 1.0, "asymptotic")
    z = (big - m * n / 2.0 - 0.5) / math.sqrt(var)  # 0.5: continuity correction
    return MannWhitney(u1, float(min(1.0, 2.0 * _norm_sf(z))), "asymptotic")


@dataclass(frozen=True)
class RatioInterval:
    ratio: float  # median(after) / median(before) of the observed samples
    low: float
    high: float
    level: float  # e.g. 0.95
    resamples: int


def bootstrap_median_ratio(
    before, after, *, resamples: int = 2000, level: float = 0.95, seed: int = 0
) -> RatioInterval:
    """Percentile bootstrap interval of median(after) / median(before).

    Each side is resampled with replacement independently (the runs are independent).
    A ratio below 1 means "after" is smaller (for latency: faster). Raises ValueError if a
    sample is empty or the before median is not positive.
    """
    before = np.asarray(before, dtype=float)
    after = np.asarray(after, dtype=float)
    if len(before) == 0 or len(after) == 0:
        raise ValueError("both samples need at least one value")
    base = float(np.median(before))
    if base <= 0:
        raise ValueError("the before median must be positive for a ratio")
    rng = np.random.default_rng(seed)
    b = np.median(before[rng.integers(0, len(before), (resamples, len(before)))], axis=1)
    a = np.median(after[rng.integers(0, len(after), (resamples, len(after)))], axis=1)
    with np.errstate(divide="ignore"):
        ratios = a / b
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(ratios, [tail, 100.0 - tail])
    return RatioInterval(float(np.median(after)) / base, float(low), float(high), level, resamples)


class Why(Enum):
    """Why :func:`compare_samples` reached its verdict; the numbers behind it are the
    :class:`Comparison`'s, and :func:`perfdoctor.reports.diff_report.sample_reason` words them."""

    NO_SAMPLES = "no samples"  # a side has none
    SINGLE_STEP = "single step"  # a side has one: no spread, so noise cannot be told from change
    TOO_FEW = "too few"  # fewer than min_samples on a side
    NOT_SIGNIFICANT = "not significant"  # p >= alpha
    SIGNIFICANT = "significant"  # p < alpha, beyond the noise floor
    WITHIN_NOISE = "within noise"  # p < alpha, but the median moved less than the noise floor


@dataclass(frozen=True)
class Comparison:
    """Verdict on two samples of a quantity (e.g. step latency in ms), why, and the numbers."""

    n_before: int
    n_after: int
    median_before: float | None
    median_after: float | None
    p_value: float | None
    method: str | None
    interval: RatioInterval | None
    verdict: str  # "lower" | "higher" | "no significant change" | "inconclusive"
    why: Why
    noise_floor: float = 0.0  # relative median shift treated as run-to-run noise
    alpha: float = ALPHA  # the significance level the p-value was held to
    min_samples: int = MIN_SAMPLES  # per side, for a test at all


def compare_samples(
    before, after, *, alpha: float = ALPHA, min_samples: int = MIN_SAMPLES, noise_floor: float = 0.0
) -> Comparison:
    """Compare two samples: is "after" significantly lower, higher, or neither?

    Too few samples on a side (< ``min_samples``) gives "inconclusive" with the reason, and
    a single sample is called out as such: one step has no spread, so nothing can be said
    about noise. Significance is the Mann-Whitney p-value below ``alpha``; the bootstrap
    interval of the median ratio is reported alongside for the size of the effect.

    The test sees only the spread *within* each run. Two processes of the same program can
    differ by more than that (clocks, tracer overhead), so a significant shift of the
    median within a factor ``1 + noise_floor`` either way (e.g. 0.3: from 1/1.3x to 1.3x)
    is reported as "no significant change", with the reason.
    """
    before = np.asarray([v for v in before if v is not None and np.isfinite(v)], dtype=float)
    after = np.asarray([v for v in after if v is not None and np.isfinite(v)], dtype=float)
    nb, na = len(before), len(after)
    med_b = float(np.median(before)) if nb else None
    med_a = float(np.median(after)) if na else None

    if nb == 0 or na == 0:
        return Comparison(nb, na, med_b, med_a, None, None, None, "inconclusive", Why.NO_SAMPLES, alpha=alpha, min_samples=min_samples)
    interval = bootstrap_median_ratio(before, after) if med_b and med_b > 0 else None
    if min(nb, na) < min_samples:
        why = Why.SINGLE_STEP if min(nb, na) == 1 else Why.TOO_FEW
        return Comparison(nb, na, med_b, med_a, None, None, interval, "inconclusive", why, alpha=alpha, min_samples=min_samples)

    test = mann_whitney_u(after, before)
    if test.p_value >= alpha:
        verdict, why = "no significant change", Why.NOT_SIGNIFICANT
    else:
        # Direction from the medians; with a significant rank test they agree with U.
        verdict, why = ("lower" if test.u < nb * na / 2.0 else "higher"), Why.SIGNIFICANT
        ratio = med_a / med_b if med_b and med_a else None
        # Symmetric in direction: 1.25x slower and 1/1.25x faster are the same distance.
        if noise_floor > 0 and ratio is not None and max(ratio, 1.0 / ratio) <= 1.0 + noise_floor:
            verdict, why = "no significant change", Why.WITHIN_NOISE
    return Comparison(nb, na, med_b, med_a, test.p_value, test.method, interval, verdict, why, noise_floor, alpha, min_samples)


# --------------------------------------------------------------------------- over processes
#
# When a program is run as several processes (``perfdoctor run --repeat N``), the unit of
# replication is the process: steps inside one process share its clocks, its CPU placement
# and its allocator state, so they are correlated and a step-level test overstates the
# evidence. One number per process (its median step) is an independent sample. With 3-10
# processes per side, a percentile bootstrap over processes has few distinct resamples
# (5 values give 126 distinct multisets) and undercovers; a Welch t-interval on the
# logarithms of the process medians is exact when process effects are log-normal,
# tolerates unequal spread on the two sides, and gives a ratio interval that treats 1.1x
# slower and 1/1.1x faster alike.


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b), for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    # The continued fraction converges fast for x < (a+1)/(a+b+2); use the symmetry
    # I_x(a, b) = 1 - I_(1-x)(b, a) on the other side.
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` (> 0, not necessarily whole) degrees of freedom."""
    if df <= 0:
        raise ValueError("degrees of freedom must be positive")
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))  # P(T > |t|)
    return 1.0 - tail if t >= 0 else tail


def t_ppf(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t with ``df`` degrees of freedom (bisection on t_cdf)."""
    if not 0.0 < q < 1.0:
        raise ValueError("q must lie strictly between 0 and 1")
    if q < 0.5:
        return -t_ppf(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q:  # heavy tails at df ~ 1: the bracket grows geometrically
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class LogRatioInterval:
    """Welch t-interval of the ratio of geometric means, after / before."""

    ratio: float  # exp(mean log after - mean log before)
    low: float
    high: float
    level: float
    df: float  # Welch-Satterthwaite degrees of freedom
    se_log: float  # standard error of the difference of mean logs
    n_before: int
    n_after: int


def _exp(x: float) -> float:
    """exp for a ratio, saturating: values a whole float range apart (1e-308 against 1e308:
    log ratio 1418) give an infinite ratio, which the outputs write as null, not an OverflowError."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def welch_log_ratio(before, after, level: float = 0.95) -> LogRatioInterval:
    """Welch t-interval for after/before on the log scale: the values (one per process,
    e.g. its median step) must be positive, at least two per side.

    ``exp(mean(log a) - mean(log b) ± t * se)`` with ``se² = var(log a)/n_a + var(log b)/n_b``
    (sample variances) and the Welch-Satterthwaite degrees of freedom; the same interval as
    ``scipy.stats.ttest_ind(log a, log b, equal_var=False).confidence_interval(level)``,
    exponentiated. When both sides have no spread at all the interval is the point ratio.
    """
    b = np.asarray(before, dtype=float)
    a = np.asarray(after, dtype=float)
    if len(b) < 2 or len(a) < 2:
        raise ValueError("a t-interval needs at least two values per side")
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(a)) and b.min() > 0 and a.min() > 0):
        raise ValueError("values must be finite and positive for a ratio on the log scale")
    lb, la = np.log(b), np.log(a)
    vb, va = float(lb.var(ddof=1)) / len(lb), float(la.var(ddof=1)) / len(la)
    diff = float(la.mean() - lb.mean())
    se = math.sqrt(vb + va)
    if se == 0.0:
        df = float(len(a) + len(b) - 2)
        return LogRatioInterval(_exp(diff), _exp(diff), _exp(diff), level, df, 0.0, len(b), len(a))
    df = (vb + va) ** 2 / (vb**2 / (len(lb) - 1) + va**2 / (len(la) - 1))
    half = t_ppf(0.5 + level / 2.0, df) * se
    return LogRatioInterval(_exp(diff), _exp(diff - half), _exp(diff + half), level, df, se, len(b), len(a))


def paired_log_ratio(before, after, level: float = 0.95) -> LogRatioInterval:
    """t-interval for after/before from pairs measured side by side (``before[k]`` and
    ``after[k]`` ran one after the other): ``exp(mean(d) ± t(n-1) * sd(d) / sqrt(n))`` with
    ``d = log(after[k] / before[k])``. What the two share at their moment — a machine that
    drifts, another job's load — cancels in each ``d``; the same interval as
    ``scipy.stats.ttest_rel(log a, log b).confidence_interval(level)``, exponentiated."""
    b = np.asarray(before, dtype=float)
    a = np.asarray(after, dtype=float)
    if len(a) != len(b) or len(a) < 2:
        raise ValueError("a paired interval needs two or more pairs")
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(a)) and b.min() > 0 and a.min() > 0):
        raise ValueError("values must be finite and positive for a ratio on the log scale")
    d = np.log(a) - np.log(b)
    mean, se, df = float(d.mean()), float(d.std(ddof=1)) / math.sqrt(len(d)), float(len(d) - 1)
    half = t_ppf(0.5 + level / 2.0, df) * se if se > 0 else 0.0
    return LogRatioInterval(_exp(mean), _exp(mean - half), _exp(mean + half), level, df, se, len(b), len(a))
