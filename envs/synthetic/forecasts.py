"""What the reference rules expect of the next bar, and the log growth each option earns then.

A `Forecast` is, for every decision bar t, a mixture of K normal components of the next bar's log
return (plus each component's crash). The **oracle** builds it from the hidden state at t; the
**fair ceiling** from the causal filter's belief at t (`envs.synthetic.filters`):

* Regime kinds: component k is the next bar's regime, weighted by P(state at t) times the
  transition matrix, with mean ``drift_k`` and variance ``vol_k^2`` (a whole bar: regimes
  persist, a position is held through the night).
* `mean_reversion` (one component): the return from the next open to its close, the part an
  order decided at t can earn, ``(phi - phi^n) E[d_t] + (a - a^n) E[u_t]``: the deviation d and
  the fast noise u decay by ``phi`` and ``a`` per bar and by ``phi^n``, ``a^n`` over the night
  (n = the night's share of a bar); E[u_t] = y_t - E[d_t].

Growth of an option (side s, leverage L, stop at a fractional distance x below a long's price):
``s L m - L^2 v / (2 kelly_scale)`` in simple-return moments, minus financing or borrow, minus
P(noise touches the stop) ~ erfc(x / (vol sqrt 2)) times a round trip, plus the crash
probability times the expected log loss of a crash: an overnight gap hits the whole position, an
intraday slide stops a long out at its stop (equity loss capped at L x).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from envs.synthetic.filters import kalman_deviation, regime_posterior
from envs.synthetic.generators import SyntheticSeries

Rule = Literal["oracle", "ceiling"]
_LOG_FLOOR = 1e-6  # equity share floor inside a log: a wipe-out scores log(1e-6), not -inf
_CRASH_NODES = 32  # quadrature points over the uniform log drop of a crash
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


@dataclass(frozen=True)
class Forecast:
    """The next bar's log return at each decision bar t: a mixture of K components."""

    weights: np.ndarray  # [T, K] probability of each component
    mean: np.ndarray  # [T or 1, K] log-return mean, crashes aside
    var: np.ndarray  # [T or 1, K] log-return variance, crashes aside
    crash_prob: np.ndarray  # [T] probability of a crash in the next bar
    crash_drops: np.ndarray  # [J] quadrature nodes of a crash's log drop (< 0)
    overnight_share: float  # share of crashes that gap at the open


def forecast(series: SyntheticSeries, rule: Rule) -> Forecast:
    """The oracle's (``rule="oracle"``) or the fair ceiling's forecast for every bar of `series`."""
    if rule not in ("oracle", "ceiling"):
        raise ValueError(f"rule must be 'oracle' or 'ceiling', got {rule!r}")
    if series.family == "ou":
        return _reversion_forecast(series, rule)
    params = series.params
    transition = np.asarray(params["transition"])  # [K, K]
    if rule == "oracle":
        now = np.eye(len(transition))[series.state]  # [T, K] one-hot
    else:
        now = regime_posterior(series.market, params)  # [T, K]
    weights = now @ transition  # [T, K] P(next state = k)
    low, high = (math.log(1.0 - c) for c in params["crash_size"][::-1])
    return Forecast(
        weights=weights,
        mean=np.asarray(params["drift"], dtype=np.float64)[None, :],  # [1, K]
        var=np.asarray(params["vol"], dtype=np.float64)[None, :] ** 2,  # [1, K]
        crash_prob=weights @ np.asarray(params["crash_prob"], dtype=np.float64),  # [T]
        crash_drops=low + (np.arange(_CRASH_NODES) + 0.5) * (high - low) / _CRASH_NODES,
        overnight_share=float(params["crash_overnight_share"]),
    )


def kelly_growth(
    fc: Forecast,
    side: np.ndarray,
    leverage: np.ndarray,
    rates: tuple[float, float],
    kelly_scale: float = 1.0,
) -> np.ndarray:
    """[T, P] expected one-bar log growth of positions (side [P], leverage [P]), stops aside.

    rates: financing and borrow per bar. The variance penalty is divided by `kelly_scale`.
    """
    financing, borrow = rates
    simple_mean = np.expm1(fc.mean + fc.var / 2)[..., None]  # [T|1, K, 1]
    simple_var = (np.exp(2 * fc.mean + fc.var) * np.expm1(fc.var))[..., None]  # [T|1, K, 1]
    carry = financing * np.maximum(leverage - 1.0, 0.0) * (side > 0) + borrow * leverage * (
        side < 0
    )
    growth = (
        side * leverage * simple_mean - leverage**2 * simple_var / (2.0 * kelly_scale) - carry
    )  # [T|1, K, P]
    growth = np.broadcast_to(growth, (len(fc.weights), *growth.shape[1:]))  # [T, K, P]
    return np.einsum("tk,tkp->tp", fc.weights, growth)


def stop_growth(
    fc: Forecast,
    bars: slice | int,
    side: np.ndarray,
    leverage: np.ndarray,
    distance: np.ndarray,
    cost: float,
) -> np.ndarray:
    """[T', P, R] growth from stops at fractional `distance` [P, R] from the price, on `bars`.

    The cost of noise touching the stop (a round trip at `cost` per unit traded) and the
    expected log change of a crash (`crash_log_change`). T' is the number of bars selected (a
    single bar gives [1, P, R]).
    """
    rows = np.arange(len(fc.weights))[bars]
    rows = np.atleast_1d(rows)  # [T']
    weights = fc.weights[rows]  # [T', K]
    var = fc.var[rows] if len(fc.var) > 1 else fc.var  # [T'|1, K]
    vol = np.sqrt(var)[:, :, None, None]  # [T'|1, K, 1, 1]
    touch = np.minimum(_erfc(np.maximum(distance, 0.0) / (vol * math.sqrt(2.0))), 1.0)
    touch = np.broadcast_to(touch, (len(rows), *touch.shape[1:]))  # [T', K, P, R]
    round_trip = 2.0 * cost * leverage[:, None]  # [P, 1]
    growth = -np.einsum("tk,tkpr->tpr", weights, touch) * round_trip  # [T', P, R]
    crash = fc.crash_prob[rows]  # [T']
    if np.any(crash > 0):
        growth += crash[:, None, None] * crash_log_change(fc, side, leverage, distance)[None]
    return growth


def crash_log_change(
    fc: Forecast, side: np.ndarray, leverage: np.ndarray, distance: np.ndarray
) -> np.ndarray:
    """[P, R] expected log equity change of a crash for positions [P] with stops [P, R].

    An overnight crash hits the whole position at the open; an intraday slide stops a long out
    at its stop, `distance` below the price, before the rest of the drop.
    """
    if len(fc.crash_drops) == 0:
        return np.zeros(np.shape(distance))
    move = np.expm1(fc.crash_drops)[:, None]  # [J, 1] simple price change, < 0
    pnl = (side * leverage)[None, :] * move  # [J, P] equity change without a stop
    capped = np.maximum(pnl[:, :, None], -(leverage[:, None] * np.maximum(distance, 0.0))[None])
    stopped = np.where((side > 0)[None, :, None], capped, pnl[:, :, None])  # [J, P, R]
    log_gap = np.log(np.maximum(1.0 + pnl, _LOG_FLOOR))[:, :, None]  # [J, P, 1]
    log_slide = np.log(np.maximum(1.0 + stopped, _LOG_FLOOR))  # [J, P, R]
    share = fc.overnight_share
    return (share * log_gap + (1.0 - share) * log_slide).mean(axis=0)  # [P, R]


def _reversion_forecast(series: SyntheticSeries, rule: Rule) -> Forecast:
    """One normal component per bar: the next open-to-close log return (module doc)."""
    params = series.params
    phi, sd, noise = params["phi"], params["deviation_sd"], params["noise_sd"]
    night = params["night_substeps"] / (params["night_substeps"] + params["substeps"])
    phi_night = phi**night
    noise_decay = 2.0 ** (-1.0 / params["noise_half_life"])  # per bar
    noise_night = noise_decay**night
    observed = np.log(series.market.close) - params["level"]  # [T] y_t
    if rule == "oracle":
        deviation, deviation_var = np.asarray(series.state), np.zeros(len(observed))
    else:
        deviation, deviation_var = kalman_deviation(series.market, params)
    d_gain, u_gain = phi - phi_night, noise_decay - noise_night  # of E[d_t], of E[u_t]
    mean = d_gain * deviation + u_gain * (observed - deviation)  # [T]
    day_var = sd * sd * (1.0 - phi ** (2.0 * (1.0 - night)))  # d's own moves over the day
    var = (d_gain - u_gain) ** 2 * deviation_var + day_var + noise * noise * (2.0 - noise_night**2)
    n_bars = len(observed)
    return Forecast(
        weights=np.ones((n_bars, 1)),
        mean=mean[:, None],
        var=var[:, None],
        crash_prob=np.zeros(n_bars),
        crash_drops=np.zeros(0),
        overnight_share=0.0,
    )
