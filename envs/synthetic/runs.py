"""Run precomputed actions through `envs.TradingEnv`: every reference number on one engine."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from envs.config import EnvConfig
from envs.synthetic.generators import SyntheticSeries
from envs.trading_env import TradingEnv


@dataclass(frozen=True, eq=False)
class RunResult:
    """One account traded over a range of bars by given actions, with the engine's costs."""

    bars: range  # the range traded; decisions from max(start, window - 1) to stop - 2
    first_bar: int  # the first decision bar: row 0 of `equity` and `exposure` is its close
    equity: np.ndarray  # [n + 1] equity at the first decision bar's close, then after each step
    exposure: np.ndarray  # [n + 1] signed position value / equity at the same closes
    cost_share: np.ndarray  # [n] each step's costs / the equity before it
    log_growth: float  # log(final equity / initial equity); -inf after a bankruptcy
    turnover_per_year: float  # traded notional / equity at the trade, summed, per year
    fees_pct_per_year: float  # commission + slippage + financing + borrow, % of equity, per year
    n_trades: int  # positions opened: from flat, by a flip, or again after a stop
    stops: int  # positions closed by their stop
    terminated: bool  # liquidated or bankrupt before the range ended


def run_actions(
    series: SyntheticSeries,
    config: EnvConfig,
    actions: np.ndarray,
    bars: range,
    *,
    sized: bool = False,
) -> RunResult:
    """Step a `TradingEnv` over `bars` of `series`; the decision on bar t is ``actions[t]``.

    actions: [T, 3] int (direction, leverage, risk level indices of `config`). The run starts
    flat at the first decision bar and ends when the range does (or the account is liquidated or
    bankrupt). `config`'s episode settings are replaced by a whole-range evaluation, its
    `decision_interval` by 1 and, unless `sized`, its `volatility_target` by none: the rules
    decide on every bar and hold the leverage levels they choose (the yardstick inherits neither
    the agent's cadence nor its sizing). With `sized` the levels are sized as the agent's are.
    """
    config = replace(
        config,
        random_start=False,
        episode_length=None,
        decision_interval=1,
        volatility_target=config.volatility_target if sized else None,
    )
    env = TradingEnv(series.market, config, bars=bars)
    _, info = env.reset()
    first_bar = bar = info["bar"]
    equity, exposure, cost_share = [info["equity"]], [0.0], []
    n_trades, held_side = 0, 0.0
    sides = config.direction_sides
    while True:
        action = actions[bar]
        _, _, terminated, truncated, info = env.step(action)
        side = float(sides[int(action[0])])
        if not math.isnan(info["order_fill"]) and side != 0.0 and side != held_side:
            n_trades += 1
        cost_share.append(info["costs"] / equity[-1])
        equity.append(info["equity"])
        exposure.append(info["exposure"])
        bar, held_side = info["bar"], float(np.sign(info["position"]))
        if terminated or truncated:
            break
    summary = info["episode_trading"]
    years = (len(equity) - 1) / (config.bars_per_year or series.market.bars_per_year())
    final = max(equity[-1], 0.0)
    return RunResult(
        bars=bars,
        first_bar=first_bar,
        equity=np.asarray(equity),
        exposure=np.asarray(exposure),
        cost_share=np.asarray(cost_share),
        log_growth=math.log(final / equity[0]) if final > 0 else -math.inf,
        turnover_per_year=summary["turnover"] / years,
        fees_pct_per_year=100.0 * sum(cost_share) / years,
        n_trades=n_trades,
        stops=int(summary["stops"]),
        terminated=bool(terminated),
    )


def buy_and_hold_actions(config: EnvConfig, n_bars: int) -> np.ndarray:
    """[n_bars, 3] `config.hold_action` (long at the leverage level nearest 1x with the widest
    stop), every bar.

    After a stop the repeated action enters again at the next open (as the backtest baseline).
    """
    return np.tile(np.array(config.hold_action, dtype=np.int64), (n_bars, 1))


def buy_and_hold_growth(series: SyntheticSeries, config: EnvConfig, bars: range) -> float:
    """Log growth of `buy_and_hold_actions` over `bars`, through the same engine and costs."""
    actions = buy_and_hold_actions(config, len(series.market))
    return run_actions(series, config, actions, bars).log_growth
