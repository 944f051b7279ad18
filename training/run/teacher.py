"""A linear teacher for the direction head: what the training bars establish, and nothing more.

The every-direction loss (`training.run.outcomes`) shows the direction head what every level
paid on each state of a rollout. One step's outcome is mostly noise, and a head taught it state
by state trades the noise of a random walk. A least-squares fit of the outcomes per rollout,
gated by an F-test, fitted it all the same: the outcomes repeat across the rollout's resampled
copies and their variance moves with the features, so the test passed far above its level, and
the fit's own spread, scaled to one, turned a faint fit into confident targets.

`LinearTeacher` asks the training bars once, before training, and teaches only what they
establish. It regresses the log growth a long position sized by the env's volatility budget
would have earned from each decision bar's fill to the next decision's,
``y_t = log(1 + scale_t * (open_{t+1+h} / open_{t+1} - 1))`` (h the decision interval: the
position held in units between decisions, as the env holds it), on that bar's momentum features
(`momentum_columns` of the last row of the observation window: the direction's evidence) and a
constant, over every decision bar of the real training ranges once (not the resampled copies,
which repeat them). The coefficients' covariance is heteroscedasticity and autocorrelation
consistent, summed within each range over lags weighted by `lag_weights`: the teacher's are
Newey and West's (`bartlett_weights`, h lags). Two targets h bars apart share no return, but
those closer share up to h - 1 of them, and Bartlett's weights, falling from 1, count only about
three quarters of that overlap, so on noise the test passes at about twice its level.
`overlap_weights` (Hansen and Hodrick's, 1 on each of the h - 1 overlapping lags) count all of
it and hold the test's size; the contest's evidence reads the test with them
(`training.run.evidence`). The teacher keeps Bartlett's, for which its level and `TEACHER_Z`
were chosen.

It teaches only when the features predict beyond chance, by the joint Wald test of their
coefficients at `TEACHER_LEVEL`; then a state is taught the level with the largest side (long)
where the predicted advantage of a long position over flat exceeds `z` standard errors of that
prediction, the level with the smallest side (flat, or short when shorts are allowed) where it
falls below `-z` of them, and nothing otherwise. The constant, the return predicted where the
features are zero, is part of the prediction only when it is itself established, beyond `z` of
its standard errors (`teaches_drift`): a training range that happened to rise or fall by chance
would otherwise tilt every lesson its way, long or flat whatever the features say, while a drift
the bars do establish is what a long position earns in every state. A drift alone still teaches
nothing: the joint test is on the features' coefficients, and holding is PPO's to learn. Only
the momentum features are read: on every market feature the teacher also taught the volatility
features' power over a sized return (the variance drag) as a direction.

`DirectionTeacher` applies it after each PPO update: a cross-entropy of the direction head towards
each taught state's level (`training.run.outcomes.RolloutPass`), weighted by
`train.direction_teacher`; the share of the rollout's states taught is logged as
`train/direction_teacher_taught`. Costs are not in the targets: the teacher says which way the
market leans, and PPO, which pays them, how often to act on it.

What each of these choices did to the learning benchmark is measured in benchmarks/RESULTS.md
(the thirteenth to sixteenth and twenty-ninth rounds: C76-C83, C93-C99, C108).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from envs.config import EnvConfig
from envs.core import TradingCore
from envs.features import feature_names
from training.run.outcomes import RolloutPass

TEACHER_Z = 2.326  # standard errors a prediction must clear: one-sided 1% of a normal
# The joint test's nominal level under Bartlett's weights, which undercount the overlap of the
# targets (module doc), so the test passes on noise more often than its level says: on the
# learning benchmark's 400 structureless training ranges (random walk and turbulence, seeds
# 0-199) at 1% nominal on 5.0% of them, at 0.1% on 0.75% (benchmarks/RESULTS.md, C99).
TEACHER_LEVEL = 0.001
LagWeights = Callable[[int], np.ndarray]  # a horizon -> the weights of the covariance's lags 1..


def bartlett_weights(horizon: int) -> np.ndarray:
    """Newey and West's weights of the covariance's lags 1..`horizon` [horizon]:
    ``1 - j / (horizon + 1)`` at lag j. Always positive semi-definite; they undercount the
    overlap of `horizon`-bar returns (module doc)."""
    lags = np.arange(1, horizon + 1)  # [h]
    return 1.0 - lags / (horizon + 1)


def overlap_weights(horizon: int) -> np.ndarray:
    """Hansen and Hodrick's weights of the covariance's lags 1..`horizon` - 1 [horizon - 1]: 1 on
    each lag over which two `horizon`-bar returns share a bar, the whole of their overlap, so a
    test of the features' coefficients holds its size where the returns are otherwise
    uncorrelated (module doc). Not guaranteed positive semi-definite: a direction of negative
    variance is left out of the test (`_wald_p_value`)."""
    return np.ones(max(horizon - 1, 0))


@dataclass(frozen=True)
class LinearTeacher:
    """The fitted teacher (module doc): coefficients [1 + F] on a constant and the F market
    features, their Newey-West covariance [1 + F, 1 + F], the p-value of the joint Wald test that
    the F market coefficients are all zero, and the z a prediction must clear."""

    coef: np.ndarray
    covariance: np.ndarray
    p_value: float = 0.0
    z: float = TEACHER_Z
    columns: tuple[int, ...] | None = None  # the market features it reads; None: all of them

    @property
    def teaches(self) -> bool:
        """Whether the market features predict beyond chance (`p_value` < `TEACHER_LEVEL`): a
        teacher that fails the test teaches nothing, since a partial lesson on noise (long on
        some states) still moves the head's other states, through the weights they share."""
        return self.p_value < TEACHER_LEVEL

    @property
    def reverses(self) -> bool:
        """Whether the fit predicts that moves reverse: its market coefficients sum below zero,
        so a rise in every feature alike predicts a fall (on momentum features, mean reversion;
        above zero, continuation)."""
        return float(np.sum(self.coef[1:])) < 0.0

    @classmethod
    def fit(
        cls,
        core: TradingCore,
        ranges: int,
        horizon: int,
        z: float = TEACHER_Z,
        columns: Sequence[int] | None = None,
        lag_weights: LagWeights = bartlett_weights,
    ) -> LinearTeacher | None:
        """The teacher of the first `ranges` ranges of `core` (the real training ranges; the
        copies that follow them repeat their bars), for decisions held `horizon` bars, on the
        market features `columns` (None: all), its covariance summed over the lags
        `lag_weights(horizon)` weighs; None when there are no such columns, or fewer than ten
        decision bars per coefficient."""
        picked = list(range(core.features.shape[1])) if columns is None else list(columns)
        if not picked:
            return None
        features, rows, targets = [], [], []
        opens = core.ohlc[:, 0]  # [T]
        for k in range(ranges):
            first, end = int(core.first_bars[k]), int(core.end_bars[k])
            bars = np.arange(first, end - horizon)  # [n] the fill and the exit inside the range
            if len(bars) == 0:
                continue
            moved = opens[bars + 1 + horizon] / opens[bars + 1] - 1.0  # [n] simple return
            features.append(core.features[bars][:, picked].astype(np.float64))  # [n, F]
            targets.append(np.log1p(core.scale[bars] * moved))  # [n] the sized long's log growth
            rows.append(len(bars))
        n_coef = len(picked) + 1
        if sum(rows) < 10 * n_coef:
            return None
        design = _with_constant(np.concatenate(features))  # [n, 1 + F]
        y = np.concatenate(targets)  # [n]
        inverse = np.linalg.pinv(design.T @ design)  # [1 + F, 1 + F]
        coef = inverse @ design.T @ y  # [1 + F]
        scores = design * (y - design @ coef)[:, None]  # [n, 1 + F]
        weights = lag_weights(horizon)  # [lags]
        meat = np.zeros((n_coef, n_coef))
        for part in np.split(scores, np.cumsum(rows)[:-1]):  # lags stay within a range
            meat += part.T @ part
            for lag, weight in enumerate(weights[: len(part) - 1], start=1):
                cross = part[lag:].T @ part[:-lag]
                meat += weight * (cross + cross.T)
        covariance = inverse @ meat @ inverse
        p_value = _wald_p_value(coef[1:], covariance[1:, 1:])
        return cls(coef, covariance, p_value, z, None if columns is None else tuple(picked))

    @property
    def teaches_drift(self) -> bool:
        """Whether the constant, the return predicted where every feature is zero (the training
        ranges' own drift), is itself established: beyond `z` of its standard errors. Only then
        is it part of the lesson (module doc)."""
        return abs(self.coef[0]) > self.z * math.sqrt(max(float(self.covariance[0, 0]), 0.0))

    def advantage(self, market: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The predicted advantage of a long position over flat [B] at states whose decision
        bars' market features are `market` [B, F], and its standard error [B]; without the
        constant unless `teaches_drift`."""
        if self.columns is not None:
            market = market[:, list(self.columns)]
        design = _with_constant(market.astype(np.float64))  # [B, 1 + F]
        if not self.teaches_drift:
            design[:, 0] = 0.0  # the features' part of the prediction alone
        variance = np.einsum("bi,ij,bj->b", design, self.covariance, design)  # [B]
        return design @ self.coef, np.sqrt(np.maximum(variance, 0.0))

    def labels(self, market: np.ndarray, sides: Sequence[int]) -> np.ndarray:
        """The direction level taught at each state [B] (int; -1: none), `sides` the sides of
        the direction levels in order (module doc)."""
        mean, error = self.advantage(market)
        labels = np.full(len(mean), -1, dtype=np.int64)
        if not self.teaches:
            return labels
        labels[mean > self.z * error] = int(np.argmax(sides))
        labels[mean < -self.z * error] = int(np.argmin(sides))
        return labels


def momentum_teacher(
    core: TradingCore,
    ranges: int,
    env: EnvConfig,
    lag_weights: LagWeights = bartlett_weights,
) -> LinearTeacher | None:
    """The teacher a run with `env` fits (`LinearTeacher.fit`): on the momentum features
    (`momentum_columns`) of `core`'s first `ranges` ranges, for decisions held
    `env.decision_interval` bars, its covariance weighted by `lag_weights`. None where
    `LinearTeacher.fit` fits none (no momentum features, too few bars). With `overlap_weights`
    its `p_value` is the contest's momentum evidence (`training.run.evidence.momentum_evidence`)."""
    columns = momentum_columns(feature_names(env.momentum_horizons))
    return LinearTeacher.fit(
        core, ranges, env.decision_interval, columns=columns, lag_weights=lag_weights
    )


def describe_teacher(teacher: LinearTeacher | None) -> str:
    """One line for the training log: whether `teacher` teaches, and why."""
    if teacher is None:
        return (
            "direction teacher: no momentum features, or too few training bars; it teaches nothing"
        )
    if not teacher.teaches:
        verdict = "it teaches nothing"
    elif teacher.teaches_drift:
        verdict = "it teaches, with the training bars' drift"
    else:
        verdict = "it teaches, without the training bars' drift (not established)"
    return (
        f"direction teacher: its features predict the next decision's return with "
        f"p = {teacher.p_value:.3g} (joint Wald test, Newey-West weights, level "
        f"{TEACHER_LEVEL:g}); {verdict}"
    )


def _wald_p_value(coef: np.ndarray, covariance: np.ndarray) -> float:
    """The p-value of the Wald test that `coef` [K] is zero given its `covariance` [K, K]:
    ``coef' C^+ coef`` against a chi-square with rank(C) degrees of freedom (directions the data
    cannot tell apart, such as a feature that never moves, are left out), its tail by the
    Wilson-Hilferty cube-root normal approximation (within a few percent of the exact tail)."""
    values, vectors = np.linalg.eigh(covariance)
    kept = values > 1e-9 * max(float(values.max()), 1e-300)
    if not kept.any():
        return 1.0
    statistic = float(((vectors[:, kept].T @ coef) ** 2 / values[kept]).sum())
    dof = int(kept.sum())
    a = 2.0 / (9.0 * dof)
    z = ((statistic / dof) ** (1.0 / 3.0) - (1.0 - a)) / math.sqrt(a)
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def momentum_columns(names: Sequence[str]) -> list[int]:
    """The columns of the features named `names` that a direction teacher reads: the
    volatility-scaled momentum (`momentum_<h>`), the direction's evidence. The volatility features
    predict a sized long's return too, through the variance drag the budget's sizing is there to
    handle; taught as a direction they cost the turbulence series (benchmarks/RESULTS.md, C83)."""
    return [i for i, name in enumerate(names) if name.startswith("momentum_")]


def _with_constant(features: np.ndarray) -> np.ndarray:
    """`features` [n, F] with a column of ones in front, [n, 1 + F]."""
    return np.concatenate([np.ones((len(features), 1)), features], axis=1)


class DirectionTeacher(RolloutPass):
    """After each PPO update, the direction head's cross-entropy towards the levels `teacher`
    teaches on the rollout's states (module doc); states it teaches nothing are left out."""

    name = "direction_teacher"

    def __init__(
        self,
        weight: float,
        batch_size: int,
        seed: int,
        teacher: LinearTeacher,
        sides: Sequence[int],
    ) -> None:
        super().__init__(weight, batch_size, seed)
        self.teacher = teacher
        self.sides = tuple(sides)

    def _targets(self, flat: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
        labels = self.teacher.labels(flat["market"][:, -1, :], self.sides)  # [B]
        rows = np.flatnonzero(labels >= 0)  # [b]
        self.logger.record("train/direction_teacher_taught", len(rows) / len(labels))
        if len(rows) == 0:
            return None
        target = np.zeros((len(rows), len(self.sides)))  # [b, D]
        target[np.arange(len(rows)), labels[rows]] = 1.0
        return rows, target
