"""The contest's evidence: the sign test of the training bars' extreme moves, and what the two
tests together say about structure."""

import math
import statistics

import numpy as np
import pytest
from test_features import market_from_closes

from envs.core import TradingCore
from envs.synthetic import generate
from training.config import load_config
from training.run import wild_bootstrap
from training.run.evidence import (
    TAIL_WINDOW,
    Evidence,
    binomial_upper_tail,
    halves_evidence,
    momentum_evidence,
    persistence_evidence,
    tail_evidence,
    training_evidence,
)
from training.run.teacher import momentum_teacher, overlap_weights

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


def test_the_generators_crashes_and_trends_show_and_a_random_walk_shows_neither():
    """The benchmark's generators: crashes are falls of 10-20% in a 1% noise; trend regimes'
    returns persist over their spells; a random walk's Gaussian noise has neither."""
    crash = generate("crash_risk", 3000, 0).market
    trend = generate("trend_regimes", 3000, 1).market
    noise = generate("random_walk", 3000, 0).market
    assert tail_evidence([(crash, range(0, 3000))], True) < 0.01
    assert tail_evidence([(noise, range(0, 3000))], True) == 1.0
    assert persistence_evidence([(trend, range(0, 3000))], 64) < 0.05
    assert persistence_evidence([(noise, range(0, 3000))], 64) > 0.1


def test_the_momentum_evidence_counts_the_whole_overlap_of_the_decisions_returns():
    """The contest's momentum test is the teacher's regression with Hansen and Hodrick's
    weights (sized at its level, tests/test_teacher.py); the teacher's own Bartlett weights
    give a random walk's momentum a smaller p-value than it deserves."""
    cfg = load_config(None, ["env.momentum_horizons=[16,64]", "env.decision_interval=5"])
    ranges = [(generate("random_walk", 3000, 0).market, range(0, 3000))]
    core = TradingCore.stacked(ranges, cfg.env)
    overlap = momentum_teacher(core, 1, cfg.env, lag_weights=overlap_weights)
    teacher = momentum_teacher(core, 1, cfg.env)
    assert overlap is not None and teacher is not None
    assert momentum_evidence(cfg, ranges) == overlap.p_value > teacher.p_value


def test_a_reversal_counts_as_momentum_evidence_only_below_its_own_level():
    """Mean reversion's momentum fit predicts reversal, far below any level; a trend's that
    passes predicts continuation. A reversal level reads the first as no evidence (p 1) where it
    is not below the level, in the halves too, and leaves the second as it was."""
    cfg = load_config(None, ["env.momentum_horizons=[16,64]", "env.decision_interval=5"])
    reverting = [(generate("mean_reversion", 3000, 0).market, range(0, 3000))]
    trending = [(generate("trend_regimes", 3000, 2).market, range(0, 3000))]
    raw = momentum_evidence(cfg, reverting)
    assert raw is not None and raw < 1e-10
    assert momentum_evidence(cfg, reverting, reversal_level=raw * 10) == raw
    assert momentum_evidence(cfg, reverting, reversal_level=raw) == 1.0
    assert halves_evidence(cfg, reverting, reversal_level=1e-300) > 0.5  # persistence alone
    assert halves_evidence(cfg, reverting) < 1e-3
    read = training_evidence(cfg, reverting, reversal_level=raw / 10)
    assert read.momentum == 1.0 and read.momentum_reversal == raw
    assert not read.predicts_returns(0.5, ("momentum",))
    assert training_evidence(cfg, reverting).momentum_reversal is None
    continuing = momentum_evidence(cfg, trending)
    assert continuing is not None and continuing < 0.05
    assert momentum_evidence(cfg, trending, reversal_level=1e-300) == continuing


def walk(returns: np.ndarray) -> list:
    """One range over the closes these log `returns` lead to."""
    market = market_from_closes(100 * np.exp(np.concatenate([[0.0], np.cumsum(returns)])))
    return [(market, range(0, len(returns) + 1))]


def test_persistent_returns_pass_the_variance_ratio_test_and_alternating_ones_do_not():
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.01, 3000)
    spells = np.repeat(rng.choice([-1.0, 1.0], 3000 // 100), 100) * 0.003  # 100-bar trends
    assert persistence_evidence(walk(noise + spells), 64) < 1e-6
    alternating = np.where(np.arange(3000) % 2 == 0, 0.01, -0.01)
    assert persistence_evidence(walk(alternating + noise), 16) > 0.999  # VR far below 1


def test_the_variance_ratio_test_is_sized_on_independent_returns():
    """Its level is what it says on i.i.d. noise with a drift and a variance that moves (the
    test is heteroscedasticity-robust, and a drift is no persistence)."""
    rng = np.random.default_rng(1)
    p = [
        persistence_evidence(
            walk(0.002 + rng.normal(0, 1, 3000) * np.repeat([0.01, 0.03], 1500)), 64
        )
        for _ in range(400)
    ]
    assert 0.06 <= np.mean(np.array(p) < 0.1) <= 0.14
    assert 0.02 <= np.mean(np.array(p) < 0.05) <= 0.08


def turbulent_noise(rng: np.random.Generator, n: int = 3000) -> np.ndarray:
    """I.i.d. returns about a drift whose volatility moves in persistent regimes: spells of
    about 150 bars at 1% or 5% a bar, as the learning benchmark's turbulence series have."""
    spells = np.repeat(rng.integers(0, 2, n // 150 + 1), 150)[:n]  # [n] 0 calm, 1 turbulent
    return 0.0003 + rng.normal(0, 1, n) * np.where(spells == 1, 0.05, 0.01)


def test_the_wild_bootstrap_holds_its_level_where_volatility_moves_in_regimes(monkeypatch):
    """On returns with no persistence but a volatility that moves in regimes, the normal's tail
    is too thin and the test passes above its level; the sign-flip bootstrap keeps each return's
    size, so the volatility's path, and holds it."""
    monkeypatch.setattr(wild_bootstrap, "WILD_DRAWS", 999)
    rng = np.random.default_rng(4)
    ranges = [walk(turbulent_noise(rng)) for _ in range(300)]
    wild = np.array([persistence_evidence(r, 64, "wild") for r in ranges])
    normal = np.array([persistence_evidence(r, 64) for r in ranges])
    assert 0.02 <= np.mean(wild < 0.05) <= 0.08
    assert np.mean(normal < 0.02) > 0.03  # the normal's tail is too thin: above its level
    tail = normal < 0.05
    assert np.mean(wild[tail] > normal[tail]) >= 0.9  # and it overstates the ranges there
    assert wild.min() >= 1 / 1000  # never below one draw's share


def test_the_wild_bootstrap_is_a_function_of_the_bars_and_floors_at_one_draw(monkeypatch):
    monkeypatch.setattr(wild_bootstrap, "WILD_DRAWS", 499)
    rng = np.random.default_rng(5)
    noise = walk(rng.normal(0, 0.01, 2000))
    assert persistence_evidence(noise, 64, "wild") == persistence_evidence(noise, 64, "wild")
    spells = np.repeat(rng.choice([-1.0, 1.0], 3000 // 100), 100) * 0.003  # 100-bar trends
    trending = walk(rng.normal(0, 0.01, 3000) + spells)
    assert persistence_evidence(trending, 64) < 1e-6  # the normal reads far below one draw
    assert persistence_evidence(trending, 64, "wild") == 1 / 500  # no flipped copy reaches it
    alternating = walk(np.where(np.arange(3000) % 2 == 0, 0.01, -0.01) + rng.normal(0, 0.01, 3000))
    assert persistence_evidence(alternating, 16, "wild") > 0.99


def test_the_contest_reads_the_persistence_null_its_config_names(monkeypatch):
    monkeypatch.setattr(wild_bootstrap, "WILD_DRAWS", 199)
    keys = ["env.momentum_horizons=[16,64]", "env.decision_interval=5", "train.hold_margin=1"]
    ranges = walk(turbulent_noise(np.random.default_rng(6)))
    for null in ("normal", "wild"):
        cfg = load_config(None, [*keys, f"train.persistence_null={null}"])
        assert training_evidence(cfg, ranges).persistence == persistence_evidence(ranges, 64, null)


def test_the_variance_ratio_test_pools_ranges_and_skips_short_ones():
    rng = np.random.default_rng(2)
    ((market, bars),) = walk(rng.normal(0, 0.01, 500) + np.repeat([0.002, -0.002], 250))
    one = persistence_evidence([(market, bars)], 16)
    z = math.sqrt(2) * statistics.NormalDist().inv_cdf(1 - one)  # two equal ranges: sqrt(2) z
    assert persistence_evidence([(market, bars)] * 2, 16) == pytest.approx(
        1 - statistics.NormalDist().cdf(z)
    )
    short = (market, range(0, 33))  # 32 returns: not more than 2 x 16
    assert persistence_evidence([short], 16) is None
    assert persistence_evidence([short, (market, bars)], 16) == pytest.approx(one)
    assert persistence_evidence([(market, bars)], 1) is None  # no horizon to sum over


def test_the_halves_are_read_apart_and_both_must_show_predictable_returns():
    """Trends in the first half only: the whole range shows them, the halves' reading is the
    second half's, which shows nothing; trends in both halves: each half shows them."""
    cfg = load_config(None, ["env.momentum_horizons=[16,64]", "env.decision_interval=5"])
    horizon = 64
    rng = np.random.default_rng(3)
    noise = rng.normal(0, 0.01, 3000)
    spells = np.repeat(rng.choice([-1.0, 1.0], 3000 // 100), 100) * 0.003  # 100-bar trends
    first_only = walk(noise + np.where(np.arange(3000) < 1500, spells, 0.0))
    ((market, _),) = first_only
    halves = [[(market, range(0, 1500))], [(market, range(1500, 3001))]]
    smallest = [
        min(momentum_evidence(cfg, half), persistence_evidence(half, horizon)) for half in halves
    ]
    assert smallest[0] < 1e-3 < 0.1 < smallest[1]
    assert halves_evidence(cfg, first_only) == max(smallest)
    assert persistence_evidence(first_only, horizon) < 0.01  # the whole range shows them
    everywhere = walk(noise + spells)
    assert halves_evidence(cfg, everywhere) < 1e-3
    # Each range is cut at its own middle, the first halves read together, the second too: one
    # range trending in its first half and one in its second show trends in both
    second_only = walk(noise + np.where(np.arange(3000) >= 1500, spells, 0.0))
    assert halves_evidence(cfg, second_only) > 0.1
    assert halves_evidence(cfg, first_only + second_only) < 1e-3
    assert halves_evidence(load_config(None, ["env.momentum_horizons=[]"]), everywhere) is None
    assert halves_evidence(cfg, [(market, range(0, 100))]) is None  # too few bars in a half


def test_the_halves_reading_is_no_test_of_structure_of_its_own():
    evidence = Evidence(0.5, 0.5, 0.5, halves=0.001)
    assert evidence.below(0.01) == () and not evidence.predicts_returns(0.01)
    assert evidence.level_per_test(0.1, "family") == pytest.approx(0.1 / 3)
    assert evidence.predicts_in_halves(0.01) and not evidence.predicts_in_halves(0.001)
    assert not Evidence(0.001, 0.5, 0.001).predicts_in_halves(1.0)  # not read


@pytest.mark.parametrize(
    ("momentum", "tail", "persistence", "structure"),
    [
        (0.05, 0.5, 0.5, True),
        (0.5, 0.05, 0.5, True),
        (0.5, 0.5, 0.05, True),
        (0.5, 0.5, 0.5, False),
        (0.1, 0.1, 0.1, False),  # below the level, not at it
        (None, 0.05, None, True),
        (None, None, None, False),
    ],
)
def test_structure_is_any_test_below_the_level(momentum, tail, persistence, structure):
    assert Evidence(momentum, tail, persistence).shows_structure(0.1) == structure


@pytest.mark.parametrize(
    ("evidence", "per", "level"),
    [
        (Evidence(0.5, 0.5, 0.5), "test", 0.1),
        (Evidence(0.5, 0.5, 0.5), "family", 0.1 / 3),  # three tests share it
        (Evidence(0.5, None, 0.5), "family", 0.05),  # only those measured
        (Evidence(None, None, None), "family", 0.1),  # none: nothing to share
    ],
)
def test_a_family_level_is_shared_among_the_tests_measured(evidence, per, level):
    assert evidence.level_per_test(0.1, per) == pytest.approx(level)


def test_a_family_level_finds_structure_on_noise_about_as_often_as_it_says():
    # Three independent uniform p-values a range, as the tests give on bars with no structure:
    # each at 0.1 finds some on 1 - 0.9^3 = 27% of ranges, the family at 0.1 on at most 10%.
    p_values = np.random.default_rng(0).uniform(size=(4000, 3))
    found = [Evidence(*map(float, ps)) for ps in p_values]
    for per, share in (("test", 0.271), ("family", 0.098)):
        rate = np.mean([e.shows_structure(e.level_per_test(0.1, per)) for e in found])
        assert rate == pytest.approx(share, abs=0.015)
