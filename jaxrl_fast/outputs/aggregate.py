"""Aggregates over seeds, as the field reports them (Agarwal et al. 2021, "Deep RL at the Edge of the
Statistical Precipice"): the interquartile mean and the mean, each with a bootstrap 95% percentile
interval over the seeds (the stratified bootstrap of that paper, for one task)."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

BOOTSTRAP_REPS = 2_000  # the interval's bounds move by well under 1% of the spread between repetitions
BOOTSTRAP_SEED = 0  # the same scores always give the same interval
CONFIDENCE = 0.95


def interquartile_mean(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """The mean of the middle half: `floor(n / 4)` scores cut from each end of the sorted `scores`
    along `axis` (`scipy.stats.trim_mean(scores, 0.25)`)."""
    ordered = np.sort(scores, axis=axis)
    cut = ordered.shape[axis] // 4
    return np.take(ordered, np.arange(cut, ordered.shape[axis] - cut), axis=axis).mean(axis=axis)


def bootstrap_interval(scores: np.ndarray, statistic: Callable[..., np.ndarray], reps: int = BOOTSTRAP_REPS,
                       seed: int = BOOTSTRAP_SEED, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The percentile interval of `statistic` over `reps` resamples of the seeds with replacement.

    `scores`: [n] per-seed scores; `statistic(samples, axis=-1)` reduces the last axis of [reps, n]."""
    rng = np.random.default_rng(seed)
    resamples = scores[rng.integers(0, len(scores), size=(reps, len(scores)))]
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(statistic(resamples, axis=-1), [tail, 100 - tail])
    return float(low), float(high)


def aggregate(scores: Sequence[float]) -> dict[str, object]:
    """The per-seed scores' mean, median, IQM and bootstrap 95% intervals of the mean and the IQM."""
    runs = np.asarray(scores, np.float64).reshape(-1)
    out: dict[str, object] = {"per_seed": [float(x) for x in runs], "median": float(np.median(runs))}
    for name, statistic in (("mean", np.mean), ("iqm", interquartile_mean)):
        out[name] = float(statistic(runs, axis=-1))
        out[f"{name}_ci95"] = list(bootstrap_interval(runs, statistic))
    return out
