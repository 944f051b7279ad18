"""Training the direction head on the outcome of every direction, not only the one sampled.

PPO learns about an action only when it samples it. A direction head that has drifted to one level
(always long, on training bars that rose) then hears almost nothing about the others, although
they may pay where the market turns (benchmarks/RESULTS.md, twelfth round). In trading the
outcome of the levels not taken is known: the market's next bars do not depend on the order, so
the env can step every level from the same state (`TradingCore.direction_rewards`).

`DirectionOutcomes` uses them: after each PPO update it takes one pass over the previous rollout
with the loss ``-weight * mean_s sum_d p(d | s) log pi(d | s)``, a cross-entropy towards
``p(. | s) = softmax(q(s, .))``, q the reward each level d paid on that step, centred across the
levels and scaled to unit spread over the rollout. Each state's probabilities move towards the
levels that paid more on it, with as much evidence about the levels the policy rarely takes as
about the one it takes. Unlike the expected policy gradient ``sum_d pi(d | s) q(s, d)``, whose
gradient for a level vanishes with its probability (tried first: C75, which collapsed like PPO),
the cross-entropy's does not, so a head that has settled on long still learns where flat paid.
The rewards are one step's: what a level changes later (the position it leaves for the next
decision) is left to PPO.
"""

from __future__ import annotations

import numpy as np
import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback

from agent import policy_of


def outcome_loss(logits: th.Tensor, target: th.Tensor) -> th.Tensor:
    """The cross-entropy of direction `logits` [B, D] towards the `target` probabilities [B, D]
    per state, averaged over the B states (module doc). Its gradient for a level's logit is its
    probability less its target share: it stays large for a level the head has all but ruled
    out."""
    return -(target * th.log_softmax(logits, dim=1)).sum(dim=1).mean()


class RolloutPass(BaseCallback):
    """After each PPO update, one pass of a loss on the direction head over the rollout that
    update learned from, ``weight * _loss`` (by default `outcome_loss`, a cross-entropy), in
    minibatches of `batch_size`, with the policy's own optimizer. Subclasses say which states of
    the rollout are taught and towards what (`_targets`), and may change the loss (`_loss`) and
    its weight as training goes on (`_weight`); the loss's mean is logged as
    `train/<name>_loss`."""

    name = "rollout_pass"  # the TensorBoard tag's stem

    def __init__(self, weight: float, batch_size: int, seed: int) -> None:
        if weight <= 0:
            raise ValueError(f"weight must be > 0, got {weight}")
        super().__init__()
        self.weight = weight
        self.batch_size = batch_size
        self._rng = np.random.default_rng(seed)
        self._pending: dict[str, np.ndarray] | None = None  # the rollout's observations

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        # Kept until the update has run: SB3 re-allocates the buffer before the next rollout.
        assert isinstance(self.model, PPO)
        observations = self.model.rollout_buffer.observations  # key -> [S, N, ...]
        assert isinstance(observations, dict)
        self._pending = {
            key: value.reshape(-1, *value.shape[2:]) for key, value in observations.items()
        }  # key -> [S * N, ...]

    def _on_rollout_start(self) -> None:
        self._learn_pending()

    def _on_training_end(self) -> None:
        self._learn_pending()  # the last rollout, which no next rollout follows

    def _targets(self, flat: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray | None] | None:
        """The states to teach, as row indices [b] into the rollout `flat` (key -> [B, ...]),
        and their target direction probabilities [b, D] (None for a `_loss` that needs none);
        None when there is nothing to teach."""
        raise NotImplementedError

    def _loss(self, logits: th.Tensor, target: th.Tensor | None) -> th.Tensor:
        """The loss of a minibatch's direction `logits` [b, D] against its `target` rows [b, D]
        of `_targets`: `outcome_loss`."""
        assert target is not None
        return outcome_loss(logits, target)

    def _weight(self) -> float:
        """The loss's weight now: `weight`."""
        return self.weight

    def _learn_pending(self) -> None:
        if self._pending is None:
            return
        flat, self._pending = self._pending, None
        weight = self._weight()
        taught = self._targets(flat)  # read even at weight 0: a subclass may clear its state
        if taught is None or weight <= 0:
            return
        rows, target = taught
        assert isinstance(self.model, PPO)
        max_grad_norm = self.model.max_grad_norm
        policy = policy_of(self.model)
        targets = (
            None if target is None else th.as_tensor(target, dtype=th.float32, device=policy.device)
        )  # [b, D]
        losses = []
        order = self._rng.permutation(len(rows))
        policy.set_training_mode(True)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            obs = {
                key: th.as_tensor(value[rows[batch]], device=policy.device)
                for key, value in flat.items()
            }
            logits = policy.head_distributions(obs).heads()["direction"].logits  # [b, D]
            loss = weight * self._loss(logits, None if targets is None else targets[batch])
            policy.optimizer.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
            policy.optimizer.step()
            losses.append(loss.item())
        policy.set_training_mode(False)
        self.logger.record(f"train/{self.name}_loss", float(np.mean(losses)))


class DirectionOutcomes(RolloutPass):
    """The every-direction loss (module doc): every state of the rollout, towards
    ``softmax(q)``, q the rewards each level paid there, centred across the levels and scaled to
    unit spread over the rollout.

    The training env must be a `BatchedTradingEnv` built with `direction_rewards=True` (under
    any VecEnv wrappers): each step's `direction_rewards` [N, D] are read after the step. The
    loss's mean is logged as `train/direction_outcomes_loss`.
    """

    name = "direction_outcomes"

    def __init__(self, weight: float, batch_size: int, seed: int) -> None:
        super().__init__(weight, batch_size, seed)
        self._steps: list[np.ndarray] = []  # the rollout's [N, D] rewards, a step each
        self._rewards: np.ndarray | None = None  # [S * N, D] the pending rollout's

    def _on_step(self) -> bool:
        (rewards,) = self.training_env.get_attr("direction_rewards", indices=[0])
        self._steps.append(np.array(rewards))  # [N, D], a copy
        return True

    def _on_rollout_end(self) -> None:
        super()._on_rollout_end()
        rewards = np.stack(self._steps)  # [S, N, D]
        self._steps = []
        self._rewards = rewards.reshape(-1, rewards.shape[-1])  # [S * N, D]

    def _targets(self, flat: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
        assert self._rewards is not None
        rewards, self._rewards = self._rewards, None
        centred = rewards - rewards.mean(axis=1, keepdims=True)  # [B, D]
        spread = float(centred.std())
        if spread == 0.0:  # every level paid the same: nothing to learn
            return None
        q = centred / spread
        target = np.exp(q - q.max(axis=1, keepdims=True))
        return np.arange(len(q)), target / target.sum(axis=1, keepdims=True)  # softmax(q)
