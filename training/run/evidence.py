"""What the training bars show a policy could learn, as p-values: the contest's evidence.

A trained policy is worth shipping over holding only where the training bars hold something a
policy can act on. Two tests read them, each for the lesson of one head:

- **momentum** (`momentum_evidence`): whether the bars' momentum features predict the next
  decision's return, the joint test of the direction teacher (`training.run.teacher`). Trend
  regimes and mean reversion pass it; a random walk, or a turbulence series whose drift is the
  same in calm and turbulent spells, rarely does.
- **tail** (`tail_evidence`): whether extreme moves against the position a stop guards are more
  common than extreme moves of the other sign, a sign test of the moves beyond `TAIL_Z` robust
  standard deviations of the `TAIL_WINDOW` returns before them. Under any distribution
  symmetric about zero the signs of the extremes are fair coins; crashes make the left tail
  heavier, and that is where a stop below a long position protects (the risk head's lesson),
  with no trend to see. With shorts allowed a stop guards either side, and the test is
  two-sided.

On the learning benchmark's training ranges (seeds 0-199 of each kind; benchmarks/RESULTS.md,
twenty-eighth round) the tail test is below 0.05 on every crash-risk series and never below
0.1 on a random walk, a trend or a mean-reversion series (Gaussian noise: no extremes to count),
and below 0.1 on 12% of turbulence series, about its level: their extremes, at the switches
into turbulent spells, are of either sign.

`Evidence` carries both; `Evidence.shows_structure` is what `train.hold_evidence` asks
(`training.run.challenger`): holding is the prior where no test finds structure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from envs import MarketData
from envs.core import TradingCore
from envs.features import VOLATILITY_FLOOR
from training.config import RunConfig
from training.run.teacher import momentum_teacher

TAIL_Z = 5.0  # robust standard deviations beyond which a move counts as extreme
TAIL_WINDOW = 64  # returns before each bar that set its scale: the features' volatility window
MAD_PER_SD = 0.6745  # median absolute deviation of a normal, in standard deviations


@dataclass(frozen=True)
class Evidence:
    """The p-values of the training bars' structure; None where a test cannot be measured (no
    momentum features, too few bars)."""

    momentum: float | None  # momentum predicts the next decision's return (`momentum_evidence`)
    tail: float | None  # the side a stop guards has the heavier tail (`tail_evidence`)

    def shows_structure(self, level: float) -> bool:
        """Whether any test finds structure at p below `level`."""
        return any(p is not None and p < level for p in (self.momentum, self.tail))


def momentum_evidence(cfg: RunConfig, ranges: Sequence[tuple[MarketData, range]]) -> float | None:
    """The p-value at which the momentum of the training `ranges` ((market, bars) pairs, the
    run's real training ranges) predicts the next decision's return: the joint test of the
    direction teacher `cfg` would fit on them (`training.run.teacher.momentum_teacher`), whether
    or not the run has one. None where no teacher can be fitted (no momentum features in
    `cfg.env`, too few bars)."""
    teacher = momentum_teacher(TradingCore.stacked(ranges, cfg.env), len(ranges), cfg.env)
    return None if teacher is None else teacher.p_value


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


def binomial_upper_tail(k: int, n: int) -> float:
    """P(X >= k) for X ~ Binomial(n, 1/2), exactly."""
    return sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n


def training_evidence(cfg: RunConfig, ranges: Sequence[tuple[MarketData, range]]) -> Evidence:
    """Both tests on the training `ranges` of a run of `cfg`."""
    return Evidence(momentum_evidence(cfg, ranges), tail_evidence(ranges, cfg.env.long_only))
