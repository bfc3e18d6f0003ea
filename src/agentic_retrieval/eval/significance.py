"""Is a difference between two configurations real? Paired tests over the same questions.

For a metric, each question gives a pair (baseline value, other value). The report gives the
mean difference, a 95% bootstrap confidence interval of it (percentile method) and the
two-sided p-value of a paired randomization test (the sign of each question's difference is
flipped at random), the test Smucker, Allan and Carterette (CIKM 2007) recommend for IR.
Both come from ``scipy.stats`` with a fixed seed, so a report is reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

RESAMPLES = 10_000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Comparison:
    """A configuration against the baseline on one metric."""

    baseline: str
    configuration: str
    metric: str
    questions: int
    baseline_mean: float
    mean: float
    delta: float
    ci_low: float
    ci_high: float
    p_value: float

    @property
    def significant(self) -> bool:
        """Whether p < 0.05."""
        return self.p_value < 0.05

    @property
    def marker(self) -> str:
        """`` *`` after a p-value under 0.05."""
        return " *" if self.significant else ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {**asdict(self), "significant": self.significant}


def paired_comparison(
    baseline: Sequence[float],
    other: Sequence[float],
    *,
    names: tuple[str, str, str],
    seed: int = 0,
) -> Comparison:
    """Compare paired per-question values (same questions, same order).

    Args:
        baseline: The baseline configuration's values.
        other: The other configuration's values.
        names: ``(baseline name, other name, metric)``.
        seed: Seed of the resampling (fixed: the same inputs give the same report).

    Raises:
        ValueError: Different lengths, or no questions.
    """
    from scipy import stats

    if len(baseline) != len(other) or not baseline:
        raise ValueError("paired comparison needs the same non-zero number of values")
    a = np.asarray(baseline, dtype=float)
    b = np.asarray(other, dtype=float)
    deltas = b - a
    delta = float(deltas.mean())
    if np.allclose(deltas, deltas[0]):
        # no variation: every resample gives the same mean; the test is decided
        low = high = delta
        p_value = 1.0 if np.isclose(delta, 0.0) else 0.0
    else:
        rng = np.random.default_rng(seed)
        interval = stats.bootstrap(
            (deltas,),
            np.mean,
            confidence_level=CONFIDENCE,
            n_resamples=RESAMPLES,
            method="percentile",
            rng=rng,
        ).confidence_interval
        low, high = float(interval.low), float(interval.high)
        test = stats.permutation_test(
            (a, b),
            _mean_difference,
            permutation_type="samples",
            n_resamples=RESAMPLES,
            alternative="two-sided",
            vectorized=True,
            rng=np.random.default_rng(seed),
        )
        p_value = float(test.pvalue)
    return Comparison(
        baseline=names[0],
        configuration=names[1],
        metric=names[2],
        questions=len(a),
        baseline_mean=float(a.mean()),
        mean=float(b.mean()),
        delta=delta,
        ci_low=low,
        ci_high=high,
        p_value=p_value,
    )


def mean_interval(values: Sequence[float], *, seed: int = 0) -> tuple[float, float, float] | None:
    """The mean of ``values`` and a 95% bootstrap confidence interval of it (percentile).

    Returns:
        ``(mean, low, high)``, or ``None`` without values. One value, or values that are all
        equal, give an interval of width 0: nothing to resample.
    """
    from scipy import stats

    if not values:
        return None
    data = np.asarray(values, dtype=float)
    mean = float(data.mean())
    if len(data) < 2 or np.allclose(data, data[0]):
        return mean, mean, mean
    interval = stats.bootstrap(
        (data,),
        np.mean,
        confidence_level=CONFIDENCE,
        n_resamples=RESAMPLES,
        method="percentile",
        rng=np.random.default_rng(seed),
    ).confidence_interval
    return mean, float(interval.low), float(interval.high)


def _mean_difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    difference: np.ndarray = np.mean(y - x, axis=axis)
    return difference
