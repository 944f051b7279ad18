"""Wild bootstraps of the contest's tests: p-values read against sign-flipped copies of the bars.

An asymptotic null (the normal for a variance ratio's z, the chi-square for a Wald statistic)
has too thin a tail where the bars' volatility moves in persistent regimes and the statistic
sums thousands of overlapping returns: below 0.01 it passes on noise above its level
(benchmarks/RESULTS.md, fifty-seventh and fifty-eighth rounds). Kim's (2006) wild bootstrap
reads the same statistic on `WILD_DRAWS` copies of the bars with each bar's move given a random
sign. A copy keeps every move's size, so the volatility's path, the volatility-scaled features'
denominators and the budget's sizing exactly, and loses any dependence of a move on the moves
before it. The p-value is exact for moves symmetric about zero given their sizes, and never
below ``1 / (WILD_DRAWS + 1)``; the signs come from `WILD_SEED`, so the same bars always read
the same p-value.

`wild_p_value` is the draw loop every such test shares; `momentum_wald_z` is the momentum test's
statistic on sign-flipped copies (`training.run.evidence.momentum_evidence` with
`train.momentum_null` "wild"). The persistence test's statistic lives with it in
`training.run.evidence`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from envs import MarketData
from envs.config import EnvConfig
from envs.features import log_moves, rolling_volatility, scaled_momentum, volatility_scale

# Draws, so that p-values reach 1 / 20,001, below the contest's smallest level (1e-4)
WILD_DRAWS = 20_000
WILD_SEED = 0
DRAWS_PER_BATCH = 500  # copies drawn at once where the bars are few
# Copies reaching the observed statistic after which the momentum test stops drawing
# (`wild_p_value`'s `enough`): its statistic costs ten times the persistence test's a copy
MOMENTUM_ENOUGH = 500


def draws_per_batch(bars: int, elements: int = 5_000_000) -> int:
    """Copies of `bars` bars a batch holds so that a float64 array of them stays within
    `elements` (about 40 MB), at most `DRAWS_PER_BATCH`."""
    return max(1, min(DRAWS_PER_BATCH, elements // max(1, bars)))


def wild_p_value(
    observed: float,
    statistic: Callable[[list[np.ndarray]], np.ndarray],
    sizes: Sequence[int],
    per_batch: int = DRAWS_PER_BATCH,
    enough: int | None = None,
) -> float:
    """The share of `WILD_DRAWS` sign-flipped copies whose `statistic` reaches `observed`, counting
    the bars themselves as one: ``(1 + beaten) / (WILD_DRAWS + 1)``. `statistic` maps one sign
    matrix per part, [B, sizes[i]] of +-1 (int8), to the B copies' statistics [B]; the copies
    are drawn `per_batch` at a time, a part's signs in order within each batch (so the same
    bars and batch always read the same p-value).

    With `enough`, the draws stop after the first batch by which `enough` copies have reached
    `observed`, and the p-value is their share of the copies drawn (Besag and Clifford's 1991
    sequential p-value, valid at every level): a p-value far above the contest's levels is
    read in a few batches, one near them as precisely as `enough` copies allow (`enough` 500:
    within about 5% of itself), one below ``enough / WILD_DRAWS`` from every draw."""
    rng = np.random.default_rng(WILD_SEED)
    beaten = 0
    for first in range(0, WILD_DRAWS, per_batch):
        draws = min(per_batch, WILD_DRAWS - first)
        signs = [rng.integers(0, 2, size=(draws, n), dtype=np.int8) * 2 - 1 for n in sizes]
        beaten += int(np.sum(statistic(signs) >= observed))
        if enough is not None and beaten >= enough:
            return beaten / (first + draws)
    return (1 + beaten) / (WILD_DRAWS + 1)


@dataclass(frozen=True)
class MomentumRange:
    """What the momentum test reads of one training range, as bar moves a sign flip acts on:
    the bars from the first whose move a decision bar's momentum sums to the last fill."""

    close_moves: np.ndarray  # [L] log(c_t / c_{t-1}) of the segment's bars
    gaps: np.ndarray  # [L] log(o_t / c_{t-1}), the part of each move before its open
    volatility: np.ndarray  # [L] vol_t of the features (a function of the moves' sizes)
    scale: np.ndarray  # [L] the budget's sizing of a position decided on each bar (sizes too)
    decisions: np.ndarray  # [n] segment indices of the regression's decision bars

    @classmethod
    def of(
        cls, market: MarketData, bars: range, env: EnvConfig, bars_per_year: float
    ) -> MomentumRange | None:
        """The segment of `market` the momentum test reads for its training `bars` under `env`
        (as `training.run.teacher.LinearTeacher.fit` reads it: decision bars from the first
        whose window fits to the last whose position, held `env.decision_interval` bars, exits
        inside the range), sized with `bars_per_year` (the stacked core's,
        `TradingCore.bars_per_year`); None where no decision bar is left."""
        horizon = env.decision_interval
        first = max(bars.start, env.window - 1)
        last_fill = bars.stop - 1
        if first >= last_fill - horizon:
            return None
        start = max(0, first - max(env.momentum_horizons) + 1)
        moves = log_moves(market)  # [T, 4]
        volatility = rolling_volatility(moves[:, 0], env.volume_window)  # [T]
        scale = volatility_scale(
            market, env.volatility_target_window, bars_per_year, env.volatility_target
        )  # [T]
        segment = slice(start, last_fill + 1)
        return cls(
            moves[segment, 0],
            moves[segment, 1],
            volatility[segment],
            scale[segment],
            np.arange(first, last_fill - horizon) - start,
        )

    @property
    def n(self) -> int:
        """Bars of the segment, the length of its sign vector."""
        return len(self.close_moves)

    def regression(
        self, signs: np.ndarray, horizons: Sequence[int], horizon: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The momentum test's design [B, n, 1 + H] (a constant and `momentum_<h>` of each of
        `horizons` at the decision bars) and targets [B, n] (the sized long's log growth over
        the `horizon` bars after the next open) of the copies whose bar moves carry `signs`
        [B, L] (all ones: the bars themselves)."""
        flipped = signs * self.close_moves  # [B, L]
        design = np.ones((len(signs), len(self.decisions), 1 + len(horizons)))  # [B, n, 1 + H]
        for column, h in enumerate(horizons, start=1):
            design[:, :, column] = scaled_momentum(flipped, self.volatility, h)[:, self.decisions]
        gaps = signs * self.gaps  # [B, L]
        bodies = flipped - gaps  # [B, L] log(c_t / o_t)
        body_sum = np.cumsum(bodies, axis=1)  # [B, L]
        gap_sum = np.cumsum(gaps, axis=1)  # [B, L]
        d = self.decisions  # the fill at d + 1, the exit at d + 1 + horizon
        moved = (body_sum[:, d + horizon] - body_sum[:, d]) + (
            gap_sum[:, d + 1 + horizon] - gap_sum[:, d + 1]
        )  # [B, n] log(o_{d+1+h} / o_{d+1})
        targets = np.log1p(self.scale[d] * np.expm1(moved))  # [B, n]
        return design, targets


def momentum_wald_z(
    parts: Sequence[MomentumRange],
    signs: list[np.ndarray],
    horizons: Sequence[int],
    horizon: int,
    lag_weights: np.ndarray,
) -> np.ndarray:
    """[B] the momentum test's statistic on copies of the `parts` whose bar moves carry `signs`
    (one [B, L] per part): the joint Wald statistic of the momentum coefficients of the pooled
    least-squares fit, its covariance summed within each part over the lags `lag_weights`
    weighs (`training.run.teacher.LinearTeacher.fit`), as the Wilson-Hilferty z of its
    chi-square tail (`training.run.teacher._wald_p_value`: directions of non-positive variance
    left out, so copies of different ranks compare on one scale)."""
    fits = [part.regression(s, horizons, horizon) for part, s in zip(parts, signs, strict=True)]
    gram = sum(x.transpose(0, 2, 1) @ x for x, _ in fits)  # [B, K, K]
    moment = sum(x.transpose(0, 2, 1) @ y[:, :, None] for x, y in fits)  # [B, K, 1]
    inverse = np.linalg.pinv(gram)  # [B, K, K]
    coef = inverse @ moment  # [B, K, 1]
    meat = np.zeros_like(gram)  # [B, K, K]
    for x, y in fits:
        scores = x * (y[:, :, None] - x @ coef)  # [B, n, K]
        across = scores.transpose(0, 2, 1)  # [B, K, n]
        meat += across @ scores
        for lag, weight in enumerate(lag_weights[: scores.shape[1] - 1], start=1):
            cross = across[:, :, lag:] @ scores[:, :-lag]  # [B, K, K]
            meat += weight * (cross + cross.transpose(0, 2, 1))
    coef = coef[:, :, 0]  # [B, K]
    covariance = (inverse @ meat @ inverse)[:, 1:, 1:]  # [B, H, H]
    values, vectors = np.linalg.eigh(covariance)  # [B, H], [B, H, H]
    kept = values > 1e-9 * np.maximum(values.max(axis=1, keepdims=True), 1e-300)  # [B, H]
    projected = np.einsum("bij,bi->bj", vectors, coef[:, 1:])  # [B, H]
    statistic = np.where(kept, projected**2 / np.where(kept, values, 1.0), 0.0).sum(axis=1)
    dof = np.maximum(kept.sum(axis=1), 1)  # [B]
    a = 2.0 / (9.0 * dof)
    z = (np.cbrt(statistic / dof) - (1.0 - a)) / np.sqrt(a)  # [B]
    return np.where(kept.any(axis=1), z, -math.inf)
