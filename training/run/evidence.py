"""What the training bars show a policy could learn, as p-values: the contest's evidence.

A trained policy is worth shipping over holding only where the training bars hold something a
policy can act on. Three tests read them, each for a lesson a head could learn:

- **momentum** (`momentum_evidence`): whether the bars' momentum features predict the next
  decision's return, the joint test of the direction teacher (`training.run.teacher`) with its
  covariance counting the whole overlap of the decisions' returns (`overlap_weights`), so that
  on bars without structure it passes about as often as its level says. The teacher's own
  weights (Bartlett's) undercount the overlap and pass on noise at about twice their level.
  Its passes on noise lean to reversal (the momentum coefficients summing below zero): a
  regression on a persistent sum of the returns it predicts is biased that way in a finite
  sample (Stambaugh 1999). A contest may therefore read a reversal only below a stricter
  level of its own (`reversal_level`, `train.evidence_reversal`). Its Wald statistic is read
  against the chi-square, or with `train.momentum_null` "wild" against the same statistic on
  sign-flipped copies of the bars (`training.run.wild_bootstrap`), which keep the volatility's
  path, the features' scale and the budget's sizing, and so the finite-sample bias too.
- **tail** (`tail_evidence`): whether extreme moves against the position a stop guards are more
  common than extreme moves of the other sign, a sign test of the moves beyond `TAIL_Z` robust
  standard deviations of the `TAIL_WINDOW` returns before them. Under any distribution
  symmetric about zero the signs of the extremes are fair coins; crashes make the left tail
  heavier, and that is where a stop below a long position protects (the risk head's lesson),
  with no trend to see. With shorts allowed a stop guards either side, and the test is
  two-sided. Volatility regimes with one drift (the benchmark's turbulence series) pass it only
  by chance: their extremes, at the switches into turbulent spells, are of either sign.
- **persistence** (`persistence_evidence`): whether the returns persist over the longest
  momentum horizon, the variance ratio of Lo and MacKinlay (1988): sums of returns over the
  horizon vary more than the horizon's single returns would. A trend regime's returns persist
  over its spells whether or not the momentum features, read one decision ahead, predict them
  beyond the momentum test's noise. Its z is read against the asymptotic normal, whose tail is
  too thin (below 0.01 it passes on noise above its level, most where volatility moves in
  regimes), or with `train.persistence_null` "wild" against a sign-flip bootstrap of the bars'
  own returns, which holds its level.

A trend's regimes recur through the whole training range; bars with no structure that pass a
test by chance rarely show it in both halves. `halves_evidence` runs the two tests that find
returns predictable (momentum and persistence) on each half of the training ranges;
`train.challenger_prior_halves` asks it.

`Evidence` carries the three, and the halves' where they were read;
`Evidence.shows_structure` is what `train.hold_evidence` asks (`training.run.challenger`):
holding is the prior where no test finds structure. At 0.1 each test finds structure on bars
with none about as often as the level says (the persistence test's normal null passes too often
only further out), so the three together find some more often;
`train.hold_evidence_per: family` shares the level among them (`Evidence.level_per_test`). The
volatility level needs no test of its own: holding is sized by the same volatility budget as the
policy.

How often each test passes on each kind of the learning benchmark's series, at each level read,
is measured in benchmarks/RESULTS.md (the twenty-eighth, twenty-ninth, thirty-sixth and
forty-sixth rounds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import get_args

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from envs import MarketData
from envs.core import TradingCore
from envs.features import VOLATILITY_FLOOR
from training.config import EvidenceNull, EvidencePer, PredictingTest, RunConfig
from training.run.data import decisions_in
from training.run.teacher import momentum_teacher, overlap_weights
from training.run.wild_bootstrap import (
    MOMENTUM_ENOUGH,
    MomentumRange,
    draws_per_batch,
    momentum_wald_z,
    wild_p_value,
)

TAIL_Z = 5.0  # robust standard deviations beyond which a move counts as extreme
TAIL_WINDOW = 64  # returns before each bar that set its scale: the features' volatility window
MAD_PER_SD = 0.6745  # median absolute deviation of a normal, in standard deviations


# The tests of the training bars (`Evidence` fields), and those that find past returns
# predicting later ones (a direction head's lesson; the tail test's is a stop's)
TESTS = ("momentum", "tail", "persistence")
PREDICTING_TESTS: tuple[str, ...] = get_args(PredictingTest)  # ("momentum", "persistence")


@dataclass(frozen=True)
class Evidence:
    """The p-values of the training bars' structure; None where a test cannot be measured (no
    momentum features, too few bars)."""

    momentum: float | None  # momentum predicts the next decision's return (`momentum_evidence`)
    tail: float | None  # the side a stop guards has the heavier tail (`tail_evidence`)
    persistence: float | None = None  # returns persist over a horizon (`persistence_evidence`)
    # Each half of the training bars finds past returns predicting later ones (`halves_evidence`;
    # a reading of the first two tests, not a test of its own); None where not read
    halves: float | None = None
    # The momentum test's p-value where its fit predicts reversal and the contest's reversal
    # level (`train.evidence_reversal`) discounted it: `momentum` then reads 1; None elsewhere
    momentum_reversal: float | None = None

    def level_per_test(self, level: float, per: EvidencePer) -> float:
        """The level each test is read at where `level` is `per` "test" (itself) or `per`
        "family" (shared equally among the tests measured: Bonferroni's correction, so that on
        bars with no structure the tests together find some at most `level` of the time, where
        each at `level` would find some up to once per test)."""
        measured = sum(getattr(self, test) is not None for test in TESTS)
        return level / measured if per == "family" and measured else level

    def below(self, level: float, tail_level: float | None = None) -> tuple[str, ...]:
        """The tests (`TESTS`, in their order) that find structure at p below `level`, the tail
        test below `tail_level` where one is given."""
        levels = {test: level for test in TESTS}
        if tail_level is not None:
            levels["tail"] = tail_level
        return tuple(
            test for test in TESTS if (p := getattr(self, test)) is not None and p < levels[test]
        )

    def shows_structure(self, level: float, tail_level: float | None = None) -> bool:
        """Whether any test finds structure at p below `level` (the tail test below
        `tail_level`, where given)."""
        return bool(self.below(level, tail_level))

    def predicts_returns(self, level: float, tests: Sequence[str] = PREDICTING_TESTS) -> bool:
        """Whether any of `tests` (of `PREDICTING_TESTS`: the momentum and the persistence test)
        finds at p below `level` that past returns predict later ones (the structure a direction
        head can learn; the tail test's is a stop's)."""
        return any(test in tests for test in self.below(level))

    def predicts_in_halves(self, level: float) -> bool:
        """Whether each half of the training bars finds past returns predicting later ones at p
        below `level` (`halves_evidence`); False where the halves were not read or cannot be
        measured."""
        return self.halves is not None and self.halves < level


def momentum_evidence(
    cfg: RunConfig,
    ranges: Sequence[tuple[MarketData, range]],
    reversal_level: float | None = None,
) -> float | None:
    """The p-value at which the momentum of the training `ranges` ((market, bars) pairs, the
    run's real training ranges) predicts the next decision's return: the joint test of the
    direction teacher `cfg` would fit on them (`training.run.teacher.momentum_teacher`), whether
    or not the run has one, with the covariance weighted over the whole overlap of the
    decisions' returns (`overlap_weights`), so that its size is its level. With
    `reversal_level` (`train.evidence_reversal`) a fit that predicts reversal
    (`LinearTeacher.reverses`) counts only below it, and reads 1 (no evidence at any level)
    where it is not. None where no teacher can be fitted (no momentum features in `cfg.env`,
    too few bars)."""
    return _momentum_reading(cfg, ranges, reversal_level)[0]


def _momentum_reading(
    cfg: RunConfig, ranges: Sequence[tuple[MarketData, range]], reversal_level: float | None
) -> tuple[float | None, float | None]:
    """(`momentum_evidence`, the p-value of the fit where `reversal_level` discounted it as a
    reversal, else None)."""
    core = TradingCore.stacked(ranges, cfg.env)
    fit = momentum_teacher(core, len(ranges), cfg.env, lag_weights=overlap_weights)
    if fit is None:
        return None, None
    p_value = fit.p_value
    if cfg.train.momentum_null == "wild":
        p_value = _momentum_wild_p_value(cfg, ranges, core.bars_per_year)
    if reversal_level is not None and fit.reverses and p_value >= reversal_level:
        return 1.0, p_value
    return p_value, None


def _momentum_wild_p_value(
    cfg: RunConfig, ranges: Sequence[tuple[MarketData, range]], bars_per_year: float
) -> float:
    """The momentum test's p-value against the wild bootstrap (`momentum_evidence`): its
    statistic on the training `ranges` against the same on sign-flipped copies of their bars
    (`training.run.wild_bootstrap.momentum_wald_z`)."""
    parts = [
        part
        for market, bars in ranges
        if (part := MomentumRange.of(market, bars, cfg.env, bars_per_year)) is not None
    ]
    horizons, horizon = cfg.env.momentum_horizons, cfg.env.decision_interval
    weights = overlap_weights(horizon)

    def statistic(signs: list[np.ndarray]) -> np.ndarray:  # [B]
        return momentum_wald_z(parts, signs, horizons, horizon, weights)

    observed = statistic([np.ones((1, part.n), dtype=np.int8) for part in parts])[0]
    sizes = [part.n for part in parts]
    batch = draws_per_batch(sum(sizes))
    return wild_p_value(float(observed), statistic, sizes, batch, MOMENTUM_ENOUGH)


def tail_evidence(ranges: Sequence[tuple[MarketData, range]], long_only: bool) -> float | None:
    """The p-value of the sign test that the training `ranges`' extreme close-to-close log
    returns (beyond `TAIL_Z` times the median absolute return of the `TAIL_WINDOW` returns
    before each, over `MAD_PER_SD`) fall more often than they rise; with `long_only` False, that
    either sign is the more common (two-sided). 1 where no move is extreme; None where no range
    has more than `TAIL_WINDOW` returns."""
    falls = rises = 0
    measured = False
    for market, bars in ranges:
        returns = np.diff(np.log(market.close[bars.start : bars.stop]))  # [n - 1]
        if len(returns) <= TAIL_WINDOW:
            continue
        measured = True
        before = sliding_window_view(returns[:-1], TAIL_WINDOW)  # [n - 1 - W, W]
        scale = np.median(np.abs(before), axis=1) / MAD_PER_SD  # [n - 1 - W]
        z = returns[TAIL_WINDOW:] / np.maximum(scale, VOLATILITY_FLOOR)  # [n - 1 - W]
        falls += int(np.sum(z < -TAIL_Z))
        rises += int(np.sum(z > TAIL_Z))
    if not measured:
        return None
    p_falls = binomial_upper_tail(falls, falls + rises)
    if long_only:
        return p_falls
    return min(1.0, 2.0 * min(p_falls, binomial_upper_tail(rises, falls + rises)))


def persistence_evidence(
    ranges: Sequence[tuple[MarketData, range]], horizon: int, null: EvidenceNull = "normal"
) -> float | None:
    """The p-value of the variance-ratio test that the training `ranges`' close-to-close log
    returns persist over `horizon` bars: that their sums over `horizon` bars vary more than
    `horizon` single returns would, ``VR = var(sum of q returns) / (q var(one return)) > 1``
    (one-sided; Lo and MacKinlay 1988, its heteroscedasticity-robust z, each range's returns
    taken about their own mean so a drift is no persistence). The ranges' z are pooled,
    weighted by the square root of their returns (Stouffer).

    `null` says what the pooled z is read against. "normal" is Lo and MacKinlay's asymptotic
    normal: on bars whose volatility moves in persistent regimes (the benchmark's turbulence
    series) its tail is too thin, and the test passes there far above its level (measured in
    benchmarks/RESULTS.md, fifty-seventh round). "wild" is Kim's (2006) wild bootstrap: the same
    z on copies of the returns with each return's sign flipped at random
    (`training.run.wild_bootstrap.wild_p_value`), which keeps every return's size, and so the
    volatility's path, and takes any persistence away: exact for returns symmetric about their
    mean given their sizes, and never below ``1 / (draws + 1)``.

    None where no range has more than 2 `horizon` returns that move, or `horizon` is below 2
    (nothing to sum)."""
    parts = [
        part
        for market, bars in ranges
        if (part := _variance_ratio_parts(market.close[bars.start : bars.stop], horizon))
    ]
    if not parts:
        return None
    weights = sum(part.n for part in parts)
    z = sum(math.sqrt(part.n) * part.z(part.returns[None, :])[0] for part in parts)
    z /= math.sqrt(weights)
    if null == "normal":
        return 0.5 * math.erfc(z / math.sqrt(2.0))  # P(Z >= z)

    def pooled(signs: list[np.ndarray]) -> np.ndarray:  # [B] the copies' pooled z
        total = np.zeros(len(signs[0]))  # [B]
        for part, flips in zip(parts, signs, strict=True):
            total += math.sqrt(part.n) * part.z(flips * part.returns)
        return total / math.sqrt(weights)

    return wild_p_value(z, pooled, [part.n for part in parts])


@dataclass(frozen=True)
class _VarianceRatio:
    """One range's returns about their mean and the parts of Lo and MacKinlay's robust z that
    depend on their sizes alone (so a sign-flipped copy shares them)."""

    returns: np.ndarray  # [n] log returns less their mean
    horizon: int  # q
    total: float  # sum of squared returns
    theta: float  # the robust variance of the ratio, times n

    @property
    def n(self) -> int:
        """Returns in the range."""
        return len(self.returns)

    def z(self, returns: np.ndarray) -> np.ndarray:
        """[B] the robust z of each row of `returns` [B, n] (this range's, or copies sharing
        their sizes)."""
        q, n = self.horizon, self.n
        cumulative = np.concatenate([np.zeros((len(returns), 1)), np.cumsum(returns, axis=1)], 1)
        sums = cumulative[:, q:] - cumulative[:, :-q]  # [B, n - q + 1] overlapping q-bar sums
        ratio = np.einsum("bi,bi->b", sums, sums) / (sums.shape[1] * q) / (self.total / n)  # [B]
        return (ratio - 1.0) * math.sqrt(n / self.theta)


def _variance_ratio_parts(close: np.ndarray, horizon: int) -> _VarianceRatio | None:
    """The variance ratio's parts for the closes `close` over `horizon` bars; None where there
    are no more than 2 `horizon` returns, they do not move, or `horizon` is below 2."""
    returns = np.diff(np.log(close))  # [n]
    n = len(returns)
    if n <= 2 * horizon or horizon < 2:
        return None
    r = returns - returns.mean()  # [n]
    squares = r * r  # [n]
    total = float(squares.sum())
    if total <= 0.0:
        return None
    lags = np.arange(1, horizon)  # [q - 1]
    products = np.array([squares[j:] @ squares[:-j] for j in lags])  # [q - 1]
    theta = float(np.sum((2.0 * (horizon - lags) / horizon) ** 2 * n * products / total**2))
    return _VarianceRatio(r, horizon, total, theta)


def halves_evidence(
    cfg: RunConfig,
    ranges: Sequence[tuple[MarketData, range]],
    reversal_level: float | None = None,
) -> float | None:
    """The p-value at which each half of the training `ranges` (every range cut at its middle
    bar, the first halves read together and the second halves together) finds past returns
    predicting later ones: the larger of the two halves' smallest momentum or persistence
    p-value (`momentum_evidence`, `persistence_evidence` over the longest momentum horizon), so
    that below a level both halves show it. None where either half has neither test measurable
    (no momentum features, too few bars: a half where no decision fits a window is left out).
    `reversal_level` reads the momentum test as `momentum_evidence` does."""
    horizons = cfg.env.momentum_horizons
    if not horizons:
        return None
    smallest = []
    for half in (0, 1):
        part = [(market, _half(bars, half)) for market, bars in ranges]
        part = [(market, bars) for market, bars in part if decisions_in(bars, cfg.env.window) > 0]
        momentum = momentum_evidence(cfg, part, reversal_level) if part else None
        persistence = persistence_evidence(part, max(horizons), cfg.train.persistence_null)
        measured = [p for p in (momentum, persistence) if p is not None]
        if not measured:
            return None
        smallest.append(min(measured))
    return max(smallest)


def _half(bars: range, half: int) -> range:
    """The first (`half` 0) or the second (1) half of `bars`, cut at its middle bar."""
    middle = bars.start + len(bars) // 2
    return range(bars.start, middle) if half == 0 else range(middle, bars.stop)


def binomial_upper_tail(k: int, n: int) -> float:
    """P(X >= k) for X ~ Binomial(n, 1/2), exactly."""
    return sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n


def training_evidence(
    cfg: RunConfig,
    ranges: Sequence[tuple[MarketData, range]],
    halves: bool = False,
    reversal_level: float | None = None,
) -> Evidence:
    """Every test on the training `ranges` of a run of `cfg`: the persistence's over the
    longest horizon of `cfg.env.momentum_horizons` (None without momentum features); with
    `halves`, the halves' reading too (`halves_evidence`; else None). `reversal_level` reads the
    momentum test as `momentum_evidence` does, and the evidence keeps the p-value it
    discounted (`Evidence.momentum_reversal`)."""
    horizons = cfg.env.momentum_horizons
    momentum, reversal = _momentum_reading(cfg, ranges, reversal_level)
    return Evidence(
        momentum,
        tail_evidence(ranges, cfg.env.long_only),
        persistence_evidence(ranges, max(horizons), cfg.train.persistence_null)
        if horizons
        else None,
        halves_evidence(cfg, ranges, reversal_level) if halves else None,
        reversal,
    )
