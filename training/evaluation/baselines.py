"""Baseline strategies, written as policies so they run through the same `TradingEnv` as the agent.

A baseline trades with the same fills, stops, costs and accounting as the agent because it is only
a different policy: a function ``(obs, bar) -> action`` (`BarPolicy`) that chooses level indices
for the `direction`, `leverage` and `risk` heads. The env puts a stop on every position, so a
position of a baseline uses the widest one (the largest `risk` level); when it is hit, the account
is flat until the next open, where the unchanged long action enters again (as the env's rules
say), paying the costs of the round trip.

* `buy_and_hold`: long at the leverage level nearest 1x from the first open to the last close.
* `flat`: never trades; equity stays at its start.
* `moving_average_crossover`: long while the fast moving average of the closes is above the slow
  one (20 and 50 bars by default), flat otherwise and while the slow one lacks history.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from envs.config import EnvConfig
from envs.core import TradingCore

BarPolicy = Callable[[dict[str, np.ndarray], int], np.ndarray]  # (obs, decision bar) -> action [3]


def long_action(config: EnvConfig) -> np.ndarray:
    """Action indices [3] of a long position at the leverage nearest 1x with the widest stop."""
    leverages = np.asarray(config.leverage_levels)
    return np.array(
        [
            config.direction_names.index("long"),
            int(np.argmin(np.abs(leverages - 1.0))),
            int(np.argmax(config.risk_levels)),
        ],
        dtype=np.int64,
    )


def flat_action(config: EnvConfig) -> np.ndarray:
    """Action indices [3] of no position (leverage and risk have no effect when flat)."""
    return np.array([config.flat_direction_index, 0, 0], dtype=np.int64)


def constant(action: np.ndarray) -> BarPolicy:
    """A policy that always chooses `action`."""
    action = np.array(action, dtype=np.int64)
    return lambda obs, bar: action


def buy_and_hold(config: EnvConfig) -> BarPolicy:
    """Long at about 1x from the first open on (see the module doc for stops)."""
    return constant(long_action(config))


def flat(config: EnvConfig) -> BarPolicy:
    """Never in the market."""
    return constant(flat_action(config))


def moving_average(values: np.ndarray, length: int) -> np.ndarray:
    """Trailing mean of the `length` values up to and including each one; NaN before that."""
    means = np.full(len(values), np.nan)
    if len(values) >= length:
        means[length - 1 :] = sliding_window_view(values, length).mean(axis=1)
    return means


def moving_average_crossover(
    config: EnvConfig, closes: np.ndarray, fast: int = 20, slow: int = 50
) -> BarPolicy:
    """Long while the `fast`-bar mean of `closes` is above the `slow`-bar mean, else flat.

    `closes` [T] are the closes of every bar of the data; the means at bar t use closes up to t
    only (the agent has seen bar t's close when it decides), precomputed once.
    """
    if not 1 <= fast < slow:
        raise ValueError(f"need 1 <= fast < slow, got fast={fast}, slow={slow}")
    with np.errstate(invalid="ignore"):  # NaN (no history yet) compares False: flat
        is_long = moving_average(closes, fast) > moving_average(closes, slow)  # [T]
    long, out = long_action(config), flat_action(config)
    return lambda obs, bar: long if is_long[bar] else out


def baseline_policies(core: TradingCore) -> dict[str, BarPolicy]:
    """The baselines for the data and config of `core`, by name."""
    config = core.config
    return {
        "buy_and_hold": buy_and_hold(config),
        "flat": flat(config),
        "ma_crossover": moving_average_crossover(config, core.ohlc[:, 3]),
    }
