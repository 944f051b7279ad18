"""Run a policy over a whole data range and record every bar: the input of metrics and reports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from envs import TradingEnv

Policy = Callable[[dict[str, np.ndarray]], np.ndarray]  # observation -> action [3]

RECORD_COLUMNS = (
    "timestamp",
    "price",
    "equity",
    "position",
    "exposure",
    "direction",
    "leverage",
    "risk",
    "order_fill",
    "exit_fill",
    "traded_notional",
    "commission",
    "slippage",
    "financing",
    "borrow",
    "costs",
    "stop_hit",
    "liquidated",
    "bankrupt",
)
_NUMERIC = RECORD_COLUMNS[8:16]
_FLAGS = RECORD_COLUMNS[16:]


def _start_row(env: TradingEnv, info: dict[str, Any]) -> dict[str, Any]:
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


def record_episode(env: TradingEnv, policy: Policy, *, seed: int | None = None) -> pd.DataFrame:
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
