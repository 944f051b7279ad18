"""Baseline strategies, written as policies so they run through the same engine as the agent.

A baseline trades with the same fills, costs, financing and margin as the agent because it is only
a different policy, a function ``(obs, bar) -> action`` (`BarPolicy`), stepped through a
`TradingEnv` over the same market and bars. That env's config (`baseline_config`) differs from
the agent's only in its levels: one leverage level, 1x, and one risk level, infinite, whose stop
``entry * (1 - risk / leverage)`` lies at minus infinity for a long: it is never reached. So a
baseline's position is held until the baseline itself closes it (or margin liquidates it, which at
1x needs the price to fall to about zero).

* `buy_and_hold`: long at 1x from the first open to the last close: one entry, no stop.
* `flat`: never trades; equity stays at its start.
* `moving_average_crossover`: long at 1x while the fast moving average of the closes is above the
  slow one (20 and 50 bars by default), flat otherwise and while the slow one lacks history.
* `sized_hold`, only for an agent sized by `env.volatility_target`: buy-and-hold's action sized as
  the agent's positions are, ``min(1, target / vol_t)`` of equity, resized when the scale moves
  the position outside the agent's `resize_band` (`sized_baseline_env`). It shows what the
  sizing earns without a policy.

No baseline carries a stop. Before, `buy_and_hold` held the agent's widest stop and bought again
after each one; that is a stop rule of its own, not buying and holding, and was dropped.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from envs import TradingEnv
from envs.config import EnvConfig

BarPolicy = Callable[[dict[str, np.ndarray], int], np.ndarray]  # (obs, decision bar) -> action [3]
NO_STOP = math.inf  # the risk level of the baselines: its stop is never reached


def baseline_config(config: EnvConfig) -> EnvConfig:
    """`config` with the baselines' levels: leverage 1x only, risk `NO_STOP` only; a decision
    on every bar (a rule is not held to the agent's `decision_interval`); and no volatility
    target (a baseline holds 1x, whatever the agent's sizing)."""
    return dataclasses.replace(
        config,
        leverage_levels=(1.0,),
        risk_levels=(NO_STOP,),
        decision_interval=1,
        volatility_target=None,
    )


def baseline_env(env: TradingEnv, *, sized: bool = False) -> TradingEnv:
    """An env over `env`'s market and bars, as one episode, under `baseline_config`; with `sized`,
    keeping the agent's `volatility_target` (`sized_baseline_env`)."""
    core = env.core
    config = baseline_config(core.config)
    if sized:
        config = dataclasses.replace(config, volatility_target=core.config.volatility_target)
    return TradingEnv(
        core.market,
        config,
        bars=range(core.first_bar, core.end_bar + 1),
        random_start=False,
        episode_length=None,
    )


def sized_baseline_env(env: TradingEnv) -> TradingEnv | None:
    """The env of `sized_hold`: `baseline_env` with the agent's volatility sizing; None when
    `env` has no `volatility_target`."""
    return None if env.core.config.volatility_target is None else baseline_env(env, sized=True)


def _check_levels(config: EnvConfig) -> None:
    """Raise `ValueError` unless `config` has the baselines' levels (`baseline_config`)."""
    if config.leverage_levels != (1.0,) or config.risk_levels != (NO_STOP,):
        raise ValueError(
            "baselines trade under baseline_config(config) (leverage 1x, no stop), got "
            f"leverage_levels {config.leverage_levels}, risk_levels {config.risk_levels}"
        )


def long_action(config: EnvConfig) -> np.ndarray:
    """Action indices [3] of a long at 1x without a stop, under a `baseline_config`."""
    _check_levels(config)
    return np.array([config.direction_names.index("long"), 0, 0], dtype=np.int64)


def flat_action(config: EnvConfig) -> np.ndarray:
    """Action indices [3] of no position, under a `baseline_config`."""
    _check_levels(config)
    return np.array([config.flat_direction_index, 0, 0], dtype=np.int64)


def constant(action: np.ndarray) -> BarPolicy:
    """A policy that always chooses `action`."""
    action = np.array(action, dtype=np.int64)
    return lambda obs, bar: action


def buy_and_hold(config: EnvConfig) -> BarPolicy:
    """Long at 1x from the first open on, never sold (an unchanged action trades nothing)."""
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


def baseline_policies(env: TradingEnv) -> dict[str, BarPolicy]:
    """The baselines by name, for an env under `baseline_config` (`baseline_env`)."""
    config = env.core.config
    return {
        "buy_and_hold": buy_and_hold(config),
        "flat": flat(config),
        "ma_crossover": moving_average_crossover(config, env.core.ohlc[:, 3]),
    }
