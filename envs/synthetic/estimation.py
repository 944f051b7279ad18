"""A regime series' parameters estimated from its own bars: what a learner could know.

The fair ceiling (`envs.synthetic.references`) knows the generator's exact parameters. An agent
knows none of them: it sees only its training bars. Between the two sits the **estimated ceiling**:
the fair ceiling's rule run with parameters fitted to the training bars by maximum likelihood,
knowing the model family (a Gaussian hidden-Markov chain with as many states as the generator, and
for the volatility kinds, whose generator holds one expected return across regimes, that
constraint) but not its numbers. Its share of the fair ceiling's edge is how much of that edge the
training bars reveal to a careful statistician; a learner that has to find the model family too can
hardly do better.

`fit_regimes` is Baum-Welch (expectation-maximization) for a K-state Gaussian HMM on close-to-close
log returns, from several seeded starts, keeping the highest likelihood; with `tied_return` the
states share one expected simple return. Without it, a turbulent state's drift is estimated from
its own bars alone: over the ~1,000 turbulent bars of a `turbulence_regimes` training range its
standard error (0.16% a bar) is twice the true return, and the fitted growth-optimal leverage there
came out anywhere from -0.3x to 1.6x over ten seeds. It is written here (about sixty lines with
numba) rather than taken from hmmlearn, which would add scipy and scikit-learn to the install for
one benchmark reference.

`fit_reversion` fits the `mean_reversion` family (a slow AR(1) deviation from a known level, seen
through nearly independent noise) by maximizing the scalar Kalman filter's likelihood of the log
closes: a grid over the deviation's half-life, its spread and the noise, then a local search around
the best point. The crash kind is not fitted: a crash mixture needs its own likelihood.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from types import MappingProxyType

import numba
import numpy as np

from envs.synthetic.generators import SyntheticSeries

_MIN_VOL = 1e-5  # floor of a fitted state's volatility per bar (a state on one bar would be 0)
_MAX_ITERATIONS = 500
_TOLERANCE = 1e-7  # stop when the log-likelihood gains less than this per iteration


@dataclass(frozen=True)
class ReversionFit:
    """Maximum-likelihood parameters of the `mean_reversion` family (level known)."""

    phi: float  # AR(1) coefficient of the deviation per bar
    deviation_sd: float  # stationary standard deviation of the deviation (log units)
    noise_sd: float  # standard deviation of the noise on each close (log units)
    log_likelihood: float  # of the fitted closes under these parameters


@dataclass(frozen=True)
class RegimeFit:
    """Maximum-likelihood parameters of a K-state Gaussian HMM of log returns."""

    drift: tuple[float, ...]  # [K] mean log return per bar of each state
    vol: tuple[float, ...]  # [K] log-return standard deviation per bar of each state
    transition: tuple[tuple[float, ...], ...]  # [K][K] P(state j next | state i now)
    log_likelihood: float  # of the fitted returns under these parameters
    iterations: int  # EM iterations of the start that won


def fit_regimes(
    log_returns: np.ndarray,
    n_states: int,
    *,
    tied_return: bool = False,
    starts: int = 8,
    seed: int = 0,
) -> RegimeFit:
    """The K-state Gaussian HMM of highest likelihood for `log_returns` [N], by EM from `starts`
    seeded initial guesses (spread around the returns' quantiles and standard deviation).

    `tied_return`: the states share one expected simple return per bar, ``drift_k + vol_k^2 / 2``
    (the volatility kinds' generator): each M-step sets it to the states' precision-weighted
    estimate and each drift to it less ``vol_k^2 / 2`` (a generalized EM step). Deterministic for
    a given `seed`. K = 1 is the sample mean and standard deviation.
    """
    x = np.ascontiguousarray(log_returns, dtype=np.float64)  # [N]
    if n_states < 1 or len(x) < 2 * n_states:
        raise ValueError(f"need n_states >= 1 and >= {2 * n_states} returns, got {len(x)}")
    rng = np.random.default_rng(seed)
    best: RegimeFit | None = None
    for _ in range(starts if n_states > 1 else 1):
        mean0 = np.quantile(x, np.sort(rng.uniform(0.1, 0.9, n_states)))  # [K]
        vol0 = np.std(x) * rng.uniform(0.5, 1.5, n_states)  # [K]
        stay = rng.uniform(0.8, 0.99)
        trans0 = np.full((n_states, n_states), (1.0 - stay) / max(n_states - 1, 1))  # [K, K]
        np.fill_diagonal(trans0, stay if n_states > 1 else 1.0)
        mean, vol, trans, loglik, its = _baum_welch(x, mean0, vol0, trans0, tied_return)
        if best is None or loglik > best.log_likelihood:
            best = RegimeFit(
                drift=tuple(mean.tolist()),
                vol=tuple(vol.tolist()),
                transition=tuple(tuple(row) for row in trans.tolist()),
                log_likelihood=float(loglik),
                iterations=int(its),
            )
    assert best is not None
    return best


def fit_reversion(deviations: np.ndarray) -> ReversionFit:
    """The `mean_reversion` parameters of highest Kalman likelihood for `deviations` [N] (log
    close minus the known level): a log-spaced grid over the half-life (1 to 200 bars), the
    deviation's spread and the noise's, then coordinate steps that halve until they are 0.1% of
    each value. Deterministic."""
    y = np.ascontiguousarray(deviations, dtype=np.float64)  # [N]
    if len(y) < 10:
        raise ValueError(f"need >= 10 closes, got {len(y)}")
    spread = float(np.std(y)) or 1e-4
    grids = (
        np.log(np.geomspace(1.0, 200.0, 16)),  # half-life, bars
        np.log(spread * np.geomspace(0.1, 2.0, 14)),  # deviation sd
        np.log(spread * np.geomspace(0.005, 1.0, 14)),  # noise sd
    )
    best, best_value = None, -np.inf
    for point in itertools.product(*grids):
        value = _reversion_loglik(y, *_reversion_params(point))
        if value > best_value:
            best, best_value = np.array(point), value
    assert best is not None
    step = 0.5
    while step > 1e-3:  # coordinate search in log space
        moved = False
        for i in range(3):
            for sign in (1.0, -1.0):
                trial = best.copy()
                trial[i] += sign * step
                value = _reversion_loglik(y, *_reversion_params(tuple(trial)))
                if value > best_value:
                    best, best_value, moved = trial, value, True
        if not moved:
            step /= 2.0
    phi, deviation_sd, noise_sd = _reversion_params(tuple(best))
    return ReversionFit(phi, deviation_sd, noise_sd, float(best_value))


def reversion_log_likelihood(deviations: np.ndarray, fit: ReversionFit) -> float:
    """Log-likelihood of `deviations` [N] under `fit`'s phi, deviation and noise spreads (its own
    `log_likelihood` field is not read): the scalar Kalman filter of `kalman_deviation`."""
    y = np.ascontiguousarray(deviations, dtype=np.float64)  # [N]
    return float(_reversion_loglik(y, fit.phi, fit.deviation_sd, fit.noise_sd))


def _reversion_params(point: tuple[float, ...]) -> tuple[float, float, float]:
    """(phi, deviation sd, noise sd) of a point (log half-life, log sd, log noise sd)."""
    log_half_life, log_sd, log_noise = point
    return 2.0 ** (-1.0 / math.exp(log_half_life)), math.exp(log_sd), math.exp(log_noise)


@numba.njit(cache=True)
def _reversion_loglik(y, phi, sd, noise):  # pragma: no cover - compiled
    """Log-likelihood of deviations y [N] under the scalar Kalman filter of
    `filters.kalman_deviation` (the deviation's stationary prior at the first close): the sum
    over closes of the innovation's normal log density."""
    process_var = sd * sd * (1.0 - phi * phi)
    noise_var = noise * noise
    m, p = 0.0, sd * sd
    total = 0.0
    for t in range(len(y)):
        if t > 0:
            m, p = phi * m, phi * phi * p + process_var
        s = p + noise_var
        v = y[t] - m
        total -= 0.5 * (math.log(2.0 * math.pi * s) + v * v / s)
        gain = p / s
        m, p = m + gain * v, (1.0 - gain) * p
    return total


def estimated_series(series: SyntheticSeries, bars: range, *, seed: int = 0) -> SyntheticSeries:
    """`series` with the parameters fitted to its bars inside `bars` (no later bar is read).

    Regime kinds: drift, volatility and transition by `fit_regimes` on the close-to-close log
    returns, with the generator's number of states, tied to one expected return where the
    generator has one (``mean_return`` in its parameters: the volatility kinds); the fitted
    states are put in the generator's order (the permutation closest to its parameters; the
    references do not depend on the order, the reports do). `mean_reversion`: ``phi``,
    ``deviation_sd``, ``noise_sd`` (and the ``half_life`` they imply) by `fit_reversion`, the
    level and the noise's half-life being the family's. Crash kinds are refused.
    """
    params = series.params
    close = np.asarray(series.market.close[bars.start : bars.stop], dtype=np.float64)
    if series.family == "ou":
        found = fit_reversion(np.log(close) - params["level"])
        half_life = -1.0 / math.log2(found.phi)
        fitted_ou = {
            **params,
            "phi": found.phi,
            "deviation_sd": found.deviation_sd,
            "noise_sd": found.noise_sd,
            "half_life": half_life,
        }
        return replace(series, params=MappingProxyType(fitted_ou))
    if any(p > 0 for p in params["crash_prob"]):
        raise ValueError(f"{series.name}: only crash-free series can be estimated")
    tied = "mean_return" in params
    fit = fit_regimes(np.diff(np.log(close)), len(params["drift"]), tied_return=tied, seed=seed)
    order = _closest_order(fit, params["drift"], params["vol"])
    fitted = {
        **params,
        "drift": tuple(fit.drift[i] for i in order),
        "vol": tuple(fit.vol[i] for i in order),
        "transition": tuple(tuple(fit.transition[i][j] for j in order) for i in order),
    }
    return replace(series, params=MappingProxyType(fitted))


def _closest_order(fit: RegimeFit, drift: tuple[float, ...], vol: tuple[float, ...]) -> list[int]:
    """The permutation of the fitted states closest to the generator's (scaled by its vols)."""
    scale = min(vol)

    def distance(order: Iterable[int]) -> float:
        return sum(
            ((fit.drift[i] - d) / scale) ** 2 + ((fit.vol[i] - v) / scale) ** 2
            for i, d, v in zip(order, drift, vol, strict=True)
        )

    orders: list[tuple[int, ...]] = list(itertools.permutations(range(len(drift))))
    return list(min(orders, key=distance))


@numba.njit(cache=True)
def _baum_welch(x, mean, vol, trans, tied):  # pragma: no cover - compiled
    """EM for a Gaussian HMM from one start: (mean [K], vol [K], transition [K, K],
    log-likelihood, iterations); `tied`: one expected simple return (see `fit_regimes`). The
    chain starts from the fitted transition's row average."""
    n, k = len(x), len(mean)
    mean, vol, trans = mean.copy(), vol.copy(), trans.copy()
    alpha = np.empty((n, k))  # scaled forward probabilities
    beta = np.empty((n, k))  # scaled backward probabilities
    emit = np.empty((n, k))  # emission densities
    scale = np.empty(n)
    start = np.full(k, 1.0 / k)
    previous = -np.inf
    loglik = -np.inf
    iteration = 0
    while iteration < _MAX_ITERATIONS:
        iteration += 1
        for t in range(n):
            for j in range(k):
                z = (x[t] - mean[j]) / vol[j]
                emit[t, j] = math.exp(-0.5 * z * z) / (vol[j] * math.sqrt(2.0 * math.pi))
        # Forward pass, each row scaled to sum 1.
        total = 0.0
        for j in range(k):
            alpha[0, j] = start[j] * emit[0, j]
            total += alpha[0, j]
        scale[0] = max(total, 1e-300)
        alpha[0] /= scale[0]
        for t in range(1, n):
            total = 0.0
            for j in range(k):
                acc = 0.0
                for i in range(k):
                    acc += alpha[t - 1, i] * trans[i, j]
                alpha[t, j] = acc * emit[t, j]
                total += alpha[t, j]
            scale[t] = max(total, 1e-300)
            alpha[t] /= scale[t]
        loglik = np.log(scale).sum()
        # Backward pass with the same scales.
        beta[n - 1] = 1.0
        for t in range(n - 2, -1, -1):
            for i in range(k):
                acc = 0.0
                for j in range(k):
                    acc += trans[i, j] * emit[t + 1, j] * beta[t + 1, j]
                beta[t, i] = acc / scale[t + 1]
        # M-step: state weights (gamma) and expected transitions (xi).
        gamma = alpha * beta  # [N, K], rows sum to 1
        counts = np.zeros((k, k))
        for t in range(n - 1):
            for i in range(k):
                for j in range(k):
                    counts[i, j] += (
                        alpha[t, i] * trans[i, j] * emit[t + 1, j] * beta[t + 1, j] / scale[t + 1]
                    )
        for i in range(k):
            trans[i] = counts[i] / max(counts[i].sum(), 1e-300)
            weight = max(gamma[:, i].sum(), 1e-300)
            mean[i] = (gamma[:, i] * x).sum() / weight
            vol[i] = max(math.sqrt((gamma[:, i] * (x - mean[i]) ** 2).sum() / weight), _MIN_VOL)
        if tied:
            precision = np.empty(k)  # [K] bars in each state / its variance
            for i in range(k):
                precision[i] = max(gamma[:, i].sum(), 1e-300) / (vol[i] * vol[i])
            common = (precision * (mean + 0.5 * vol * vol)).sum() / precision.sum()
            mean[:] = common - 0.5 * vol * vol
        start = gamma[0].copy()
        if loglik - previous < _TOLERANCE:
            break
        previous = loglik
    return mean, vol, trans, loglik, iteration
