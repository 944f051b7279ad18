"""Run a policy over a whole data range and record every bar: the input of metrics and reports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import pandas as pd

from envs import execution as ex
from envs.core import TradingCore

Policy = Callable[[dict[str, np.ndarray]], np.ndarray]  # observation -> action [3]
Observation = dict[str, np.ndarray]

_FILLS = ex.OUTCOME_NAMES[ex.ORDER_FILL : ex.EXIT_FILL + 1]  # order_fill, exit_fill
_COSTS = ex.OUTCOME_NAMES[ex.TRADED_NOTIONAL : ex.COSTS + 1]  # traded_notional .. costs
_FLAGS = ex.OUTCOME_NAMES[ex.STOP_HIT : ex.BANKRUPT + 1]  # stop_hit, liquidated, bankrupt
_NUMERIC = (*_FILLS, *_COSTS)
RECORD_COLUMNS = (
    "timestamp",
    "price",
    "equity",
    "position",
    "exposure",
    "direction",
    "leverage",
    "risk",
    *_NUMERIC,
    *_FLAGS,
)


class EpisodeEnv(Protocol):
    """What `record_episode` steps: a `TradingEnv`, or a wrapper of one that keeps its `core`."""

    core: TradingCore

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start the episode."""
        ...

    def step(self, action: np.ndarray) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """One bar."""
        ...


def _start_row(env: EpisodeEnv, info: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(_NUMERIC, 0.0)
    row.update(dict.fromkeys(_FLAGS, False))
    row.update(
        timestamp=info["timestamp"],
        price=env.core.ohlc[info["bar"], 3],
        equity=info["equity"],
        position=0.0,
        exposure=0.0,
        direction="",
        leverage=np.nan,
        risk=np.nan,
        order_fill=np.nan,
        exit_fill=np.nan,
    )
    return row


def record_episode(env: EpisodeEnv, policy: Policy, *, seed: int | None = None) -> pd.DataFrame:
    """Run `policy` for one episode of `env` and return one row per bar (`RECORD_COLUMNS`).

    Row 0 is the state before the first step; row k is the state after step k, marked at that
    bar's close. For a backtest, build the env with `random_start=False, episode_length=None`
    so the episode covers the whole range.
    """
    obs, info = env.reset(seed=seed)
    rows = [_start_row(env, info)]
    while True:
        obs, _, terminated, truncated, info = env.step(policy(obs))
        row = {name: info[name] for name in RECORD_COLUMNS if name in info}
        row.update(info["action"])
        rows.append(row)
        if terminated or truncated:
            break
    return pd.DataFrame(rows, columns=list(RECORD_COLUMNS))


# Per-step account columns of `record_from_arrays` (a slice of the `envs.execution` state).
ACCOUNT_COLUMNS = (ex.CASH, ex.QTY, ex.EQUITY)


def record_from_arrays(
    core: TradingCore,
    bars: np.ndarray,
    actions: np.ndarray,
    outcomes: np.ndarray,
    accounts: np.ndarray,
) -> pd.DataFrame:
    """The `record_episode` frame of an episode stepped directly with `envs.execution`.

    bars [n + 1] int64: the start bar, then the bar after each step; actions [n, 3] level
    indices; outcomes [n, N_OUT]: each step's `out` row; accounts [n + 1, 3]: cash, quantity and
    equity (`ACCOUNT_COLUMNS`) at the start and after each step. Row k equals the row
    `record_episode` builds from `TradingCore.step_info` (the same columns, values and dtypes;
    tested), computed for all rows at once.
    """
    closes = core.ohlc[bars, 3]  # [n + 1]
    _, qty, equity = accounts.T  # each [n + 1]
    exposure = np.where(equity > 0, qty * closes / np.where(equity > 0, equity, 1.0), 0.0)
    names = np.asarray(core.config.direction_names, dtype=object)

    def column(values: np.ndarray, start: object) -> np.ndarray:
        """Row 0 (the state before the first step) followed by one value per step."""
        return np.concatenate([np.asarray([start], dtype=values.dtype), values])

    out = {name: outcomes[:, index] for index, name in enumerate(ex.OUTCOME_NAMES)}
    record = {
        "timestamp": core.timestamps[bars],
        "price": closes,
        "equity": equity,
        "position": qty,
        "exposure": exposure,
        "direction": column(names[actions[:, 0]], ""),
        "leverage": column(core.leverages[actions[:, 1]], np.nan),
        "risk": column(core.risks[actions[:, 2]], np.nan),
        **{name: column(out[name], np.nan) for name in _FILLS},
        **{name: column(out[name], 0.0) for name in _COSTS},
        **{name: column(out[name] > 0, False) for name in _FLAGS},
    }
    return pd.DataFrame(record, columns=list(RECORD_COLUMNS))
