"""What the single and the batched environment share: data, precomputed arrays, spaces, episodes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import pandas as pd
from gymnasium import spaces
from numpy.lib.stride_tricks import sliding_window_view

from envs import execution as ex
from envs.config import EnvConfig
from envs.features import CLIP, compute_features, volatility_scale
from envs.market_data import DataError, MarketData, load_market_data
from envs.sharpe import sharpe_from_sums


def make_config(config: EnvConfig | None = None, **overrides: Any) -> EnvConfig:
    """An `EnvConfig` from an optional base and keyword overrides (unknown keys are an error)."""
    known = {f.name for f in fields(EnvConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"unknown env config key(s): {', '.join(unknown)}")
    return replace(config or EnvConfig(), **overrides)


def env_spaces(config: EnvConfig) -> tuple[spaces.Dict, spaces.MultiDiscrete]:
    """The observation and action spaces of every environment built from `config`.

    ``Dict(market=Box(window, features), account=Box(N_ACCOUNT))`` and
    ``MultiDiscrete([n_direction, n_leverage, n_risk])``: what a policy for it is built for.
    """
    observation = spaces.Dict(
        {
            "market": spaces.Box(
                -CLIP, CLIP, (config.window, len(config.feature_names)), np.float32
            ),
            "account": spaces.Box(-np.inf, np.inf, (ex.N_ACCOUNT,), np.float32),
        }
    )
    return observation, spaces.MultiDiscrete(list(config.action_sizes))


DataSource: TypeAlias = str | Path | pd.DataFrame | MarketData  # what the envs accept as data


@dataclass(frozen=True)
class Accounts:
    """The arrays of N trading accounts that `envs.execution` reads and writes in place."""

    state: np.ndarray  # [N, N_STATE] float64: cash, position, entry, stop, equity, ...
    bars: np.ndarray  # [N] int64: the bar each account has seen last (its decision bar)
    actions: np.ndarray  # [N, 3] int64: the next step's level index of each head
    out: np.ndarray  # [N, N_OUT] float64: the last step's outcome (reward, fills, costs, ...)
    observation: np.ndarray  # [N, N_ACCOUNT] float32: the account half of the observation

    def copy(self) -> Accounts:
        """An independent copy: every array copied once."""
        return Accounts(*(getattr(self, f.name).copy() for f in fields(self)))

    @classmethod
    def zeros(cls, n: int) -> Accounts:
        """Arrays for n accounts, all zero (call `TradingCore.reset` before stepping)."""
        return cls(
            state=np.zeros((n, ex.N_STATE)),
            bars=np.zeros(n, dtype=np.int64),
            actions=np.zeros((n, 3), dtype=np.int64),
            out=np.zeros((n, ex.N_OUT)),
            observation=np.zeros((n, ex.N_ACCOUNT), dtype=np.float32),
        )


class TradingCore:
    """Market arrays and execution rules for one or several data ranges, stepping N accounts.

    Everything a step needs is precomputed here once (features, OHLC, level tables, per-bar cost
    rates), so a step is O(1) in the length of the data and touches no pandas.

    One range of one instrument (`TradingCore(market, config, bars)`) serves an environment and
    every evaluation. Several (`TradingCore.stacked`) serve training on many instruments: their
    arrays are stacked end to end, each instrument's features computed on its own bars, and an
    episode starts at a random decision bar of any range (ranges drawn in proportion to their
    possible starts) and ends with its range, never crossing into the next instrument.

    The public face that evaluation builds on: `config`, `features` [T, F], `ohlc` [T, 4],
    `timestamps` [T], `sides`, `leverages`, `risks` (the level tables), `params` (the kernel's
    parameter vector), `bars_per_year`, `episode_length`, `reset`, `step`, `observation`,
    `market_windows`, `step_info`, `episode_summary`, and for a single range `market`,
    `first_bar` and `end_bar`. Bar indices are positions in the stacked arrays.
    """

    @classmethod
    def load(
        cls,
        data: DataSource,
        config: EnvConfig | None = None,
        *,
        bars: range | None = None,
        ticker: str | None = None,
        adjust: bool = False,
        **config_overrides: Any,
    ) -> TradingCore:
        """Load `data` (a CSV path, a DataFrame or a `MarketData`) and build the core for it."""
        config = make_config(config, **config_overrides)
        return cls(load_market_data(data, ticker=ticker, adjust=adjust), config, bars)

    def __init__(self, market: MarketData, config: EnvConfig, bars: range | None = None) -> None:
        self._build([(market, range(0, len(market)) if bars is None else bars)], config)

    @classmethod
    def stacked(cls, parts: Sequence[tuple[MarketData, range]], config: EnvConfig) -> TradingCore:
        """One core over several instruments' ranges: `parts` holds (market, bars) pairs.

        Each range must leave at least one step (see `TradingCore`); bars before a range's start
        serve as its observation history.
        """
        if not parts:
            raise ValueError("a stacked core needs at least one (market, bars) range")
        core = cls.__new__(cls)
        core._build(parts, config)
        return core

    def _build(self, parts: Sequence[tuple[MarketData, range]], config: EnvConfig) -> None:
        self.markets = tuple(market for market, _ in parts)
        self.config = config
        self.bars_per_year = config.bars_per_year or _common_bars_per_year(self.markets)
        offsets = np.cumsum([0] + [len(market) for market in self.markets])  # [K + 1]
        first, end = [], []
        for (market, bars), offset in zip(parts, offsets, strict=False):
            if bars.step != 1 or bars.start < 0 or bars.stop > len(market):
                raise ValueError(
                    f"bars must be a contiguous range inside [0, {len(market)}), got {bars}"
                )
            # Decision bars: the window fits before the first, a next bar follows the last.
            first.append(offset + max(bars.start, config.window - 1))
            end.append(offset + bars.stop - 1)  # the last bar an order can fill on
            if end[-1] - first[-1] < 1:
                raise DataError(
                    f"{_name(market)}: {bars.stop - bars.start} bars in range "
                    f"[{bars.start}, {bars.stop}) leave no step with window={config.window}; "
                    f"need at least window + 1 = {config.window + 1} bars"
                )
        self.first_bars = np.asarray(first, dtype=np.int64)  # [K]
        self.end_bars = np.asarray(end, dtype=np.int64)  # [K]
        self.features = np.concatenate(
            [
                compute_features(
                    market, config.volume_window, self.bars_per_year, config.momentum_horizons
                )
                for market in self.markets
            ]
        )  # [T, F]
        self.scale = np.concatenate(
            [
                volatility_scale(
                    market,
                    config.volatility_target_window,
                    self.bars_per_year,
                    config.volatility_target,
                )
                for market in self.markets
            ]
        )  # [T] the leverage share an order decided on each bar is sized to (envs.execution)
        self.ohlc = np.ascontiguousarray(
            np.concatenate([market.ohlc for market in self.markets]), dtype=np.float64
        )  # [T, 4]
        self.timestamps = np.concatenate([market.timestamps for market in self.markets])  # [T]
        # Row j of `_windows` is the window ending at bar j + window - 1, flattened: a read-only
        # view of overlapping rows (no copy), so gathering N windows is one fancy index.
        self._windows = sliding_window_view(
            self.features.reshape(-1), config.window * self.features.shape[1]
        )[:: self.features.shape[1]]  # [T - W + 1, W * F]
        self.sides = np.asarray(config.direction_sides, dtype=np.int64)
        self.leverages = np.asarray(config.leverage_levels, dtype=np.float64)
        self.risks = np.asarray(config.risk_levels, dtype=np.float64)
        self.params = np.zeros(ex.N_PARAMS, dtype=np.float64)
        self.params[ex.P_COMMISSION] = config.commission_bps * 1e-4
        self.params[ex.P_SLIPPAGE] = config.slippage_bps * 1e-4
        self.params[ex.P_FINANCING] = config.financing_rate_annual / self.bars_per_year
        self.params[ex.P_BORROW] = config.borrow_fee_annual / self.bars_per_year
        self.params[ex.P_MAINTENANCE] = config.maintenance_margin
        self.params[ex.P_REWARD] = ex.REWARD_CODES[config.reward]
        self.params[ex.P_SHARPE_ETA] = config.sharpe_eta
        self.params[ex.P_DRAWDOWN_PENALTY] = config.drawdown_penalty
        self.params[ex.P_TURNOVER_PENALTY] = config.turnover_penalty
        self.params[ex.P_RESIZE_BAND] = config.resize_band
        self.params[ex.P_RESIZE_PENALTY] = config.resize_penalty
        self.params[ex.P_DECISION_INTERVAL] = config.decision_interval
        self.observation_space, self.action_space = env_spaces(config)
        whole = self.end_bars - self.first_bars  # [K] steps from a range's first bar to its end
        length = config.episode_length
        # Steps in one episode: the configured length, or a whole range when it is None; a range
        # shorter than the length gives shorter episodes (they end with the range).
        self.episode_length = int(whole.max() if length is None else min(length, whole.max()))
        self._last_starts = self.end_bars - np.minimum(whole, self.episode_length)  # [K]
        starts = self._last_starts - self.first_bars + 1  # [K] possible starts of each range
        self._range_weights = starts / starts.sum()  # [K]
        self.params[ex.P_EPISODE_LENGTH] = self.episode_length
        # Python lists: reading them is several times cheaper than numpy scalars in `step_info`.
        self._labels = (list(config.direction_names), self.leverages.tolist(), self.risks.tolist())
        self._closes = self.ohlc[:, 3].tolist()

    @property
    def market(self) -> MarketData:
        """The instrument of a single-range core (a stacked core has `markets`)."""
        self._check_single("market")
        return self.markets[0]

    @property
    def first_bar(self) -> int:
        """A single-range core's first decision bar (the window fits before it)."""
        self._check_single("first_bar")
        return int(self.first_bars[0])

    @property
    def end_bar(self) -> int:
        """A single-range core's last bar an order can fill on; its episodes end there."""
        self._check_single("end_bar")
        return int(self.end_bars[0])

    def _check_single(self, name: str) -> None:
        if len(self.markets) != 1:
            raise AttributeError(f"a core over {len(self.markets)} ranges has no single {name}")

    def draw_start(self, rng: np.random.Generator) -> int:
        """First decision bar of a new episode: random when configured, else the range start.

        A stacked core first draws the range, in proportion to its possible starts (one draw
        of `rng` more than a single range takes).
        """
        k = 0
        if len(self.markets) > 1:
            k = int(rng.choice(len(self.markets), p=self._range_weights))
        if not self.config.random_start:
            return int(self.first_bars[k])
        return int(rng.integers(self.first_bars[k], self._last_starts[k] + 1))

    def reset(self, accounts: Accounts, index: np.ndarray, starts: np.ndarray) -> None:
        """Start fresh episodes for accounts `index` at decision bars `starts`; observe them."""
        ranges = np.searchsorted(self.first_bars, starts, side="right") - 1  # [n]
        ex.reset_accounts(
            accounts.state,
            accounts.bars,
            index,
            starts,
            self.end_bars[ranges],
            self.config.initial_equity,
            self.ohlc,
            accounts.observation,
        )

    def carry_over(self, accounts: Accounts) -> Accounts:
        """A copy of `accounts`, which another core on the same market left at this core's first
        decision bar, continuing there: the same cash, position, stop and peak, with this range's
        end and fresh episode statistics (so one account trades on through consecutive ranges, as a
        walk-forward's test segments are traded, without a close or a skipped bar between them).
        """
        if not (accounts.bars == self.first_bars[0]).all():
            raise ValueError(
                f"accounts at bars {accounts.bars.tolist()} cannot continue a range whose first "
                f"decision bar is {int(self.first_bars[0])}"
            )
        carried = accounts.copy()
        carried.state[:, ex.END_BAR] = self.end_bars[0]
        carried.state[:, ex.EP_STEPS : ex.EP_EXPOSURE + 1] = 0.0  # this range's statistics
        return carried

    def step(self, accounts: Accounts) -> None:
        """Step every account with its `actions` to its next decision bar (see `envs.execution`):
        one bar, or up to `decision_interval` bars, fewer when the episode ends first."""
        ex.step_accounts(
            accounts.state,
            accounts.bars,
            accounts.actions,
            self.ohlc,
            self.scale,
            self.sides,
            self.leverages,
            self.risks,
            self.params,
            accounts.out,
            accounts.observation,
            True,
        )

    def direction_rewards(self, accounts: Accounts) -> np.ndarray:
        """[N, D] float64: the reward each account's next step would pay with each of the D
        direction levels, its leverage and risk actions and its state as they are.

        The market's bars do not depend on an account's order, so the outcome of every choice is
        known: each level is stepped (`step`) on a copy of the accounts, which are left as they
        are. Column d of the sampled level is the reward the real step pays.
        """
        rewards = np.empty((len(accounts.bars), len(self.sides)))  # [N, D]
        for level in range(len(self.sides)):
            trial = accounts.copy()
            trial.actions[:, 0] = level
            self.step(trial)
            rewards[:, level] = trial.out[:, ex.REWARD]
        return rewards

    def observation(self, accounts: Accounts, i: int) -> dict[str, np.ndarray]:
        """Account i's observation at its current bar, as fresh arrays (callers may keep it)."""
        return {
            "market": self.market_window(accounts.bars[i]),  # [W, F]
            "account": accounts.observation[i].copy(),  # [N_ACCOUNT]
        }

    def market_window(self, bar: int | np.integer) -> np.ndarray:
        """A fresh copy of the feature window [W, F] that ends at `bar`."""
        return self.features[bar - self.config.window + 1 : bar + 1].copy()

    def market_windows(self, bars: np.ndarray) -> np.ndarray:
        """A fresh array [N, W, F] of the windows ending at `bars`."""
        windows = self._windows[bars - (self.config.window - 1)]  # [N, W * F]
        return windows.reshape(len(bars), self.config.window, -1)  # [N, W, F]

    def action_names(self, action: np.ndarray) -> dict[str, Any]:
        """The action of each head by name: direction label, leverage and risk levels."""
        direction, leverage, risk = action.tolist()
        names, leverages, risks = self._labels
        return {"direction": names[direction], "leverage": leverages[leverage], "risk": risks[risk]}

    def step_info(self, accounts: Accounts, i: int) -> dict[str, Any]:
        """The info dict of account i after a step."""
        (
            _,
            order_fill,
            exit_fill,
            traded,
            commission,
            slippage,
            financing,
            borrow,
            costs,
            stop_hit,
            liquidated,
            bankrupt,
            *_,
        ) = accounts.out[i].tolist()
        cash, qty, *_, equity = accounts.state[i, : ex.EQUITY + 1].tolist()
        bar = accounts.bars[i].item()
        close = self._closes[bar]
        return {
            "timestamp": self.timestamps[bar],
            "bar": bar,
            "price": close,
            "equity": equity,
            "cash": cash,
            "position": qty,
            "exposure": qty * close / equity if equity > 0 else 0.0,
            "order_fill": order_fill,
            "exit_fill": exit_fill,
            "traded_notional": traded,
            "commission": commission,
            "slippage": slippage,
            "financing": financing,
            "borrow": borrow,
            "costs": costs,
            "stop_hit": stop_hit > 0,
            "liquidated": liquidated > 0,
            "bankrupt": bankrupt > 0,
            "action": self.action_names(accounts.actions[i]),
        }

    def episode_summary(self, accounts: Accounts, i: int) -> dict[str, float]:
        """Trading statistics of account i's episode so far (for `info["episode_trading"]`).

        The Sharpe ratio is `envs.sharpe`'s, the backtest metrics' one: NaN at zero volatility.
        """
        s = accounts.state[i]
        steps = max(s[ex.EP_STEPS], 1.0)
        sharpe = sharpe_from_sums(
            s[ex.EP_STEPS], s[ex.EP_RETURN_SUM], s[ex.EP_RETURN_SQ], self.bars_per_year
        )
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


def _name(market: MarketData) -> str:
    """The instrument in messages: its source, and its ticker when it has one."""
    return market.source + (f" ({market.ticker})" if market.ticker else "")


# Instruments stacked in one core share one bars-per-year (financing and borrow are charged per
# bar): their observed figures may differ by this factor at most (daily stocks and indices
# differ by a few holidays; daily and hourly data differ by ~25x).
BARS_PER_YEAR_TOLERANCE = 1.25


def _common_bars_per_year(markets: Sequence[MarketData]) -> float:
    """The median of the instruments' observed bars per year; `DataError` if they disagree."""
    observed = [market.bars_per_year() for market in markets]
    low, high = int(np.argmin(observed)), int(np.argmax(observed))
    if observed[high] > BARS_PER_YEAR_TOLERANCE * observed[low]:
        raise DataError(
            f"{_name(markets[low])} has {observed[low]:,.0f} bars a year and "
            f"{_name(markets[high])} {observed[high]:,.0f}: instruments trained together need "
            "bars of one frequency (or set env.bars_per_year)"
        )
    return float(np.median(observed))
