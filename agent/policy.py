"""`MultiHeadPolicy`: SB3 actor-critic policy with an attention trunk and three decision heads."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.type_aliases import Schedule
from torch import nn

from agent.distribution import MultiHeadDistribution
from agent.extractor import MarketAccountExtractor
from agent.heads import DecisionHeads
from agent.trunk import AttentionTrunk

# Head activations a compiled copy of the policy implements, by the name it is given there.
HEAD_ACTIVATIONS: dict[type[nn.Module], str] = {nn.Tanh: "tanh", nn.ReLU: "relu", nn.GELU: "gelu"}


@dataclass(frozen=True)
class PostTrunkArrays:
    """The deterministic policy after the trunk, as float64 NumPy copies of its parameters.

    What a compiled copy of the policy needs (`training.evaluation.fast_inference`). With
    ``features = [trunk(market) (market_dim), account_mlp(account)]``, each decision head k
    computes ``logits_k = W_k^out act(W_k^in features + b_k^in) + b_k^out`` and its
    deterministic action is the argmax of `logits_k`. Weights are in torch's [out, in] layout.
    """

    account_mlp: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # w1, b1, w2, b2 (GELUs)
    hidden_weight: np.ndarray  # [3H, market_dim + D] the heads' W^in stacked: direction, lev, risk
    hidden_bias: np.ndarray  # [3H] their b^in
    logits: tuple[tuple[np.ndarray, np.ndarray], ...]  # per head: W^out [n_k, H], b^out [n_k]
    activation: str  # of the heads' hidden layers: "tanh", "relu" or "gelu" (exact)
    market_dim: int  # the trunk's output width: the first columns of `hidden_weight` read it


class MultiHeadPolicy(ActorCriticPolicy):
    """Shared trunk (`MarketAccountExtractor`) -> `direction`, `leverage`, `risk` heads + value.

    Use it with PPO like any SB3 policy class; all kwargs are plain values, so a run's config
    rebuilds it in code (`training.run.folder.build_policy`) before a model file's tensors load::

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
        trunk: `TrunkConfig` fields as a dict (the window and the features per bar are the
            observation space's).
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
        assert isinstance(self.action_space, spaces.MultiDiscrete)  # checked in __init__
        self.action_dist = MultiHeadDistribution(
            [int(n) for n in self.action_space.nvec],
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
    def extractor(self) -> MarketAccountExtractor:
        """The features extractor: trunk and account MLP (SB3 types it as its base class)."""
        extractor = self.features_extractor
        assert isinstance(extractor, MarketAccountExtractor)  # fixed in __init__
        return extractor

    @property
    def trunk(self) -> AttentionTrunk:
        """The attention trunk over the market window."""
        return self.extractor.trunk

    @property
    def decision_heads(self) -> DecisionHeads:
        """The `direction`, `leverage` and `risk` heads (SB3 calls this module `action_net`)."""
        heads = self.action_net
        assert isinstance(heads, DecisionHeads)  # built by `MultiHeadDistribution`
        return heads

    def check_composition(self) -> None:
        """Raise `ValueError` unless the forward after the trunk is what `PostTrunkArrays` holds.

        That is: no policy layers between the features and the heads, an account MLP of
        Linear, exact GELU, Linear, exact GELU, and a head activation in `HEAD_ACTIVATIONS`
        (an exact GELU). A copy computing that composition then takes the same actions.
        """
        account_mlp = self.extractor.account_mlp
        layers = [type(module) for module in account_mlp]
        activation = self.decision_heads.direction.activation
        problems = [
            (len(self.mlp_extractor.policy_net) != 0, "policy layers between features and heads"),
            (layers != [nn.Linear, nn.GELU, nn.Linear, nn.GELU], f"an account MLP {layers}"),
            (any(m.approximate != "none" for m in account_mlp if isinstance(m, nn.GELU)),
             "a tanh-approximated GELU"),
            (type(activation) not in HEAD_ACTIVATIONS,
             f"head activation {type(activation).__name__}"),
            (isinstance(activation, nn.GELU) and activation.approximate != "none",
             "a tanh-approximated GELU"),
        ]  # fmt: skip
        for failed, what in problems:
            if failed:
                raise ValueError(f"a compiled copy of the policy does not support {what}")

    def post_trunk_arrays(self) -> PostTrunkArrays:
        """The parameters after the trunk as `PostTrunkArrays` (checked: `check_composition`)."""
        self.check_composition()
        first, second = (m for m in self.extractor.account_mlp if isinstance(m, nn.Linear))
        heads = self.decision_heads
        head_list = (heads.direction, heads.leverage, heads.risk)
        return PostTrunkArrays(
            account_mlp=(
                _float64(first.weight),
                _float64(first.bias),
                _float64(second.weight),
                _float64(second.bias),
            ),
            hidden_weight=_float64(torch.cat([head.hidden.weight for head in head_list])),
            hidden_bias=_float64(torch.cat([head.hidden.bias for head in head_list])),
            logits=tuple((_float64(h.logits.weight), _float64(h.logits.bias)) for h in head_list),
            activation=HEAD_ACTIVATIONS[type(head_list[0].activation)],
            market_dim=self.trunk.output_dim,
        )

    def head_distributions(
        self, obs: dict[str, torch.Tensor] | dict[str, np.ndarray]
    ) -> MultiHeadDistribution:
        """The action distribution for a batch of observations, per head, for logging/analysis.

        Accepts tensors on the policy's device or NumPy arrays. Returns a snapshot: SB3 reuses
        one distribution object for every forward, this copy is not overwritten by the next one.
        Gradients flow unless the caller wraps the call in `torch.no_grad()`.
        """
        tensors: torch.Tensor | dict[str, torch.Tensor]
        if all(isinstance(value, torch.Tensor) for value in obs.values()):
            tensors = cast(dict[str, torch.Tensor], obs)
        else:
            tensors, _ = self.obs_to_tensor(cast(dict[str, np.ndarray], obs))
        distribution = self.get_distribution(tensors)
        assert isinstance(distribution, MultiHeadDistribution)  # set in _build
        return copy.copy(distribution)


def policy_of(model: BaseAlgorithm) -> MultiHeadPolicy:
    """`model.policy`, checked to be a `MultiHeadPolicy` (SB3 types it as its base class)."""
    policy = model.policy
    if not isinstance(policy, MultiHeadPolicy):
        raise TypeError(f"expected a MultiHeadPolicy model, got a {type(policy).__name__}")
    return policy


def built_like(policy: MultiHeadPolicy, **changes: Any) -> MultiHeadPolicy:
    """A fresh policy built as `policy` was (SB3's constructor parameters, `changes` replacing
    some of them), on its device. Its initial weights are drawn inside `torch.random.fork_rng`,
    so building it leaves the caller's random streams (training's) where they were."""
    params = {**policy._get_constructor_parameters(), **changes}
    with torch.random.fork_rng(devices=[]):
        return type(policy)(**params).to(policy.device)


def _float64(tensor: torch.Tensor) -> np.ndarray:
    """A float64 NumPy copy of a parameter (or of parameters concatenated)."""
    return tensor.detach().to("cpu", torch.float64).numpy().copy()
