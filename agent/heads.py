"""The three decision heads: direction, leverage and risk, each its own MLP on the shared latent."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from envs.config import HEAD_NAMES

FIXED_LOGIT = 30.0  # the logit of the one level a head always chooses (`DecisionHeads.always`)


class DecisionHead(nn.Module):
    """Linear -> activation -> Linear to the logits of one decision.

    Orthogonal initialisation as in SB3/openai-baselines PPO: gain sqrt(2) on the hidden layer and
    a small gain (0.01) on the logits layer, so the initial policy of every head is near uniform
    (Andrychowicz et al. 2021, "What Matters in On-Policy RL", recommend this); zero biases.
    """

    def __init__(
        self,
        latent_dim: int,
        n_actions: int,
        hidden_dim: int = 64,
        activation_fn: type[nn.Module] = nn.Tanh,
        logits_gain: float = 0.01,
    ) -> None:
        super().__init__()
        self.hidden = nn.Linear(latent_dim, hidden_dim)
        self.activation = activation_fn()
        self.logits = nn.Linear(hidden_dim, n_actions)
        for layer, gain in ((self.hidden, math.sqrt(2)), (self.logits, logits_gain)):
            nn.init.orthogonal_(layer.weight, gain=gain)
            nn.init.zeros_(layer.bias)

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        """[B, latent_dim] -> logits [B, n_actions]."""
        return self.logits(self.activation(self.hidden(latent)))


class DecisionHeads(nn.Module):
    """The `direction`, `leverage` and `risk` heads, each with its own parameters.

    The forward concatenates their logits in that order, [B, n_direction + n_leverage + n_risk],
    which is the layout SB3 expects from the `action_net` of a MultiDiscrete policy.

    Args:
        latent_dim: width of the policy latent the heads read.
        action_dims: number of levels of (direction, leverage, risk).
        hidden_dim: hidden width of each head.
        activation_fn: activation of each head's hidden layer.
    """

    def __init__(
        self,
        latent_dim: int,
        action_dims: Sequence[int],
        hidden_dim: int = 64,
        activation_fn: type[nn.Module] = nn.Tanh,
    ) -> None:
        super().__init__()
        n_direction, n_leverage, n_risk = action_dims
        self.direction = DecisionHead(latent_dim, n_direction, hidden_dim, activation_fn)
        self.leverage = DecisionHead(latent_dim, n_leverage, hidden_dim, activation_fn)
        self.risk = DecisionHead(latent_dim, n_risk, hidden_dim, activation_fn)

    @torch.no_grad()
    def lean_towards(self, action: Sequence[int], logit: float) -> None:
        """Add `logit` to the bias of the logit of `action`'s level in each head (direction,
        leverage, risk): a prior on the initial policy, which training may unlearn. With the
        near-zero initial logits, a head of n levels then starts with ``e^logit / (e^logit + n -
        1)`` on that level (2.0 over two levels: 0.88)."""
        for head, level in zip((self.direction, self.leverage, self.risk), action, strict=True):
            head.logits.bias[level] += logit

    @torch.no_grad()
    def always(self, action: Sequence[int]) -> None:
        """Make each head (direction, leverage, risk) choose `action`'s level whatever it reads:
        its logits layer's weights zero and its biases `FIXED_LOGIT` at that level, 0 elsewhere.
        The deterministic action is then `action` everywhere, and a sampled one nearly always
        (e^-30 per other level). The hold contender of a contest is such a policy
        (`training.run.challenger`)."""
        for name, level in zip(HEAD_NAMES, action, strict=True):
            self.pin(name, level)

    @torch.no_grad()
    def pin(self, name: str, level: int) -> None:
        """Make head `name` ("direction", "leverage" or "risk") choose `level` whatever it reads:
        its logits layer's weights zero and its biases `FIXED_LOGIT` at that level, 0 elsewhere.
        With `policy.deployed_leverage` every validated and saved policy is a copy with its
        leverage head pinned so (`training.evaluation.validation.deployed`)."""
        head: DecisionHead = getattr(self, name)
        head.logits.weight.zero_()
        head.logits.bias.zero_()
        head.logits.bias[level] = FIXED_LOGIT

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        """[B, latent_dim] -> concatenated logits [B, n_direction + n_leverage + n_risk]."""
        return torch.cat(
            [self.direction(latent), self.leverage(latent), self.risk(latent)], dim=1
        )  # [B, sum(action_dims)]
