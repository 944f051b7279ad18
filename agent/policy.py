"""`MultiHeadPolicy`: SB3 actor-critic policy with an attention trunk and three decision heads."""

from __future__ import annotations

import copy
import math
from functools import partial
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.type_aliases import Schedule

from agent.distribution import MultiHeadDistribution
from agent.extractor import MarketAccountExtractor
from agent.heads import DecisionHeads


class MultiHeadPolicy(ActorCriticPolicy):
    """Shared trunk (`MarketAccountExtractor`) -> `direction`, `leverage`, `risk` heads + value.

    Use it with PPO like any SB3 policy class; all kwargs are plain values, so `PPO.load`
    rebuilds it from the saved `policy_kwargs`::

        PPO(MultiHeadPolicy, env, policy_kwargs=dict(
            trunk=dict(d_model=64, n_heads=4, n_layers=2, pooling="last"),
            flat_direction_index=1))

    What it fixes, and why:

    - ``features_extractor_class=MarketAccountExtractor``, shared by actor and critic
      (``share_features_extractor=True``): one trunk, trained by both losses.
    - ``ortho_init=False``: SB3's `_build` would otherwise re-initialise every Linear of the
      trunk orthogonally and overwrite its Xavier/normal transformer init. The parts SB3 owns
      are initialised here as SB3 would: its MLP extractor orthogonal with gain sqrt(2), the
      value head with gain 1; the decision heads initialise themselves (logits gain 0.01).
    - The action distribution is a `MultiHeadDistribution`, whose `proba_distribution_net` is
      the `DecisionHeads`: SB3's `_build` stores it as `action_net` *before* it builds the
      optimizer over ``self.parameters()``, so the optimizer holds every head.
    - ``net_arch`` defaults to ``dict(pi=[], vf=[64])``: each decision head already has its own
      hidden layer on the shared features, so there is no shared policy MLP; the value head gets
      one hidden layer of 64 (SB3's `mlp_extractor`) and SB3's linear `value_net`.

    Args:
        observation_space: Dict space with "market" (window, n_features) and "account" (A,).
        action_space: MultiDiscrete([n_direction, n_leverage, n_risk]).
        lr_schedule: learning-rate schedule (SB3 passes it).
        trunk: `TrunkConfig` fields as a dict (window and n_features come from the space).
        account_dim: width of the account-state MLP.
        head_hidden: hidden width of each decision head.
        flat_direction_index: direction level meaning flat (1 for short/flat/long, 0 for
            flat/long), or None if the direction has no flat level.
        conditional_heads: leave leverage and risk out of the log-probability and entropy of
            flat samples (see `MultiHeadDistribution`); needs `flat_direction_index`.
        use_bf16: bfloat16 autocast around the trunk forward, only when running on CUDA.
        net_arch: SB3 `net_arch` of the MLP extractor (default above).
        **kwargs: the other `ActorCriticPolicy` arguments (activation_fn, optimizer_class, ...).
    """

    def __init__(
        self,
        observation_space: spaces.Dict,
        action_space: spaces.MultiDiscrete,
        lr_schedule: Schedule,
        trunk: dict[str, Any] | None = None,
        account_dim: int = 64,
        head_hidden: int = 64,
        flat_direction_index: int | None = None,
        conditional_heads: bool = True,
        use_bf16: bool = False,
        net_arch: list[int] | dict[str, list[int]] | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(action_space, spaces.MultiDiscrete) or len(action_space.nvec) != 3:
            raise ValueError(
                f"expected MultiDiscrete([direction, leverage, risk]), got {action_space}"
            )
        if kwargs.get("use_sde"):
            raise ValueError("gSDE is for continuous actions; MultiHeadPolicy is discrete")
        # _build (called by super().__init__) reads these.
        self.trunk_config = dict(trunk or {})
        self.account_dim = account_dim
        self.head_hidden = head_hidden
        self.flat_direction_index = flat_direction_index
        self.conditional_heads = conditional_heads
        self.use_bf16 = use_bf16
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            net_arch=dict(pi=[], vf=[64]) if net_arch is None else net_arch,
            features_extractor_class=MarketAccountExtractor,
            features_extractor_kwargs=dict(
                trunk=self.trunk_config, account_dim=account_dim, use_bf16=use_bf16
            ),
            share_features_extractor=True,
            ortho_init=False,
            **kwargs,
        )

    def _build(self, lr_schedule: Schedule) -> None:
        """Swap in the multi-head distribution, let SB3 build, then init SB3's own layers."""
        self.action_dist = MultiHeadDistribution(
            tuple(int(n) for n in self.action_space.nvec),
            flat_direction_index=self.flat_direction_index,
            conditional=self.conditional_heads,
            hidden_dim=self.head_hidden,
            activation_fn=self.activation_fn,
        )
        super()._build(lr_schedule)  # mlp_extractor, action_net (the heads), value_net, optimizer
        self.mlp_extractor.apply(partial(self.init_weights, gain=math.sqrt(2)))
        self.value_net.apply(partial(self.init_weights, gain=1.0))

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        for fixed in ("features_extractor_class", "features_extractor_kwargs", "ortho_init"):
            del data[fixed]
        data.update(
            trunk=self.trunk_config,
            account_dim=self.account_dim,
            head_hidden=self.head_hidden,
            flat_direction_index=self.flat_direction_index,
            conditional_heads=self.conditional_heads,
            use_bf16=self.use_bf16,
        )
        return data

    @property
    def decision_heads(self) -> DecisionHeads:
        """The `direction`, `leverage` and `risk` heads (SB3 calls this module `action_net`)."""
        return self.action_net

    def head_distributions(
        self, obs: dict[str, torch.Tensor] | dict[str, np.ndarray]
    ) -> MultiHeadDistribution:
        """The action distribution for a batch of observations, per head, for logging/analysis.

        Accepts tensors on the policy's device or NumPy arrays. Returns a snapshot: SB3 reuses
        one distribution object for every forward, this copy is not overwritten by the next one.
        Gradients flow unless the caller wraps the call in `torch.no_grad()`.
        """
        if not all(isinstance(value, torch.Tensor) for value in obs.values()):
            obs, _ = self.obs_to_tensor(obs)
        return copy.copy(self.get_distribution(obs))
