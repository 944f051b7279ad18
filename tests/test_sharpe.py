"""One Sharpe ratio (`envs.sharpe`): the env's episode summaries and the backtest metrics agree."""

import math

import numpy as np
import pytest

from envs import TradingEnv
from envs.sharpe import sharpe_from_sums, sharpe_ratio
from training.evaluation.metrics import record_metrics
from training.evaluation.rollout import record_episode

GOOGL = "data/gymanytrading_GOOGL_daily.csv"


def test_the_ratio_is_nan_without_volatility_or_without_two_returns():
    assert sharpe_ratio(0.001, 0.01, 252) == pytest.approx(0.1 * math.sqrt(252))
    assert math.isnan(sharpe_ratio(0.001, 0.0, 252))
    assert math.isnan(sharpe_ratio(0.001, math.nan, 252))
    assert math.isnan(sharpe_from_sums(1, 0.01, 0.0001, 252))
    assert math.isnan(sharpe_from_sums(20, 0.0, 0.0, 252))  # a flat account


def test_running_sums_give_the_sample_standard_deviation():
    returns = np.random.default_rng(0).normal(0.001, 0.01, 50)
    expected = returns.mean() / returns.std(ddof=1) * math.sqrt(252)
    total, total_sq = returns.sum(), (returns**2).sum()
    assert sharpe_from_sums(len(returns), total, total_sq, 252) == pytest.approx(expected)


@pytest.mark.parametrize("trading", [True, False])
def test_episode_summary_and_backtest_metrics_agree(trading):
    def env() -> TradingEnv:
        return TradingEnv(GOOGL, window=16, episode_length=120, random_start=False,
                          leverage_levels=(1.0,), risk_levels=(0.5,))  # fmt: skip

    directions = np.random.default_rng(1).integers(0, 3, 120) if trading else np.ones(120, int)
    actions = iter([np.array([d, 0, 0]) for d in directions])
    record = record_episode(env(), lambda obs: next(actions))
    replay = env()
    replay.reset()
    for direction in directions:
        *_, terminated, truncated, info = replay.step(np.array([direction, 0, 0]))
        if terminated or truncated:
            break
    summary = info["episode_trading"]["sharpe"]
    metrics = record_metrics(record, bars_per_year=replay.core.bars_per_year)["sharpe"]
    if trading:
        assert summary == pytest.approx(metrics, rel=1e-9)
    else:
        assert math.isnan(summary) and math.isnan(metrics)
