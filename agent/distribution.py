"""The action distribution: a product of three Categoricals, direction x leverage x risk."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from stable_baselines3.common.distributions import MultiCategoricalDistribution
from torch import nn
from torch.distributions import Categorical

from agent.heads import DecisionHeads
from envs.config import HEAD_NAMES


class MultiHeadDistribution(MultiCategoricalDistribution):
    """Three independent Categoricals named `direction`, `leverage` and `risk`.

    It subclasses SB3's `MultiCategoricalDistribution`, so `ActorCriticPolicy` builds its
    `action_net` from `proba_distribution_net` (here a `DecisionHeads`) and feeds it the
    concatenated logits with no other override; `sample`, `mode`, `get_actions` and
    `actions_from_params` are inherited. `mode` is the most likely level of each head on its own.

    Conditional heads (``conditional=True``, needs `flat_direction_index`): when the direction is
    flat, no order is placed and leverage and risk have no effect. The policy then acts on the
    effective action Y = flat, or (direction, leverage, risk) for a non-flat direction, and

        log p(Y) = log p_dir + [dir != flat] (log p_lev + log p_risk)
        H(Y)     = H_dir + (1 - p_flat) (H_lev + H_risk)

    which is the exact entropy of Y (sum over non-flat directions d of p_d (H_lev + H_risk)). So
    PPO neither credits nor blames leverage and risk for steps where they did nothing, and its
    entropy bonus does not reward randomising them while flat. The gradient of H(Y) also flows
    through p_flat: Y has more distinct non-flat outcomes than flat ones, so the entropy bonus
    leans slightly away from flat, as the entropy of the effective action should. With
    ``conditional=False`` both are the plain sums over the three heads, as in SB3's
    `MultiCategoricalDistribution`.

    Args:
        action_dims: number of levels of (direction, leverage, risk).
        flat_direction_index: direction level that means flat, or None if there is none.
        conditional: drop leverage and risk terms for flat samples (see above).
        hidden_dim: hidden width of each head built by `proba_distribution_net`.
        activation_fn: activation of each head's hidden layer.
    """

    def __init__(
        self,
        action_dims: Sequence[int],
        flat_direction_index: int | None = None,
        conditional: bool = True,
        hidden_dim: int = 64,
        activation_fn: type[nn.Module] = nn.Tanh,
    ) -> None:
        if len(action_dims) != len(HEAD_NAMES):
            raise ValueError(f"expected (n_direction, n_leverage, n_risk), got {action_dims}")
        if conditional and flat_direction_index is None:
            raise ValueError("conditional heads need flat_direction_index (or conditional=False)")
        if flat_direction_index is not None and not 0 <= flat_direction_index < action_dims[0]:
            raise ValueError(f"flat_direction_index {flat_direction_index} out of range")
        super().__init__(list(action_dims))
        self.flat_direction_index = flat_direction_index
        self.conditional = conditional
        self.hidden_dim = hidden_dim
        self.activation_fn = activation_fn

    def proba_distribution_net(self, latent_dim: int) -> DecisionHeads:
        """Build the three heads reading a policy latent of width `latent_dim`."""
        return DecisionHeads(latent_dim, self.action_dims, self.hidden_dim, self.activation_fn)

    def proba_distribution(self, action_logits: torch.Tensor) -> MultiHeadDistribution:
        """Set the three Categoricals from the heads' concatenated logits [B, sum(action_dims)].

        As SB3's, with torch's argument validation off: the logits are the heads' output and the
        actions our own samples or the rollout buffer's, and the checks cost a noticeable share
        of a small policy forward (benchmarks/RESULTS.md). A NaN logit still stops a rollout:
        sampling refuses NaN probabilities (tested).
        """
        splits = torch.split(action_logits, list(self.action_dims), dim=1)  # 3 x [B, n_k]
        self.distribution = [Categorical(logits=split, validate_args=False) for split in splits]
        return self

    def heads(self) -> dict[str, Categorical]:
        """The per-head Categoricals by name (set by `proba_distribution`)."""
        return dict(zip(HEAD_NAMES, self.distribution, strict=True))

    def log_prob_per_head(self, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        """Unmasked log-probability of each head's level: actions [B, 3] -> name -> [B]."""
        actions = actions.long()
        return {
            name: dist.log_prob(actions[:, i])
            for i, (name, dist) in enumerate(self.heads().items())
        }

    def entropy_per_head(self) -> dict[str, torch.Tensor]:
        """Unweighted entropy of each head: name -> [B]."""
        return {name: dist.entropy() for name, dist in self.heads().items()}

    def flat_probability(self) -> torch.Tensor:
        """Probability of the flat direction, [B]."""
        if self.flat_direction_index is None:
            raise ValueError("this direction head has no flat level")
        return self.distribution[0].probs[:, self.flat_direction_index]

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """Joint log-probability of actions [B, 3] -> [B] (see the class docstring)."""
        log_prob = self.log_prob_per_head(actions)
        sizing = log_prob["leverage"] + log_prob["risk"]  # [B]
        if not self.conditional or self.flat_direction_index is None:  # __init__: both or none
            return log_prob["direction"] + sizing
        is_flat = actions[:, 0].long() == self.flat_direction_index  # [B]
        return torch.where(is_flat, log_prob["direction"], log_prob["direction"] + sizing)

    def entropy(self) -> torch.Tensor:
        """Entropy of the (effective) joint action, [B] (see the class docstring)."""
        entropy = self.entropy_per_head()
        sizing = entropy["leverage"] + entropy["risk"]  # [B]
        if not self.conditional:
            return entropy["direction"] + sizing
        return entropy["direction"] + (1.0 - self.flat_probability()) * sizing
