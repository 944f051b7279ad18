"""Causal per-bar features of a `MarketData`, computed once before an environment steps.

Row t uses bars 0..t only. The four price features are log prices relative to the previous close,
divided by a causal volatility and clipped; volume is a causal z-score of log volume; the next two
give the volatility's own level, which the scaled price features hide; an optional momentum
feature per horizon h (`EnvConfig.momentum_horizons`) gives the trend over h bars, which may reach
far beyond the observation's window:

| feature            | raw value (bar t, c_{-1} := o_0)  | scale                               |
|--------------------|-----------------------------------|-------------------------------------|
| `close_return`     | log(c_t / c_{t-1})                | / vol_t, clipped to +-10            |
| `open_gap`         | log(o_t / c_{t-1})                | / vol_t, clipped to +-10            |
| `high_range`       | log(h_t / c_{t-1})                | / vol_t, clipped to +-10            |
| `low_range`        | log(l_t / c_{t-1})                | / vol_t, clipped to +-10            |
| `volume`           | log(1 + v_t)                      | rolling z-score, clipped to +-10    |
| `volatility`       | log(vol_t * sqrt(bars_per_year))  | none (annualised level), clipped    |
| `volatility_trend` | log(vol_t / long_vol_t)           | none, clipped to +-10               |
| `momentum_<h>`     | log(c_t / c_{t-h})                | / (vol_t sqrt(n)), clipped to +-10  |

vol_t is the root mean square of `close_return` over the last `norm_window` bars including t
(fewer bars before that), floored at `VOLATILITY_FLOOR`. It departs from a rolling standard
deviation on purpose: it takes the mean as zero, the usual short-horizon volatility estimate, so it
is defined from the first bar on (a standard deviation of one or two returns is zero or nearly so)
and does not shrink when prices trend. Because the window includes bar t, |close_return| can
never exceed sqrt(norm_window) (8 for 64 bars); the clip binds on wicks and gaps. long_vol_t is
the same over `LONG_WINDOW_FACTOR` times as many bars. No statistic of the prices covers the
whole file; `volatility` is annualised by the bars per year, a calendar fact: a training run
fixes it from its training bars (`env.bars_per_year` in its config), a bare environment takes
the data's observed frequency.

Why the level: every price feature is divided by vol_t, so a few weeks into a calm or a turbulent
spell the windows look alike. Growth-optimal leverage scales with drift / variance and a sensible
stop distance with volatility, so the `leverage` and `risk` heads need the level itself:
`volatility` is it, annualised so that daily and hourly data read alike (about -1.6 for 20% a
year), and `volatility_trend` says whether it is rising (> 0) or falling against a longer past.

Why momentum: a trend shows only in the sum of many small returns, and the sum over h bars of
returns with volatility vol_t has a noise of about vol_t sqrt(h). `momentum_<h>` divides by that,
so it reads as a t-statistic of the drift over the last h bars (about N(0, 1) without one), the
normalised time-series momentum signal of the literature (Moskowitz, Ooi and Pedersen 2012; Lim,
Zohren and Roberts 2019). Before bar h - 1 it covers the n = t + 1 bars there are (c_{-1} := o_0).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from envs.market_data import MarketData

FEATURE_NAMES: tuple[str, ...] = (
    "close_return",
    "open_gap",
    "high_range",
    "low_range",
    "volume",
    "volatility",
    "volatility_trend",
)
CLIP = 10.0  # every feature lies in [-CLIP, CLIP]
VOLATILITY_FLOOR = 1e-4  # log-return units (1 bp): flat prices give 0, not 0 / 0
VOLUME_STD_FLOOR = 1e-2  # log-volume units: near-constant volume is not blown up
LONG_WINDOW_FACTOR = 4  # `volatility_trend` compares vol_t with the vol of 4x as many bars


def feature_names(momentum_horizons: tuple[int, ...] = ()) -> tuple[str, ...]:
    """The feature columns `compute_features` returns for these momentum horizons, in order."""
    return FEATURE_NAMES + tuple(f"momentum_{h}" for h in momentum_horizons)


def compute_features(
    market: MarketData,
    norm_window: int = 64,
    bars_per_year: float | None = None,
    momentum_horizons: tuple[int, ...] = (),
) -> np.ndarray:
    """Causal features of every bar, [T, len(feature_names(momentum_horizons))] float32,
    C-contiguous, finite.

    Args:
        market: validated bars (positive prices, volume >= 0).
        norm_window: bars, including the current one, behind the volatility and the volume
            z-score; earlier bars use the bars there are.
        bars_per_year: annualises `volatility`; None: the bars per year observed in `market`
            (`MarketData.bars_per_year`), as an environment does without `env.bars_per_year`.
        momentum_horizons: bars h of each `momentum_<h>` column (each >= 1), appended in order.
    """
    if norm_window < 2:
        raise ValueError(f"norm_window must be >= 2, got {norm_window}")
    if any(h < 1 for h in momentum_horizons):
        raise ValueError(f"momentum horizons must be >= 1, got {list(momentum_horizons)}")
    moves = log_moves(market)  # [T, 4]
    if bars_per_year is None:
        bars_per_year = market.bars_per_year()
    volatility = rolling_volatility(moves[:, 0], norm_window)  # [T]
    long_volatility = rolling_volatility(moves[:, 0], LONG_WINDOW_FACTOR * norm_window)  # [T]
    names = feature_names(momentum_horizons)
    features = np.empty((len(market), len(names)), dtype=np.float32)
    features[:, :4] = np.clip(moves / volatility[:, None], -CLIP, CLIP)
    features[:, 4] = np.clip(_rolling_zscore(np.log1p(market.volume), norm_window), -CLIP, CLIP)
    features[:, 5] = np.clip(np.log(volatility * np.sqrt(bars_per_year)), -CLIP, CLIP)
    features[:, 6] = np.clip(np.log(volatility / long_volatility), -CLIP, CLIP)
    for column, h in enumerate(momentum_horizons, start=len(FEATURE_NAMES)):
        features[:, column] = scaled_momentum(moves[:, 0], volatility, h)
    return features


def scaled_momentum(close_moves: np.ndarray, volatility: np.ndarray, horizon: int) -> np.ndarray:
    """`momentum_<horizon>` of every bar of a series whose close-to-close log moves are
    `close_moves` [..., T] (any leading dims: copies of one series, say) and whose vol_t is
    `volatility` [T]: ``log(c_t / c_{t-h}) / (vol_t sqrt(n))`` clipped to +-`CLIP`, n = min(h,
    t + 1) the moves there are (module doc), float64 [..., T]."""
    log_close = np.cumsum(close_moves, axis=-1)  # [..., T]: log(c_t / o_0)
    before = np.zeros_like(log_close)  # [..., T]: log(c_{t-h} / o_0), 0 where t < h (o_0)
    before[..., horizon:] = log_close[..., :-horizon]
    moves = np.minimum(np.arange(close_moves.shape[-1]) + 1, horizon)  # [T] n
    return np.clip((log_close - before) / (volatility * np.sqrt(moves)), -CLIP, CLIP)


def volatility_scale(
    market: MarketData, norm_window: int, bars_per_year: float | None, target: float | None
) -> np.ndarray:
    """The share of each bar's leverage level a position decided there is sized to, [T] float64
    in (0, 1]: ``min(1, target / (vol_t * sqrt(bars_per_year)))``, vol_t as in `compute_features`
    over `norm_window` bars (so causal); all ones when `target` is None. `bars_per_year`: as in
    `compute_features` (None: the bars per year observed in `market`).

    Volatility targeting (Moreira and Muir 2017, "Volatility-managed portfolios"): growth-optimal
    leverage falls with the variance, so an exposure scaled by a volatility budget de-levers in
    turbulent spells without the policy having to learn it, and never exceeds the level chosen.
    The env sizes by a shorter window than the features' (`EnvConfig.volatility_target_window`):
    on the benchmark's turbulence regimes, always-long sized over 8-12 bars keeps 0.91-0.93 of
    the fair ceiling's expected edge, over 64 bars 0.29 (benchmarks/RESULTS.md).
    """
    if target is None:
        return np.ones(len(market))
    if bars_per_year is None:
        bars_per_year = market.bars_per_year()
    volatility = rolling_volatility(log_moves(market)[:, 0], norm_window)  # [T]
    return np.minimum(1.0, target / (volatility * np.sqrt(bars_per_year)))


def log_moves(market: MarketData) -> np.ndarray:
    """[T, 4] log(close, open, high, low / previous close), with c_{-1} := o_0: the bars'
    close-to-close moves, their opening gaps and their ranges."""
    previous_close = np.concatenate([market.open[:1], market.close[:-1]])
    prices = np.column_stack([market.close, market.open, market.high, market.low])  # [T, 4]
    return np.log(prices) - np.log(previous_close)[:, None]


def rolling_volatility(values: np.ndarray, window: int) -> np.ndarray:
    """vol_t of the moves `values` [T] (module doc): sqrt(mean(x^2)) over the last ``window``
    values including each one, floored at `VOLATILITY_FLOOR`, [T]. A function of the moves'
    sizes alone: the same for any copy with their signs flipped."""
    mean_square = pd.Series(values * values).rolling(window, min_periods=1).mean().to_numpy()
    return np.maximum(np.sqrt(np.maximum(mean_square, 0.0)), VOLATILITY_FLOOR)


def _rolling_zscore(values: np.ndarray, window: int) -> np.ndarray:
    """(x - mean) / std over the last ``window`` values including each one; std floored."""
    rolling = pd.Series(values).rolling(window, min_periods=1)
    mean = rolling.mean().to_numpy()
    std = rolling.std(ddof=0).to_numpy()
    return (values - mean) / np.maximum(std, VOLUME_STD_FLOOR)
