"""Keeping the direction head from settling on one level before it has learned where each pays.

On training bars that rose, PPO's direction head drifts to always long within the first third of
training: long paid on average, and the policy gradient learns that average long before it learns
which states it pays in. Once flat is almost never sampled PPO hears nothing more about it, and
every later validation pass is the same always-long policy (trend 2094 of the learning benchmark:
the head's share of long 0.50 at the start, 0.95 by 45k of 150k timesteps, every pass from 60k on
100% exposed; benchmarks/RESULTS.md, thirty-ninth round).

`DirectionBalance` counters that collapse without rewarding indecision in any one state: after
each PPO update it takes one pass over the rollout with the loss
``weight(t) * sum_d pbar_d log pbar_d``, pbar the direction probabilities averaged over a
minibatch's states. That is minus the entropy of the head's *marginal* over states: it is
smallest when the head takes each level equally often overall, however sure it is in each state,
so the head may still be certain everywhere and is only pushed to choose *where* each level goes
(which is what the market features can tell it). The per-state entropy bonus (`ppo.ent_coef`)
instead pushes every state towards indecision. The weight falls linearly from `weight` at the
start to 0 at `until` of the run's timesteps, so the rest of training is PPO's alone and a
policy that should hold (a drifting market with nothing to time) can return to holding.

Where the training bars show nothing to time, a head pushed off always-long learns noise instead,
and its validation beats holding's by chance more often than a collapsed head's does (turbulence
2002 and 453 in the thirty-ninth round). `train.direction_balance_evidence` asks the contest's
tests first (`training.run.evidence`): the loss is on only where the momentum or the persistence
test finds past returns predicting later ones at that p-value (`balance_applies`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch as th

from envs import MarketData
from training.config import RunConfig
from training.run.evidence import training_evidence
from training.run.outcomes import RolloutPass


def marginal_balance_loss(logits: th.Tensor) -> th.Tensor:
    """``sum_d pbar_d log pbar_d`` of direction `logits` [B, D], pbar [D] the softmax averaged
    over the B states: minus the entropy of the head's marginal, from 0 (one level always) down
    to ``-log D`` (every level equally often)."""
    marginal = th.softmax(logits, dim=1).mean(dim=0)  # [D]
    return (marginal * th.log(marginal.clamp_min(1e-12))).sum()


class DirectionBalance(RolloutPass):
    """After each PPO update before timestep `until`, the marginal balance loss (module doc)
    over every state of the rollout, weighted by `weight` falling linearly from the first
    timestep to 0 at `until`. The loss's mean is logged as `train/direction_balance_loss`."""

    name = "direction_balance"

    def __init__(self, weight: float, until: int, batch_size: int, seed: int) -> None:
        if until < 1:
            raise ValueError(f"until must be a timestep >= 1, got {until}")
        super().__init__(weight, batch_size, seed)
        self.until = until

    def _targets(self, flat: dict[str, np.ndarray]) -> tuple[np.ndarray, None]:
        return np.arange(len(flat["market"])), None

    def _loss(self, logits: th.Tensor, target: th.Tensor | None) -> th.Tensor:
        return marginal_balance_loss(logits)

    def _weight(self) -> float:
        """`weight` at timestep 0, falling linearly to 0 at `until`."""
        return self.weight * max(0.0, 1.0 - self.model.num_timesteps / self.until)


def balance_applies(cfg: RunConfig, ranges: Sequence[tuple[MarketData, range]]) -> bool:
    """Whether a run of `cfg` on the training `ranges` ((market, bars) pairs, the real ones)
    trains with the balance loss: `train.direction_balance` > 0 and, with
    `train.direction_balance_evidence` set, a test of the bars finds past returns predicting
    later ones below it (`Evidence.predicts_returns`)."""
    if cfg.train.direction_balance <= 0:
        return False
    level = cfg.train.direction_balance_evidence
    return level is None or training_evidence(cfg, ranges).predicts_returns(level)
