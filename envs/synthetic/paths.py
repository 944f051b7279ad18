"""Intrabar log-price paths on a sub-step grid, and the OHLCV bars read from them.

Every bar is one unit of time split into `n_night` unobserved overnight sub-steps followed by
`n_day` traded sub-steps, all of length ``dt = 1 / (n_night + n_day)``. The open is the path's
value at the end of the night, the close its last value, and high / low are the extremes of the
day's path including the open, so a bar's wicks come from the same continuous path as its open
and close (LEARNING.md, "Synthetic wicks"); the night gives a small, realistic opening gap.
"""

from __future__ import annotations

import numpy as np

from envs.market_data import MarketData

FIRST_DAY = np.datetime64("2000-01-03")  # a Monday: the first bar's date


def night_substeps(n_day: int, night_share: float) -> int:
    """Overnight sub-steps so that they hold about `night_share` of a bar's time (>= 1)."""
    if n_day < 1 or not 0.0 < night_share < 1.0:
        raise ValueError(f"need n_day >= 1 and 0 < night_share < 1, got {n_day}, {night_share}")
    return max(1, round(n_day * night_share / (1.0 - night_share)))


def brownian_increments(
    rng: np.random.Generator, drift: np.ndarray, vol: np.ndarray, n_steps: int
) -> np.ndarray:
    """Log-price increments [T, n_steps] whose per-bar sums are N(drift[t], vol[t]^2).

    drift, vol: [T] log drift and volatility of each whole bar (night and day together).
    """
    dt = 1.0 / n_steps
    noise = rng.standard_normal((len(drift), n_steps))  # [T, S]
    return drift[:, None] * dt + vol[:, None] * np.sqrt(dt) * noise  # [T, S]


def ar1_path(innovations: np.ndarray, a: float, x0: float) -> np.ndarray:
    """The AR(1) path ``x_j = a * x_{j-1} + e_j`` over the flattened grid, as [T, S].

    innovations: [T, S] e_j in time order; x0 is the value before the first sub-step. Vectorised
    within bars (one matrix product) with a scalar recursion over bar starts only.
    """
    n_bars, n_steps = innovations.shape
    lags = np.arange(n_steps)[:, None] - np.arange(n_steps)[None, :]  # [S, S] k - i
    kernel = np.where(lags >= 0, a ** np.maximum(lags, 0), 0.0)  # [S, S] a^(k-i) for i <= k
    within = innovations @ kernel.T  # [T, S] sum_{i<=k} a^(k-i) e_i, from a zero start
    powers = a ** np.arange(1, n_steps + 1)  # [S] a^(k+1)
    starts = np.empty(n_bars)  # [T] value before each bar's first sub-step
    carry, decay, last = x0, powers[-1], within[:, -1].tolist()
    for t in range(n_bars):
        starts[t] = carry
        carry = decay * carry + last[t]
    return starts[:, None] * powers[None, :] + within  # [T, S]


def bars_from_path(
    log_path: np.ndarray, n_night: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Open, high, low, close [T] each of bars whose log prices are `log_path` [T, S].

    The first `n_night` sub-steps of each row are overnight (unobserved); the open is the value
    at the end of the night, high / low the extremes of the rest of the row and the open.
    """
    day = log_path[:, n_night - 1 :]  # [T, n_day + 1], the open first
    return np.exp(day[:, 0]), np.exp(day.max(axis=1)), np.exp(day.min(axis=1)), np.exp(day[:, -1])


def business_days(n_bars: int) -> np.ndarray:
    """[n_bars] datetime64[ns] business days (Monday to Friday) from 2000-01-03."""
    return np.busday_offset(FIRST_DAY, np.arange(n_bars), roll="forward").astype("datetime64[ns]")


def lognormal_volume(
    rng: np.random.Generator, base: float, activity: np.ndarray, spread: float = 0.3
) -> np.ndarray:
    """[T] positive volumes: base * activity[t] * a lognormal factor with log-std `spread`."""
    return base * activity * np.exp(spread * rng.standard_normal(len(activity)))


def make_market(
    source: str,
    ticker: str,
    log_path: np.ndarray,
    n_night: int,
    volume: np.ndarray,
) -> MarketData:
    """A `MarketData` of business-day bars read from a log-price path [T, S] and volumes [T]."""
    open_, high, low, close = bars_from_path(log_path, n_night)
    return MarketData(
        source=source,
        ticker=ticker,
        timestamps=business_days(len(log_path)),
        open=open_,
        high=high,
        low=low,
        close=close,
        volume=volume,
    )
