"""Attention-head importance (Michel et al., "Are Sixteen Heads Really Better than One?", 2019).

Each head h of the trunk has a gate xi_h (`AttentionTrunk.head_gates`, 1 by default). Its
importance for a loss L is the expected absolute first-order change of L when the head is
removed (xi_h from 1 to 0):

    I_h = E_x |dL(x) / dxi_h|

The expectation is over samples x, with one gradient per sample (not per batch): the trunk gives
every sample its own copy of the gates (`AttentionTrunk.sample_gate_gradients`), so one backward
pass of ``sum_b L_b`` yields every dL_b/dxi. Targets (`TARGETS`), each its own L_b:

- `direction`, `leverage`, `risk`: the log-probability that head gives the taken action's level
  (`MultiHeadDistribution.log_prob_per_head`).
- `value`: the value estimate V(s).
- `ppo_loss`: the PPO loss of one sample at the start of an update, where the probability ratio
  is 1 and the clip is inactive: ``-A log pi(a|s) - ent_coef H(pi(.|s)) + vf_coef (V(s) - R)^2``,
  with the joint (conditional) log-probability and entropy of `MultiHeadDistribution`, A the
  GAE advantage (standardised over the batch when the model normalises advantages; SB3 does it
  per minibatch) and R = A + V_old the lambda-return. ``-A log pi`` has the gradient of the
  clipped surrogate ``-min(r A, clip(r) A)`` at r = 1, and the value and entropy terms are SB3's
  with the run's coefficients (no value clipping: SB3's default).

Normalisation: Michel et al. divide each layer's importances by their l2 norm over the layer's
heads before ranking heads across layers (`normalize_per_layer`). With one head per layer (the
deep single-head layout) that makes every score 1, so `"auto"` normalises only when every layer
has at least two heads.

Samples come from one of two places:

- `collect_batch`: one pass of the policy through a `TradingEnv` over a data range (used by
  `python -m training.heads`), actions sampled from the policy (seeded) by default, or the
  deterministic policy's; GAE on that pass with the run's gamma and lambda.
- `batch_from_rollout`: the rollout PPO has just collected (observations, actions, advantages
  and returns from SB3's rollout buffer), for the TensorBoard logs of
  `training.run.callbacks.HeadImportanceCallback` during training.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from stable_baselines3.common.buffers import DictRolloutBuffer

from agent import MultiHeadDistribution, MultiHeadPolicy
from envs import TradingEnv
from envs.config import HEAD_NAMES

TARGETS = (*HEAD_NAMES, "value", "ppo_loss")  # what each importance is measured on
Normalization = Literal["auto", "layer", "none"]


@dataclass(frozen=True)
class ImportanceBatch:
    """N transitions to measure head importance on."""

    observations: dict[str, np.ndarray]  # "market" [N, W, F], "account" [N, A]
    actions: np.ndarray  # [N, 3] level indices of direction, leverage, risk
    advantages: np.ndarray  # [N] GAE advantages (not standardised)
    returns: np.ndarray  # [N] value targets: advantage + value estimate

    def __len__(self) -> int:
        return len(self.actions)

    def subset(self, index: np.ndarray) -> ImportanceBatch:
        """The transitions at `index`."""
        return ImportanceBatch(
            {key: value[index] for key, value in self.observations.items()},
            self.actions[index],
            self.advantages[index],
            self.returns[index],
        )


# --- losses and importance --------------------------------------------------------------------


def per_sample_losses(
    policy: MultiHeadPolicy,
    obs: torch.Tensor | dict[str, torch.Tensor],
    actions: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    *,
    ent_coef: float,
    vf_coef: float,
) -> dict[str, torch.Tensor]:
    """Every target's per-sample loss L_b, [B] each (see the module docstring), one forward."""
    features = policy.extract_features(obs)  # [B, features_dim]
    latent_pi, latent_vf = policy.mlp_extractor(features)
    distribution = policy._get_action_dist_from_latent(latent_pi)
    assert isinstance(distribution, MultiHeadDistribution)  # the policy's own
    values = policy.value_net(latent_vf).flatten()  # [B]
    ppo_loss = (
        -advantages * distribution.log_prob(actions)
        - ent_coef * distribution.entropy()
        + vf_coef * (returns - values) ** 2
    )  # [B]
    return {**distribution.log_prob_per_head(actions), "value": values, "ppo_loss": ppo_loss}


def head_importance(
    policy: MultiHeadPolicy,
    batch: ImportanceBatch,
    *,
    ent_coef: float,
    vf_coef: float,
    normalize_advantage: bool = True,
    batch_size: int = 256,
) -> dict[str, np.ndarray]:
    """``I_h = mean_b |dL_b/dxi_h|`` for every target: name -> [n_blocks, heads_per_block].

    Heads a pruned block no longer has are NaN. Runs in eval mode under `torch.enable_grad`,
    in chunks of `batch_size` samples; only the gates get gradients (parameters' `.grad` are
    left alone).
    """
    trunk = policy.trunk
    advantages = batch.advantages.astype(np.float32)
    if normalize_advantage and len(advantages) > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    totals = {target: torch.zeros_like(trunk.head_gates) for target in TARGETS}
    was_training = policy.training
    policy.set_training_mode(False)
    try:
        with torch.enable_grad():
            for start in range(0, len(batch), batch_size):
                part = slice(start, start + batch_size)
                obs, _ = policy.obs_to_tensor({k: v[part] for k, v in batch.observations.items()})
                tensors = (
                    torch.as_tensor(array[part], device=policy.device)
                    for array in (batch.actions, advantages, batch.returns.astype(np.float32))
                )
                with trunk.sample_gate_gradients(len(batch.actions[part])) as gates:
                    losses = per_sample_losses(
                        policy, obs, *tensors, ent_coef=ent_coef, vf_coef=vf_coef
                    )
                    for i, target in enumerate(TARGETS):
                        (grad,) = torch.autograd.grad(
                            losses[target].sum(), gates, retain_graph=i < len(TARGETS) - 1
                        )  # [B, n_blocks, heads_per_block]: row b is dL_b/dxi
                        totals[target] += grad.abs().sum(dim=0)
    finally:
        policy.set_training_mode(was_training)
    present = head_presence(trunk.config.block_heads, trunk.head_gates.shape[1])
    return {
        target: np.where(present, (total / len(batch)).cpu().numpy(), np.nan)
        for target, total in totals.items()
    }


def head_presence(block_heads: tuple[int, ...], width: int) -> np.ndarray:
    """Which gate entries are real heads: [n_blocks, width] bool (False past a block's heads)."""
    return np.arange(width)[None, :] < np.asarray(block_heads)[:, None]


def normalize_per_layer(importance: np.ndarray) -> np.ndarray:
    """Each layer's importances divided by their l2 norm over its heads (Michel et al. 2019).

    NaN (absent heads) stay NaN and do not count; a layer of zeros stays zero.
    """
    norm = np.sqrt(np.nansum(importance**2, axis=1, keepdims=True))  # [n_blocks, 1]
    out = np.where(np.isnan(importance), np.nan, 0.0)
    return np.divide(importance, norm, out=out, where=norm > 0)


def resolve_normalization(mode: Normalization, block_heads: tuple[int, ...]) -> str:
    """`"layer"` or `"none"`: `"auto"` is "layer" unless some layer has fewer than two heads."""
    if mode != "auto":
        return mode
    return "layer" if min(block_heads, default=0) >= 2 else "none"


def normalized(importance: dict[str, np.ndarray], mode: str) -> dict[str, np.ndarray]:
    """Every target's importance under `mode` ("layer" or "none")."""
    if mode == "none":
        return importance
    return {target: normalize_per_layer(values) for target, values in importance.items()}


# --- samples from one pass over a data range --------------------------------------------------


def _stack(observations: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {key: np.stack([obs[key] for obs in observations]) for key in observations[0]}


def _values(policy: MultiHeadPolicy, obs: dict[str, np.ndarray], chunk: int = 1024) -> np.ndarray:
    """V(s) for stacked observations, [N], without gradients."""
    parts = []
    with torch.no_grad():
        for start in range(0, len(obs["market"]), chunk):
            tensors, _ = policy.obs_to_tensor({k: v[start : start + chunk] for k, v in obs.items()})
            parts.append(policy.predict_values(tensors).flatten().cpu().numpy())
    return np.concatenate(parts)


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminated: np.ndarray,
    done: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> np.ndarray:
    """Generalised advantage estimates [N] of consecutive steps (Schulman et al. 2016).

    ``delta_t = r_t + gamma V(s_t+1) [not terminated] - V(s_t)`` and
    ``A_t = delta_t + gamma lambda [not done_t] A_t+1``: a truncated step bootstraps from the
    value of its next observation (as SB3 does for time limits), a terminated one does not.
    """
    advantages = np.zeros(len(rewards))
    running = 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * next_values[t] * (1.0 - terminated[t]) - values[t]
        running = delta + gamma * gae_lambda * (1.0 - done[t]) * running
        advantages[t] = running
    return advantages


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run torch on one CPU thread inside the block (the previous count is restored).

    For one-sample forwards step by step, intra-op threads only add synchronisation
    (benchmarks/RESULTS.md).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def collect_batch(
    policy: MultiHeadPolicy,
    env: TradingEnv,
    *,
    gamma: float,
    gae_lambda: float,
    deterministic: bool = False,
    seed: int = 0,
) -> ImportanceBatch:
    """One pass of the policy over `env`'s range: every step as a transition, with GAE.

    `env` should be built with ``random_start=False, episode_length=None``. Actions are sampled
    from the policy (seeded by `seed`, without touching the global random state), or the
    deterministic policy's with `deterministic`. When an account is liquidated or bankrupt
    before the range ends, a new one starts at that bar, so the pass still covers the range.
    """
    steps: dict[str, list] = {k: [] for k in ("obs", "next", "action", "reward", "term", "done")}
    with torch.random.fork_rng(devices=[]), one_torch_thread():
        torch.manual_seed(seed)
        obs, info = env.reset(seed=seed)
        while True:
            action = policy.predict(obs, deterministic=deterministic)[0]
            next_obs, reward, terminated, truncated, info = env.step(action)
            step = (obs, next_obs, action, reward, terminated, terminated or truncated)
            for key, value in zip(steps, step, strict=True):
                steps[key].append(value)
            obs = next_obs
            if truncated or (terminated and info["bar"] >= env.core.end_bar):
                break
            if terminated:
                obs, info = env.reset(options={"start_bar": info["bar"]})
    observations, next_observations = _stack(steps["obs"]), _stack(steps["next"])
    values = _values(policy, observations)
    advantages = gae(
        np.asarray(steps["reward"], dtype=np.float64),
        values,
        _values(policy, next_observations),
        np.asarray(steps["term"], dtype=np.float64),
        np.asarray(steps["done"], dtype=np.float64),
        gamma,
        gae_lambda,
    )
    return ImportanceBatch(observations, np.stack(steps["action"]), advantages, advantages + values)


# --- samples from a rollout of training -------------------------------------------------------


def batch_from_rollout(
    buffer: DictRolloutBuffer, size: int, rng: np.random.Generator
) -> ImportanceBatch:
    """Up to `size` transitions drawn without replacement from SB3's filled rollout buffer."""
    n = buffer.buffer_size * buffer.n_envs

    def flat(array: np.ndarray) -> np.ndarray:
        return array.reshape(n, *array.shape[2:])

    everything = ImportanceBatch(
        {key: flat(value) for key, value in buffer.observations.items()},
        flat(buffer.actions).astype(np.int64),
        flat(buffer.advantages),
        flat(buffer.returns),
    )
    return everything.subset(rng.choice(n, min(n, size), replace=False))
