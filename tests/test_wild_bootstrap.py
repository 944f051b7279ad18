"""The wild bootstraps of the contest's tests: the momentum test's statistic on sign-flipped
copies of the bars, and the draw loop both tests share."""

import math

import numpy as np
import pytest
from test_evidence import turbulent_noise, walk

from envs.core import TradingCore
from envs.features import compute_features, feature_names, rolling_volatility, scaled_momentum
from envs.synthetic import generate
from training.config import ConfigError, load_config
from training.run import wild_bootstrap
from training.run.evidence import momentum_evidence, training_evidence
from training.run.teacher import momentum_teacher, overlap_weights
from training.run.wild_bootstrap import MomentumRange, momentum_wald_z, wild_p_value

KEYS = ["env.momentum_horizons=[16,64]", "env.decision_interval=5", "train.hold_margin=1"]


def observed_p(cfg, ranges) -> float:
    """The momentum test's chi-square p-value as the bootstrap computes its statistic on the
    bars themselves (every sign +1)."""
    core = TradingCore.stacked(ranges, cfg.env)
    parts = [MomentumRange.of(m, bars, cfg.env, core.bars_per_year) for m, bars in ranges]
    ones = [np.ones((1, part.n), dtype=np.int8) for part in parts]
    z = momentum_wald_z(parts, ones, cfg.env.momentum_horizons, 5, overlap_weights(5))[0]
    return 0.5 * math.erfc(z / math.sqrt(2.0))


@pytest.mark.parametrize("kind", ["random_walk", "trend_regimes", "turbulence_regimes"])
def test_the_copies_statistic_on_the_bars_themselves_is_the_momentum_test(kind):
    """With every sign +1 the bootstrap's regression is the contest's momentum test: the same
    decision bars, targets from the next open with the opening gaps, the budget's sizing, the
    momentum features and Hansen and Hodrick's covariance, over two instruments' ranges, one of
    them starting after bars of history."""
    cfg = load_config(None, KEYS)
    ranges = [
        (generate(kind, 2500, 0).market, range(0, 2500)),
        (generate(kind, 2500, 1).market, range(700, 2400)),
    ]
    core = TradingCore.stacked(ranges, cfg.env)
    fit = momentum_teacher(core, len(ranges), cfg.env, lag_weights=overlap_weights)
    assert fit is not None
    assert observed_p(cfg, ranges) == pytest.approx(fit.p_value, rel=1e-5, abs=1e-12)


def test_the_momentum_of_flipped_copies_is_the_features_momentum_of_those_bars():
    """`scaled_momentum` of a batch of copies, over the original bars' volatility, is the
    features' `momentum_<h>` of each copy's own bars: the volatility depends on the moves' sizes
    alone."""
    rng = np.random.default_rng(0)
    returns = rng.normal(0, 0.01, 400)
    moves = np.concatenate([[0.0], returns])  # [T] the walk's close moves (c_{-1} := o_0)
    volatility = rolling_volatility(moves, 64)  # [T]
    signs = np.concatenate([np.ones((3, 1)), rng.choice([-1.0, 1.0], (3, 400))], axis=1)
    names = feature_names((16, 64))
    for copy in signs:
        ((own, _),) = walk(copy[1:] * returns)  # the bars whose closes move by the flips
        features = compute_features(own, 64, 252.0, (16, 64))
        for h in (16, 64):
            batched = scaled_momentum((signs * moves)[None], volatility, h)[0]
            assert batched.shape == (3, 401)
            np.testing.assert_allclose(
                scaled_momentum(copy * moves, volatility, h),
                features[:, names.index(f"momentum_{h}")],
                rtol=1e-5,
                atol=1e-6,
            )


def test_the_wild_momentum_test_holds_its_level_where_volatility_moves_in_regimes(monkeypatch):
    """On returns with no predictability whose volatility moves in persistent regimes, the
    bootstrap's p-values are about uniform (its share below each level about the level), where
    it reads the same bars as the chi-square and never below one draw's share."""
    monkeypatch.setattr(wild_bootstrap, "WILD_DRAWS", 199)
    cfg = load_config(None, [*KEYS, "train.momentum_null=wild"])
    rng = np.random.default_rng(7)
    ranges = [walk(turbulent_noise(rng, 1500)) for _ in range(60)]
    wild = np.array([momentum_evidence(cfg, r) for r in ranges])
    assert 0.03 <= np.mean(wild < 0.2) <= 0.4
    assert 0.4 <= np.mean(wild < 0.5) <= 0.6
    assert wild.min() >= 1 / 200


def test_the_wild_momentum_test_finds_a_trend_and_reads_the_config(monkeypatch):
    """A trend's momentum predicts its next returns beyond every flipped copy; the evidence the
    contest reads is the null its config names, and the reading is a function of the bars."""
    monkeypatch.setattr(wild_bootstrap, "WILD_DRAWS", 199)
    rng = np.random.default_rng(8)
    spells = np.repeat(rng.choice([-1.0, 1.0], 3000 // 100), 100) * 0.003  # 100-bar trends
    trending = walk(rng.normal(0, 0.01, 3000) + spells)
    normal = load_config(None, KEYS)
    wild = load_config(None, [*KEYS, "train.momentum_null=wild"])
    assert momentum_evidence(normal, trending) < 1 / 200
    assert momentum_evidence(wild, trending) == 1 / 200  # no copy reaches the bars' statistic
    noise = walk(rng.normal(0, 0.01, 2000))
    assert momentum_evidence(wild, noise) == momentum_evidence(wild, noise)
    assert training_evidence(wild, noise).momentum == momentum_evidence(wild, noise)
    assert training_evidence(normal, noise).momentum == momentum_evidence(normal, noise)


def test_the_draws_stop_once_enough_copies_reach_the_statistic(monkeypatch):
    """Besag and Clifford's sequential p-value: with `enough` the loop stops after the batch by
    which that many copies reached the observed statistic, reading their share of the copies
    drawn; without it, or where too few do, every draw counts the bars as one of them."""
    monkeypatch.setattr(wild_bootstrap, "WILD_DRAWS", 1000)
    calls = []

    def statistic(signs: list[np.ndarray]) -> np.ndarray:
        calls.append(len(signs[0]))
        return signs[0][:, 0].astype(float)  # +-1: half the copies reach 0.5

    p = wild_p_value(0.5, statistic, [3], per_batch=100, enough=120)
    assert calls == [100, 100, 100] and p == pytest.approx(0.5, abs=0.1)
    calls.clear()
    assert wild_p_value(2.0, statistic, [3], per_batch=100, enough=120) == 1 / 1001
    assert calls == [100] * 10


def test_the_momentum_null_is_a_contests_key():
    with pytest.raises(ConfigError, match=r"train\.momentum_null: .*normal without a contest"):
        load_config(None, ["train.momentum_null=wild"])
    with pytest.raises(ConfigError, match=r"train\.momentum_null"):
        load_config(None, [*KEYS, "train.momentum_null=bootstrap"])
