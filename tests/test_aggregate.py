"""The aggregates over seeds: the interquartile mean and the bootstrap intervals, on numbers worked by hand."""

import numpy as np
import pytest
import scipy.stats

from jaxrl_fast.outputs.aggregate import aggregate, bootstrap_interval, interquartile_mean


@pytest.mark.parametrize("scores, expected", [
    ([1.0, 2.0, 3.0, 4.0], 2.5),  # one cut from each end: (2 + 3) / 2
    ([100.0, 1.0, 10.0, 2.0, 3.0, 4.0, 5.0, 6.0], 4.5),  # sorted 1 2 | 3 4 5 6 | 10 100
    ([5.0, 1.0, 3.0, 2.0, 4.0], 3.0),  # floor(5 / 4) = 1 cut: (2 + 3 + 4) / 3
    ([7.0, -2.0, 1.0], 2.0),  # fewer than 4 scores: nothing is cut
])
def test_interquartile_mean_cuts_a_quarter_from_each_end(scores, expected):
    assert interquartile_mean(np.array(scores)) == pytest.approx(expected)
    assert interquartile_mean(np.array(scores)) == pytest.approx(scipy.stats.trim_mean(scores, 0.25))


def test_interquartile_mean_reduces_the_last_axis_of_resamples():
    rows = np.array([[1.0, 2.0, 3.0, 4.0], [4.0, 4.0, 0.0, 8.0]])
    np.testing.assert_allclose(interquartile_mean(rows, axis=-1), [2.5, 4.0])


def test_bootstrap_interval_of_two_seeds_spans_both():
    """Seeds scoring 0 and 1: a resample's mean is 0, 0.5 or 1 with chances 1/4, 1/2, 1/4, so the
    2.5th and 97.5th percentiles of 2,000 resamples are 0 and 1."""
    assert bootstrap_interval(np.array([0.0, 1.0]), np.mean) == (0.0, 1.0)


def test_bootstrap_interval_of_equal_scores_is_a_point_and_is_repeatable():
    assert bootstrap_interval(np.full(5, 500.0), interquartile_mean) == (500.0, 500.0)
    scores = np.array([500.0, 12.0, 488.0, 300.0, 499.0])
    assert bootstrap_interval(scores, np.mean) == bootstrap_interval(scores, np.mean)
    low, high = bootstrap_interval(scores, np.mean)
    assert 12.0 <= low < scores.mean() < high <= 500.0


def test_aggregate_reports_every_statistic():
    out = aggregate([500.0, 500.0, 10.0, 500.0])
    assert out["per_seed"] == [500.0, 500.0, 10.0, 500.0]
    assert out["mean"] == pytest.approx(377.5) and out["median"] == 500.0 and out["iqm"] == 500.0
    assert out["mean_ci95"][0] >= 10.0 and out["mean_ci95"][1] == 500.0
    assert out["iqm_ci95"][1] == 500.0
