"""The contest's evidence: the sign test of the training bars' extreme moves, and what the two
tests together say about structure."""

import numpy as np
import pytest
from test_features import market_from_closes

from envs.synthetic import generate
from training.run.evidence import (
    TAIL_WINDOW,
    Evidence,
    binomial_upper_tail,
    tail_evidence,
)

STEP = 0.01  # each ordinary bar moves the log price by +-1%: a median absolute return of 1%
EXTREME = 5.0 * STEP / 0.6745  # the smallest extreme move: 5 robust standard deviations


def bars(shocks: dict[int, float], n: int = 400) -> list:
    """One range of `n` closes whose log returns alternate +STEP and -STEP, with the returns at
    the bar indices of `shocks` replaced by those values."""
    returns = np.where(np.arange(n - 1) % 2 == 0, STEP, -STEP)
    for bar, value in shocks.items():
        returns[bar - 1] = value  # the return into `bar`
    market = market_from_closes(100 * np.exp(np.concatenate([[0.0], np.cumsum(returns)])))
    return [(market, range(0, n))]


def test_a_move_counts_as_extreme_beyond_five_robust_standard_deviations_of_the_bars_before():
    # Two falls just beyond the line: 1/4 that both fall by chance; just inside it: no extreme
    assert tail_evidence(bars({100: -1.01 * EXTREME, 200: -1.01 * EXTREME}), True) == 0.25
    assert tail_evidence(bars({100: -0.99 * EXTREME, 200: -0.99 * EXTREME}), True) == 1.0
    # The first TAIL_WINDOW returns only set the scale
    assert tail_evidence(bars({TAIL_WINDOW: -10 * EXTREME}), True) == 1.0
    assert tail_evidence(bars({TAIL_WINDOW + 1: -10 * EXTREME}), True) == 0.5


def test_the_scale_is_read_from_the_returns_before_each_bar_only():
    # A run of shocks: each is measured against the 64 returns before it, the earlier shocks
    # among them; the median moves little, so all eight count
    shocks = {bar: -5 * EXTREME for bar in range(150, 158)}
    assert tail_evidence(bars(shocks), True) == 0.5**8
    # A later bar cannot change whether an earlier one counted
    later = {**shocks, 300: 100 * STEP}
    assert tail_evidence(bars(later), True) == binomial_upper_tail(8, 9)


@pytest.mark.parametrize(
    ("falls", "rises", "long_only", "expected"),
    [
        (6, 0, True, 1 / 64),  # every extreme a fall: what a stop below a long guards
        (0, 6, True, 1.0),  # every extreme a rise: nothing for a long's stop
        (6, 0, False, 2 / 64),  # with shorts a stop guards either side: two-sided
        (0, 6, False, 2 / 64),
        (3, 3, True, 42 / 64),  # P(X >= 3), X ~ Bin(6, 1/2)
        (3, 3, False, 1.0),
    ],
)
def test_the_sign_test_leans_to_the_side_a_stop_guards(falls, rises, long_only, expected):
    shocks = {100 + 20 * i: -2 * EXTREME for i in range(falls)}
    shocks |= {300 + 20 * i: 2 * EXTREME for i in range(rises)}
    assert tail_evidence(bars(shocks, n=600), long_only) == pytest.approx(expected)


def test_ranges_are_pooled_and_too_short_ones_are_not_measured():
    (one,) = bars({100: -2 * EXTREME})
    assert tail_evidence([one, one], True) == 0.25  # two falls, one per range
    short = (one[0], range(0, TAIL_WINDOW + 1))  # 64 returns: none measured
    assert tail_evidence([short], True) is None
    assert tail_evidence([short, one], True) == 0.5
    assert tail_evidence([], True) is None


def test_binomial_upper_tail_is_exact():
    assert binomial_upper_tail(0, 0) == binomial_upper_tail(0, 5) == 1.0
    assert binomial_upper_tail(3, 3) == 1 / 8 and binomial_upper_tail(2, 3) == 1 / 2
    assert binomial_upper_tail(2000, 2000) == 0.5**2000  # no float overflow in 2**n


def test_crash_risk_bars_show_a_heavier_left_tail_and_a_random_walk_none():
    """The benchmark's generators: crashes are falls of 10-20% in a 1% noise; a random walk's
    Gaussian noise has no move beyond five standard deviations."""
    crash = generate("crash_risk", 3000, 0).market
    walk = generate("random_walk", 3000, 0).market
    assert tail_evidence([(crash, range(0, 3000))], True) < 0.01
    assert tail_evidence([(walk, range(0, 3000))], True) == 1.0


@pytest.mark.parametrize(
    ("momentum", "tail", "structure"),
    [
        (0.05, 0.5, True),
        (0.5, 0.05, True),
        (0.5, 0.5, False),
        (0.1, 0.1, False),  # below the level, not at it
        (None, 0.05, True),
        (None, None, False),
    ],
)
def test_structure_is_any_test_below_the_level(momentum, tail, structure):
    assert Evidence(momentum, tail).shows_structure(0.1) == structure
