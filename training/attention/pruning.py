"""Head pruning of a trained agent: the pruning curve, and a pruned model that is really smaller.

Following Michel et al. (2019), heads are pruned in order of increasing importance (one ranking
computed once, over every layer together; `training.attention.importance`). The curve masks the
first ``round(share * n_heads)`` heads of that order with their gates, for each share in
`SHARES`, and backtests the deterministic policy over a range (the validation split in
`python -m training.heads prune`). `prune_and_check` then cuts the pruned heads out of the
trunk's projections (`agent.pruning.prune_policy`), so they cost nothing at inference; the smaller
policy saves and loads like any other, with `trunk.heads_per_layer` in the config next to it.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from agent import MultiHeadPolicy
from agent.pruning import prune_policy
from envs import TradingEnv
from training.evaluation.backtest import agent_metrics

SHARES = tuple(step / 10 for step in range(10))  # 0%, 10%, ..., 90% of the heads pruned
CURVE_METRICS = ("sharpe", "total_return_pct", "max_drawdown_pct", "exposure_pct", "trades")


def pruning_order(scores: np.ndarray) -> list[tuple[int, int]]:
    """Heads (layer, head) by increasing score; NaN (no such head) left out; ties by position."""
    ranked = sorted((float(s), layer, head) for (layer, head), s in np.ndenumerate(scores)
                    if np.isfinite(s))  # fmt: skip
    return [(layer, head) for _, layer, head in ranked]


def heads_to_prune(share: float, n_heads: int) -> int:
    """``round(share * n_heads)``, halves rounded up, within [0, n_heads]."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"the share of heads to prune must be in [0, 1], got {share}")
    return min(n_heads, math.floor(share * n_heads + 0.5 + 1e-9))


def keep_mask(shape: tuple[int, int], pruned: list[tuple[int, int]]) -> torch.Tensor:
    """A bool mask [n_blocks, heads_per_block]: False at the `pruned` heads."""
    keep = torch.ones(shape, dtype=torch.bool)
    for layer, head in pruned:
        keep[layer, head] = False
    return keep


def pruning_curve(
    policy: MultiHeadPolicy,
    env: TradingEnv,
    order: list[tuple[int, int]],
    shares: tuple[float, ...] = SHARES,
) -> list[dict[str, object]]:
    """For each share, mask the first heads of `order` and backtest over `env`.

    Returns one entry per share: the share, the number and list of pruned heads and
    `CURVE_METRICS`. The trunk's gates are restored afterwards.
    """
    trunk = policy.trunk
    original = trunk.head_gates.clone()
    curve = []
    try:
        for share in shares:
            pruned = order[: heads_to_prune(share, len(order))]
            gates = original.clone()
            for layer, head in pruned:
                gates[layer, head] = 0.0
            trunk.set_head_gates(gates)
            metrics = agent_metrics(policy, env)
            curve.append(
                {
                    "share": share,
                    "heads_pruned": len(pruned),
                    "pruned": [list(head) for head in pruned],
                    **{key: metrics[key] for key in CURVE_METRICS},
                }
            )
    finally:
        trunk.set_head_gates(original)
    return curve


def prune_and_check(
    policy: MultiHeadPolicy, pruned: list[tuple[int, int]], observations: dict[str, np.ndarray]
) -> tuple[MultiHeadPolicy, dict[str, object]]:
    """A copy of `policy` without the heads `pruned`, and how it compares with the gated policy.

    `policy` is left as it was; the copy's `trunk_config` carries the new `heads_per_layer`
    (`agent.pruning.prune_policy`). The comparison runs `policy` with those heads' gates at 0
    (restored afterwards) against the copy on `observations`: the largest logit difference and
    whether every deterministic action agrees.
    """
    trunk = policy.trunk
    keep = keep_mask((trunk.head_gates.shape[0], trunk.head_gates.shape[1]), pruned)
    smaller = prune_policy(policy, keep)
    original = trunk.head_gates.clone()
    trunk.set_head_gates(original * keep.to(original))
    try:
        difference, identical = compare_policies(policy, smaller, observations)
    finally:
        trunk.set_head_gates(original)
    small_trunk = smaller.trunk
    return smaller, {
        "heads_pruned": [list(head) for head in pruned],
        "heads_per_layer": list(small_trunk.config.block_heads),
        "trunk_parameters": [parameter_count(trunk), parameter_count(small_trunk)],
        "max_abs_logit_difference_vs_gated": difference,
        "identical_deterministic_actions": identical,
    }


def compare_policies(
    first: MultiHeadPolicy, second: MultiHeadPolicy, observations: dict[str, np.ndarray]
) -> tuple[float, bool]:
    """(max |logit difference|, whether the deterministic actions are identical) on a batch."""
    logits, actions = [], []
    for policy in (first, second):
        with torch.no_grad():
            distribution = policy.head_distributions(observations)
            logits.append(torch.cat([d.logits for d in distribution.heads().values()], dim=1))
            actions.append(distribution.mode())
    difference = float((logits[0] - logits[1]).abs().max()) if logits[0].numel() else 0.0
    return difference, bool(torch.equal(actions[0], actions[1]))


def parameter_count(module: torch.nn.Module) -> int:
    """Number of parameters of a module."""
    return sum(p.numel() for p in module.parameters())
