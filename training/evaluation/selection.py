"""Selection: which validation pass a run keeps, and statistics for choosing among many trials
(deflated Sharpe ratio, probability of backtest overfitting).

A run ranks its validation passes, restarts and contest entries by one score
(`validation_score`, `train.select_by`): the annualised Sharpe ratio, or the annualised log
growth. With leverage capped, the Sharpe ratio favours a policy that stands aside: flat most of
the time and long through a few lucky spells, it validates at a Sharpe above the market's while
earning a fraction of its growth, and cannot be levered up to earn more. Each score comes with
one standard error over the validation bars, the unit of the contest's margins
(`training.run.challenger`): ``1 / sqrt(years)`` for an annualised Sharpe ratio near zero (Lo
2002), ``volatility / sqrt(years)`` for annualised log growth (the standard error of a mean
return).

Pure functions of numbers and arrays, no I/O. Sharpe ratios here are **per bar** (not
annualised): an annualised Sharpe `S` over `bars_per_year` bars a year is `S / sqrt(bars_per_year)`
per bar (`per_bar_sharpe`).

Deflated Sharpe ratio (Bailey and Lopez de Prado, "The Deflated Sharpe Ratio: Correcting for
Selection Bias, Backtest Overfitting and Non-Normality", Journal of Portfolio Management 40(5),
2014), with `SR` the chosen strategy's per-bar Sharpe over `T` returns of skewness `g3` and
(non-excess) kurtosis `g4`, `N` trials whose per-bar Sharpe estimates have variance `V`, `Phi` the
standard normal CDF and `gamma` the Euler-Mascheroni constant:

    SR0 = sqrt(V) * ((1 - gamma) * Phi^-1(1 - 1/N) + gamma * Phi^-1(1 - 1/(N e)))   (eq. 2)
    DSR = Phi((SR - SR0) * sqrt(T - 1) / sqrt(1 - g3 * SR + (g4 - 1) / 4 * SR^2))   (eq. 1)

`SR0` is the expected maximum Sharpe of `N` unskilled trials; DSR is the probabilistic Sharpe
ratio (Bailey and Lopez de Prado 2012) of `SR` against that benchmark: the probability that the
true Sharpe beats what the best of `N` lucky draws would show. With one trial, `SR0 = 0`.

Probability of backtest overfitting (Bailey, Borwein, Lopez de Prado and Zhu, "The Probability of
Backtest Overfitting", Journal of Computational Finance 20(4), 2017) by combinatorially symmetric
cross-validation (`probability_of_backtest_overfitting`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from training.config import SelectBy

EULER_GAMMA = 0.5772156649015329
_NORMAL = NormalDist()


def per_bar_sharpe(annual_sharpe: float, bars_per_year: float) -> float:
    """An annualised Sharpe ratio (mean / std * sqrt(bars_per_year)) as a per-bar one."""
    return annual_sharpe / math.sqrt(bars_per_year)


def expected_max_sharpe(n_trials: int, sharpe_variance: float) -> float:
    """`SR0` of the module doc: the expected largest of `n_trials` Sharpe estimates of
    variance `sharpe_variance` whose true Sharpe is 0 (0 for a single trial)."""
    if n_trials < 1:
        raise ValueError(f"n_trials must be >= 1, got {n_trials}")
    if sharpe_variance < 0:
        raise ValueError(f"sharpe_variance must be >= 0, got {sharpe_variance}")
    if n_trials == 1:
        return 0.0
    z = (1 - EULER_GAMMA) * _NORMAL.inv_cdf(1 - 1 / n_trials)
    z += EULER_GAMMA * _NORMAL.inv_cdf(1 - 1 / (n_trials * math.e))
    return math.sqrt(sharpe_variance) * z


def probabilistic_sharpe_ratio(
    sharpe: float,
    benchmark: float,
    n_returns: int,
    skew: float = 0.0,
    kurtosis: float = 3.0,
) -> float:
    """Probability that the true per-bar Sharpe exceeds `benchmark`, given the estimate `sharpe`
    over `n_returns` returns of skewness `skew` and non-excess `kurtosis` (3 for normal returns).

    NaN when an input is NaN, `n_returns < 2`, or the variance term is not positive.
    """
    values = (sharpe, benchmark, skew, kurtosis)
    if n_returns < 2 or any(math.isnan(v) for v in values):
        return math.nan
    variance = 1 - skew * sharpe + (kurtosis - 1) / 4 * sharpe**2
    if variance <= 0:
        return math.nan
    return _NORMAL.cdf((sharpe - benchmark) * math.sqrt(n_returns - 1) / math.sqrt(variance))


def deflated_sharpe_ratio(
    sharpe: float,
    sharpe_variance: float,
    n_trials: int,
    n_returns: int,
    skew: float = 0.0,
    kurtosis: float = 3.0,
) -> float:
    """DSR of the module doc: `probabilistic_sharpe_ratio` of the chosen per-bar `sharpe` against
    `expected_max_sharpe(n_trials, sharpe_variance)`. NaN when an input is NaN."""
    if math.isnan(sharpe_variance):
        return math.nan
    benchmark = expected_max_sharpe(n_trials, sharpe_variance)
    return probabilistic_sharpe_ratio(sharpe, benchmark, n_returns, skew, kurtosis)


def _sharpe_columns(returns: np.ndarray) -> np.ndarray:
    """Per-bar Sharpe of each column (mean / std, ddof=1); -inf where a column has no spread."""
    std = returns.std(axis=0, ddof=1)
    mean = returns.mean(axis=0)
    return np.divide(mean, std, out=np.full_like(mean, -np.inf), where=std > 0)


def probability_of_backtest_overfitting(returns: np.ndarray, n_blocks: int = 8) -> float:
    """PBO by combinatorially symmetric cross-validation (module doc).

    `returns` is `[T, N]`: the per-bar returns of `N >= 2` strategies over the same `T` bars.
    The rows are cut into `n_blocks` (even) contiguous blocks; for each of the
    `C(n_blocks, n_blocks/2)` ways to pick half of them as in-sample (the rest out-of-sample),
    the strategy with the best in-sample Sharpe is ranked among all out-of-sample:
    `w = rank / (N + 1)` (rank 1 = worst, ties share the lower rank), `logit = log(w / (1 - w))`.
    PBO is the share of splits with `logit <= 0`: the in-sample winner at or below the
    out-of-sample median.
    """
    returns = np.asarray(returns, dtype=float)
    if returns.ndim != 2 or returns.shape[1] < 2:
        raise ValueError(f"returns must be [bars, strategies >= 2], got shape {returns.shape}")
    if n_blocks < 2 or n_blocks % 2:
        raise ValueError(f"n_blocks must be even and >= 2, got {n_blocks}")
    if returns.shape[0] < 2 * n_blocks:
        raise ValueError(f"need at least {2 * n_blocks} bars for {n_blocks} blocks")
    blocks = np.array_split(np.arange(returns.shape[0]), n_blocks)
    n = returns.shape[1]
    overfit = splits = 0
    for chosen in itertools.combinations(range(n_blocks), n_blocks // 2):
        inside = np.concatenate([blocks[i] for i in chosen])
        outside = np.concatenate([blocks[i] for i in range(n_blocks) if i not in chosen])
        best = int(np.argmax(_sharpe_columns(returns[inside])))
        out_of_sample = _sharpe_columns(returns[outside])
        rank = 1 + int(np.sum(out_of_sample < out_of_sample[best]))
        w = rank / (n + 1)
        overfit += math.log(w / (1 - w)) <= 0
        splits += 1
    return overfit / splits


def validation_score(metrics: Mapping[str, Any], select_by: SelectBy) -> tuple[float, float]:
    """(score, one standard error) of a validation pass's `metrics` (`compute_metrics`' keys):
    the annualised Sharpe ratio with ``1 / sqrt(years)``, or with "growth" the annualised log
    growth ``log(1 + cagr)`` with ``volatility / sqrt(years)``. NaN where undefined: a Sharpe
    ratio of an account that never moved, a growth of one that was ruined, no years."""
    years = _float(metrics.get("years"))
    root = math.sqrt(years) if years > 0 else math.nan
    if select_by == "sharpe":
        return _float(metrics.get("sharpe")), 1.0 / root
    cagr = _float(metrics.get("cagr_pct")) / 100.0
    growth = math.log1p(cagr) if cagr > -1.0 else math.nan
    return growth, _float(metrics.get("volatility_ann_pct")) / 100.0 / root


SCORE_NAMES = {"sharpe": "Sharpe", "growth": "log growth"}  # by `train.select_by`


def describe_score(score: float, select_by: SelectBy) -> str:
    """A score as a person reads it: "Sharpe +1.72", or "log growth +0.336 a year"."""
    if select_by == "sharpe":
        return f"Sharpe {score:+.2f}"
    return f"log growth {score:+.3f} a year"


def describe_best_pass(score: float | None, timesteps: int | None, select_by: SelectBy) -> str:
    """A contender's best validation pass as the training log lists it: "Sharpe +1.72 at 60,000
    timesteps", or "no finite validation Sharpe" where `score` is None or not finite (where a
    contest's record has no `timesteps` either: the contender had no finite pass)."""
    if score is None or not math.isfinite(score):
        return f"no finite validation {SCORE_NAMES[select_by]}"
    return f"{describe_score(score, select_by)} at {timesteps:,} timesteps"


def pass_score(entry: Mapping[str, Any]) -> float | None:
    """The score `entry`, a pass of a validation history, was ranked by: its ``score``
    (`validation_score`), or its Sharpe ratio in a history written before scores were; None
    when not finite."""
    value = entry.get("score", entry.get("sharpe"))
    return float(value) if value is not None and math.isfinite(value) else None


def best_pass(history: Sequence[Mapping[str, Any]]) -> int | None:
    """The index of the pass with the highest finite score (`pass_score`; the first of equals):
    the pass whose model `validate` kept as the best. None when no pass has a finite score."""
    best: int | None = None
    best_score = -math.inf
    for index, entry in enumerate(history):
        score = pass_score(entry)
        if score is not None and (best is None or score > best_score):
            best, best_score = index, score
    return best


def best_score(history: Sequence[Mapping[str, Any]]) -> float:
    """The score of `history`'s best pass (`best_pass`); -inf when no pass has a finite one."""
    return max((s for entry in history if (s := pass_score(entry)) is not None), default=-math.inf)


def _float(value: Any) -> float:
    """`value` as a float; NaN for None."""
    return math.nan if value is None else float(value)
