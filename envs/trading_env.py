"""`TradingEnv`: one trading account on historical OHLCV bars, for a three-head agent."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from envs import execution as ex
from envs.config import EnvConfig
from envs.core import Accounts, DataSource, TradingCore


class TradingEnv(gym.Env):
    """A leveraged trading account driven by three decisions per bar.

    ## Description
    Each step the agent sees bar t (its close included) and decides `direction`, `leverage` and
    `risk`. The order fills at bar t+1's open with slippage and commission; a protective stop and
    the maintenance margin are checked inside bar t+1 with its high and low; financing and the
    short borrow fee accrue per bar; equity is marked at bar t+1's close. The rules live in one
    place, `envs.execution`, shared with `BatchedTradingEnv`.

    ## Action Space
    `MultiDiscrete([n_direction, n_leverage, n_risk])`, one dimension per head:

    | index | head      | meaning                                                             |
    |-------|-----------|---------------------------------------------------------------------|
    | 0     | direction | short / flat / long (flat / long when `long_only`)                   |
    | 1     | leverage  | position notional as a multiple of equity (`leverage_levels`)       |
    | 2     | risk      | equity share lost before the stop closes the position (`risk_levels`) |

    The stop sits at ``entry * (1 - side * risk / leverage)``. An action equal to the held
    position trades nothing and pays nothing (the exposure drifts with the price). A new
    `direction`, or a new `leverage` while not flat, trades to the target
    ``side * leverage * equity`` at the next open and re-anchors the entry and the stop. A new
    `risk` alone moves the stop. When flat, `leverage` and `risk` have no effect. After a stop the
    account is flat, so repeating the previous long or short action enters again.

    ## Observation Space
    `Dict(market=Box(window, n_features), account=Box(8))`, float32:

    | key     | content                                                                    |
    |---------|----------------------------------------------------------------------------|
    | market  | causal features of bars t-window+1..t (`envs.features.FEATURE_NAMES`)      |
    | account | side, exposure, unrealised PnL, log equity change, drawdown, stop distance, |
    |         | held leverage, held risk (`envs.execution.ACCOUNT_FEATURES`)               |

    ## Rewards
    `log_return` (default): log(equity_t+1 / equity_t). `differential_sharpe`: Moody and Saffell's
    differential Sharpe ratio. `drawdown_penalty`: the log return minus `drawdown_penalty` times
    each increase of the drawdown.

    ## Episode End
    `terminated`: the account was liquidated or is bankrupt (equity <= 0).
    `truncated`: the data range ended (no next bar to fill on) or `episode_length` steps passed.

    ## Arguments
    `data`: a CSV path, a DataFrame or a `MarketData`; `ticker` and `adjust` go to the loader;
    `bars`: the range of bar indices to trade in (e.g. a split), earlier bars serve as history;
    `config`: an `EnvConfig`, and any `EnvConfig` field as a keyword to override it.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium: an instance variable)

    def __init__(
        self,
        data: DataSource,
        config: EnvConfig | None = None,
        *,
        bars: range | None = None,
        ticker: str | None = None,
        adjust: bool = False,
        **config_overrides: Any,
    ) -> None:
        self.core = TradingCore.load(
            data, config, bars=bars, ticker=ticker, adjust=adjust, **config_overrides
        )
        self.config = self.core.config
        self.observation_space = self.core.observation_space
        self.action_space = self.core.action_space
        self._accounts = Accounts.zeros(1)
        self._index = np.zeros(1, dtype=np.int64)
        self._needs_reset = True  # before the first reset, and once an episode has ended

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start an episode at a random bar (training) or at the first bar of the range.

        `options={"start_bar": b}` starts at a given decision bar instead.
        """
        super().reset(seed=seed)
        start = self.core.draw_start(self.np_random)
        if options and "start_bar" in options:
            start = int(options["start_bar"])
            if not self.core.first_bar <= start < self.core.end_bar:
                first, end = self.core.first_bar, self.core.end_bar
                raise ValueError(f"start_bar must be in [{first}, {end}), got {start}")
        self.core.reset(self._accounts, self._index, np.array([start]))
        self._needs_reset = False
        info = {
            "timestamp": self.core.timestamps[start],
            "bar": start,
            "equity": self._accounts.state[0, ex.EQUITY],
        }
        return self.core.observation(self._accounts, 0), info

    def step(
        self, action: np.ndarray
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Fill the order at the next open, run the bar, mark at its close (see class doc).

        Raises `RuntimeError` before the first `reset` and after an episode ended: past the
        range's last bar there is no next bar to fill on.
        """
        if self._needs_reset:
            raise RuntimeError(
                "TradingEnv.step() needs reset() first: before the first episode and after one "
                "has ended (terminated or truncated)"
            )
        accounts, core = self._accounts, self.core
        accounts.actions[0] = action
        core.step(accounts)
        info = core.step_info(accounts, 0)
        terminated = info["liquidated"] or info["bankrupt"]
        truncated = accounts.out[0, ex.TRUNCATED].item() > 0
        if terminated or truncated:
            info["episode_trading"] = core.episode_summary(accounts, 0)
            self._needs_reset = True
        reward = accounts.out[0, ex.REWARD].item()
        return core.observation(accounts, 0), reward, terminated, truncated, info

    @property
    def equity(self) -> float:
        """Equity marked at the last close."""
        return float(self._accounts.state[0, ex.EQUITY])
