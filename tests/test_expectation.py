"""Expected log growth given the exposure held: the benchmark's yardstick without price noise."""

import math

import numpy as np
import pytest

from envs import EnvConfig
from envs.synthetic import buy_and_hold_actions, generate, run_actions
from envs.synthetic.expectation import expected_log_growth


def test_hand_arithmetic_on_a_random_walk():
    series = generate("random_walk", 10, seed=0)  # drift 0.0002, vol 0.01 a bar
    params = series.params
    night = params["night_substeps"] / (params["night_substeps"] + params["substeps"])
    mean, var = 0.0002 + 0.5e-4, 1e-4  # mean simple return and variance of a bar

    def g(e: float) -> float:
        return e * mean - 0.5 * e * e * var

    ones = np.ones(6)
    assert expected_log_growth(series, 2, ones, np.zeros(5)) == pytest.approx(5 * 0.0002)
    assert expected_log_growth(series, 2, np.zeros(6), np.full(5, 0.01)) == pytest.approx(
        5 * math.log(0.99)
    )
    # Flat, then 2x from the open of bar 4 (the night of bar 4 still flat), 0.5x from bar 6.
    exposure = np.array([0.0, 0.0, 2.0, 2.0, 0.5, 0.5])
    costs = np.array([0.0, 0.002, 0.0, 0.001, 0.0])
    hand = (
        (1 - night) * g(2.0)
        + g(2.0)
        + night * g(2.0)
        + (1 - night) * g(0.5)
        + g(0.5)
        + math.log(0.998)
        + math.log(0.999)
    )
    assert expected_log_growth(series, 2, exposure, costs) == pytest.approx(hand, rel=1e-12)


def test_the_states_set_each_bar_mean_and_variance():
    series = generate("turbulence_regimes", 400, seed=1)
    drift, vol = series.params["drift"], series.params["vol"]
    n = 300
    bars = series.state[1 : n + 1]  # bars 1..n after a first bar 0
    held = expected_log_growth(series, 0, np.ones(n + 1), np.zeros(n))
    assert held == pytest.approx(sum(drift[s] for s in bars))  # unlevered: the log drift
    levered = expected_log_growth(series, 0, np.full(n + 1, 2.0), np.zeros(n))
    assert levered == pytest.approx(sum(2 * drift[s] - vol[s] ** 2 for s in bars))
    assert 0 < np.count_nonzero(bars) < n  # both states visited


def test_it_is_the_mean_of_realized_growth_over_seeds():
    """Unbiased: over 60 seeds of a 0.5x account, realized minus expected averages to 0 within
    four standard errors, and the expected growth varies far less from seed to seed."""
    config = EnvConfig(leverage_levels=(0.5, 1.0), long_only=True, risk_levels=(math.inf,))
    realized, expected = [], []
    for seed in range(60):
        series, bars = generate("turbulence_regimes", 1200, seed), range(200, 1200)
        actions = buy_and_hold_actions(config, len(series.market))
        actions[:, 1] = config.leverage_levels.index(0.5)
        run = run_actions(series, config, actions, bars)
        realized.append(run.log_growth)
        expected.append(expected_log_growth(series, run.first_bar, run.exposure, run.cost_share))
    gap = np.asarray(realized) - np.asarray(expected)
    assert abs(gap.mean()) < 4 * gap.std() / math.sqrt(len(gap))
    assert np.std(expected) < 0.2 * np.std(realized)


@pytest.mark.parametrize("kind", ["crash_risk", "mean_reversion"])
def test_crash_and_mean_reversion_kinds_are_refused(kind):
    with pytest.raises(ValueError, match="crash-free regime series"):
        expected_log_growth(generate(kind, 50, seed=0), 0, np.ones(11), np.zeros(10))


def test_paths_that_do_not_fit_the_series_are_refused():
    series = generate("random_walk", 50, seed=0)
    with pytest.raises(ValueError, match="need 10 cost shares"):
        expected_log_growth(series, 0, np.ones(11), np.zeros(9))
    with pytest.raises(ValueError, match="the series has 50"):
        expected_log_growth(series, 45, np.ones(11), np.zeros(10))
