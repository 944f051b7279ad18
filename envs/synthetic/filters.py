"""Causal inference of a synthetic series' hidden state: what a fair observer can know at bar t.

The observer knows the generator's `params` and sees closes 0..t; nothing here reads a later bar,
so changing bars after t never changes a belief at t (tested).

* Regime family: the HMM forward (Bayes) filter on close-to-close log returns, with the exact
  emission of the generator: ``N(drift_k, vol_k^2)``, mixed, where state k crashes with
  probability ``crash_prob_k``, with that normal convolved with the uniform log drop.
* OU family: the Kalman filter of ``y_t = log(close_t) - level = d_t + u_t`` with
  ``d_t = phi * d_{t-1} + w_t``, w ~ N(0, sd^2 (1 - phi^2)), u ~ N(0, noise_sd^2).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from envs.market_data import MarketData
from envs.synthetic.generators import SyntheticSeries, stationary_distribution

_SQRT2 = math.sqrt(2.0)
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def regime_posterior(market: MarketData, params: Mapping[str, Any]) -> np.ndarray:
    """[T, K] P(state[t] = k | closes 0..t) by the HMM forward filter; row 0 is the stationary
    distribution (no return has been seen yet)."""
    transition = np.asarray(params["transition"], dtype=np.float64)  # [K, K]
    log_returns = np.diff(np.log(market.close))  # [T - 1]
    log_lik = emission_log_likelihood(log_returns, params)  # [T - 1, K]
    lik = np.exp(log_lik - log_lik.max(axis=1, keepdims=True))  # [T - 1, K], row max 1
    posterior = np.empty((len(market), len(transition)))  # [T, K]
    belief = stationary_distribution(transition)  # [K]
    posterior[0] = belief
    for t in range(1, len(market)):
        belief = (belief @ transition) * lik[t - 1]
        belief /= belief.sum()
        posterior[t] = belief
    return posterior


def emission_log_likelihood(log_returns: np.ndarray, params: Mapping[str, Any]) -> np.ndarray:
    """[N, K] log density of each close-to-close log return [N] under each regime k."""
    drift = np.asarray(params["drift"])[None, :]  # [1, K]
    vol = np.asarray(params["vol"])[None, :]  # [1, K]
    crash = np.asarray(params["crash_prob"])[None, :]  # [1, K]
    z = (log_returns[:, None] - drift) / vol  # [N, K]
    log_normal = -0.5 * z * z - np.log(vol * math.sqrt(2.0 * math.pi))  # [N, K]
    if not np.any(crash > 0):
        return log_normal
    low = math.log(1.0 - params["crash_size"][1])  # most negative log drop
    high = math.log(1.0 - params["crash_size"][0])
    # N(drift, vol^2) + U[low, high]: density (Phi(z - low / vol) - Phi(z - high / vol)) / width.
    upper, lower = z - low / vol, z - high / vol  # [N, K], upper > lower
    mass = np.where(
        lower > 0,
        0.5 * (_erfc(lower / _SQRT2) - _erfc(upper / _SQRT2)),  # both in the right tail
        0.5 * (_erfc(-upper / _SQRT2) - _erfc(-lower / _SQRT2)),
    )  # [N, K]
    log_crash = np.log(np.maximum(mass, 1e-300) / (high - low))  # [N, K]
    with np.errstate(divide="ignore"):
        return np.logaddexp(np.log1p(-crash) + log_normal, np.log(crash) + log_crash)


def kalman_deviation(
    market: MarketData, params: Mapping[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """E[d_t | closes 0..t] and its variance, each [T], by the scalar Kalman filter."""
    observed = (np.log(market.close) - params["level"]).tolist()  # [T] y_t
    phi, sd, noise_var = params["phi"], params["deviation_sd"], params["noise_sd"] ** 2
    process_var = sd * sd * (1.0 - phi * phi)
    mean, var = np.empty(len(observed)), np.empty(len(observed))  # [T], [T]
    m, p = 0.0, sd * sd  # the stationary prior of d_0
    for t, y in enumerate(observed):
        if t > 0:
            m, p = phi * m, phi * phi * p + process_var
        gain = p / (p + noise_var)
        m, p = m + gain * (y - m), (1.0 - gain) * p
        mean[t], var[t] = m, p
    return mean, var


def belief(series: SyntheticSeries) -> np.ndarray:
    """[T] the fair observer's estimate of ``series.state[t]`` from bars 0..t.

    Regime kinds: P(state 1), i.e. P(up-trend), P(turbulent), P(fragile) (0 for `random_walk`,
    whose only state is 0). `mean_reversion`: E[d_t].
    """
    if series.family == "ou":
        return kalman_deviation(series.market, series.params)[0]
    posterior = regime_posterior(series.market, series.params)  # [T, K]
    return posterior @ np.arange(posterior.shape[1], dtype=np.float64)
