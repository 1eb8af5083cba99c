"""Aggregates over seeds, as the field reports them (Agarwal et al. 2021, "Deep RL at the Edge of the
Statistical Precipice"): the interquartile mean and the mean, each with a stratified bootstrap 95%
interval, computed by `rliable`."""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np

BOOTSTRAP_REPS = 2_000  # the interval's bounds move by well under 1% of the spread between repetitions
BOOTSTRAP_SEED = 0  # the same scores always give the same interval


def aggregate(scores: Sequence[float]) -> dict[str, object]:
    """The per-seed scores' mean, median, IQM and bootstrap 95% intervals of the mean and the IQM."""
    from rliable import library, metrics

    runs = np.asarray(scores, np.float64).reshape(-1, 1)  # rliable's (runs x tasks): one task
    estimators = {"mean": metrics.aggregate_mean, "iqm": metrics.aggregate_iqm}
    with warnings.catch_warnings():  # arch's notice that rliable's `random_state` argument will be renamed
        warnings.simplefilter("ignore", FutureWarning)
        points, intervals = library.get_interval_estimates(
            {"scores": runs}, lambda x: np.array([f(x) for f in estimators.values()]), reps=BOOTSTRAP_REPS,
            random_state=np.random.RandomState(BOOTSTRAP_SEED))
    out: dict[str, object] = {"per_seed": [float(x) for x in runs[:, 0]], "median": float(np.median(runs))}
    for i, name in enumerate(estimators):
        out[name] = float(points["scores"][i])
        out[f"{name}_ci95"] = [float(intervals["scores"][0, i]), float(intervals["scores"][1, i])]
    return out
