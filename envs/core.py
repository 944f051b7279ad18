"""What the single and the batched environment share: data, precomputed arrays, spaces, episodes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium import spaces

from envs import execution as ex
from envs.config import EnvConfig
from envs.features import CLIP, FEATURE_NAMES, compute_features
from envs.market_data import DataError, MarketData


class TradingCore:
    """Market arrays and execution rules for one data range, stepping any number of accounts.

    Everything a step needs is precomputed here once (features, OHLC, level tables, per-bar cost
    rates), so a step is O(1) in the length of the data and touches no pandas.
    """

    def __init__(self, market: MarketData, config: EnvConfig, bars: range | None = None) -> None:
        self.market = market
        self.config = config
        self.features = compute_features(market, norm_window=config.volume_window)  # [T, F]
        self.ohlc = np.ascontiguousarray(market.ohlc, dtype=np.float64)  # [T, 4]
        self.timestamps = market.timestamps
        bars = range(0, len(market)) if bars is None else bars
        if bars.step != 1 or bars.start < 0 or bars.stop > len(market):
            raise ValueError(f"bars must be a contiguous range inside [0, {len(market)}), got {bars}")
        # Decision bars: the window must fit before the first, and a next bar must follow the last.
        self.first_bar = max(bars.start, config.window - 1)
        self.end_bar = bars.stop - 1  # the last bar an order can fill on; episodes end there
        if self.end_bar - self.first_bar < 1:
            raise DataError(
                f"{market.source}: {bars.stop - bars.start} bars in range "
                f"[{bars.start}, {bars.stop}) leave no step with window={config.window}; need at "
                f"least window + 1 = {config.window + 1} bars"
            )
        self.sides = np.asarray(config.direction_sides, dtype=np.int64)
        self.leverages = np.asarray(config.leverage_levels, dtype=np.float64)
        self.risks = np.asarray(config.risk_levels, dtype=np.float64)
        self.bars_per_year = config.bars_per_year or market.bars_per_year()
        self.params = np.zeros(ex.N_PARAMS, dtype=np.float64)
        self.params[ex.P_COMMISSION] = config.commission_bps * 1e-4
        self.params[ex.P_SLIPPAGE] = config.slippage_bps * 1e-4
        self.params[ex.P_FINANCING] = config.financing_rate_annual / self.bars_per_year
        self.params[ex.P_BORROW] = config.borrow_fee_annual / self.bars_per_year
        self.params[ex.P_MAINTENANCE] = config.maintenance_margin
        self.params[ex.P_REWARD] = ex.REWARD_CODES[config.reward]
        self.params[ex.P_SHARPE_ETA] = config.sharpe_eta
        self.params[ex.P_DRAWDOWN_PENALTY] = config.drawdown_penalty
        self.observation_space = spaces.Dict(
            {
                "market": spaces.Box(-CLIP, CLIP, (config.window, len(FEATURE_NAMES)), np.float32),
                "account": spaces.Box(-np.inf, np.inf, (ex.N_ACCOUNT,), np.float32),
            }
        )
        self.action_space = spaces.MultiDiscrete(config.action_sizes)

    @property
    def episode_length(self) -> int:
        """Steps in one episode: the configured length, or the whole range when it is None."""
        whole = self.end_bar - self.first_bar
        length = self.config.episode_length
        return whole if length is None else min(length, whole)

    def draw_start(self, rng: np.random.Generator) -> int:
        """First decision bar of a new episode: random when configured, else the range start."""
        if not self.config.random_start:
            return self.first_bar
        last_start = self.end_bar - self.episode_length
        return int(rng.integers(self.first_bar, last_start + 1))

    def new_accounts(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Allocate the state [n, N_STATE] and bar index [n] arrays of n accounts."""
        return np.zeros((n, ex.N_STATE)), np.zeros(n, dtype=np.int64)

    def reset(self, state: np.ndarray, bars: np.ndarray, index: np.ndarray, starts: np.ndarray,
              account_obs: np.ndarray) -> None:
        """Start fresh episodes for accounts `index` at `starts` and refresh all account obs."""
        ex.reset_accounts(state, bars, index, starts, self.config.initial_equity)
        ex.observe_accounts(state, bars, self.ohlc, account_obs)

    def step(self, state: np.ndarray, bars: np.ndarray, actions: np.ndarray, out: np.ndarray,
             account_obs: np.ndarray) -> None:
        """Step every account one bar (see `envs.execution`)."""
        ex.step_accounts(state, bars, actions, self.ohlc, self.sides, self.leverages, self.risks,
                         self.params, out, account_obs)

    def market_window(self, bar: int) -> np.ndarray:
        """A fresh copy of the feature window [W, F] that ends at `bar`."""
        return self.features[bar - self.config.window + 1 : bar + 1].copy()

    def market_windows(self, bars: np.ndarray, market_obs: np.ndarray) -> None:
        """Write the windows ending at `bars` into `market_obs` [N, W, F]."""
        ex.gather_windows(self.features, bars, self.config.window, market_obs)

    def action_names(self, action: np.ndarray) -> dict[str, Any]:
        """The action of each head by name: direction label, leverage and risk levels."""
        return {
            "direction": self.config.direction_names[int(action[0])],
            "leverage": float(self.leverages[int(action[1])]),
            "risk": float(self.risks[int(action[2])]),
        }

    def step_info(self, state: np.ndarray, bars: np.ndarray, out: np.ndarray, i: int,
                  action: np.ndarray) -> dict[str, Any]:
        """The info dict of account i after a step."""
        row = out[i]
        equity = state[i, ex.EQUITY]
        close = self.ohlc[bars[i], 3]
        return {
            "timestamp": self.timestamps[bars[i]],
            "bar": int(bars[i]),
            "price": close,
            "equity": equity,
            "cash": state[i, ex.CASH],
            "position": state[i, ex.QTY],
            "exposure": state[i, ex.QTY] * close / equity if equity > 0 else 0.0,
            "order_fill": row[ex.ORDER_FILL],
            "exit_fill": row[ex.EXIT_FILL],
            "traded_notional": row[ex.TRADED_NOTIONAL],
            "commission": row[ex.COMMISSION],
            "slippage": row[ex.SLIPPAGE],
            "financing": row[ex.FINANCING],
            "borrow": row[ex.BORROW],
            "costs": row[ex.COMMISSION] + row[ex.SLIPPAGE] + row[ex.FINANCING] + row[ex.BORROW],
            "stop_hit": bool(row[ex.STOP_HIT]),
            "liquidated": bool(row[ex.LIQUIDATED]),
            "bankrupt": bool(row[ex.BANKRUPT]),
            "action": self.action_names(action),
        }

    def episode_summary(self, state: np.ndarray, i: int) -> dict[str, float]:
        """Trading statistics of account i's episode so far (for `info["episode_trading"]`)."""
        s = state[i]
        steps = max(s[ex.EP_STEPS], 1.0)
        mean = s[ex.EP_RETURN_SUM] / steps
        variance = max(s[ex.EP_RETURN_SQ] / steps - mean * mean, 0.0)
        sharpe = mean / math.sqrt(variance) * math.sqrt(self.bars_per_year) if variance > 0 else 0.0
        return {
            "return_pct": (s[ex.EQUITY] / s[ex.START_EQUITY] - 1.0) * 100.0,
            "sharpe": sharpe,
            "max_drawdown_pct": s[ex.EP_MAX_DRAWDOWN] * 100.0,
            "turnover": s[ex.EP_TURNOVER],
            "costs_pct": s[ex.EP_COSTS] / s[ex.START_EQUITY] * 100.0,
            "stops": s[ex.EP_STOPS],
            "liquidations": s[ex.EP_LIQUIDATIONS],
            "exposure_mean": s[ex.EP_EXPOSURE] / steps,
            "steps": s[ex.EP_STEPS],
        }
