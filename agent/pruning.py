"""Physical head pruning: drop attention heads' slices so that pruned heads cost nothing.

Masking a head with its gate (``head_gates[l, h] = 0``, Michel et al. 2019) removes its output
but still computes it. `prune_trunk` builds a trunk whose blocks have only the kept heads: the
query/key/value rows and the output-projection columns of the other heads are cut out, so a block
with k of its n heads runs k heads' worth of matmuls (none at all for k = 0). The head counts go
into `TrunkConfig.heads_per_layer` (the policy's `trunk_config`); a run config carrying it
rebuilds the smaller trunk before the weights load.

The pruned trunk computes what the gated one does (the kept heads' gates are carried over): the
only difference is the order of the floating-point sums in the output projection.
"""

from __future__ import annotations

import dataclasses

import torch

from agent.policy import MultiHeadPolicy, built_like
from agent.trunk import AttentionTrunk


def kept_heads(trunk: AttentionTrunk, keep: torch.Tensor) -> list[torch.Tensor]:
    """Indices of the kept heads of each block, from a mask [n_blocks, heads_per_block].

    Entries past a block's own head count (a trunk pruned before) are ignored.
    """
    if keep.shape != trunk.head_gates.shape:
        raise ValueError(f"keep must have shape {tuple(trunk.head_gates.shape)}, got {keep.shape}")
    return [
        torch.nonzero(keep[layer, :n_heads].bool()).flatten().cpu()
        for layer, n_heads in enumerate(trunk.config.block_heads)
    ]


def prune_trunk(trunk: AttentionTrunk, keep: torch.Tensor) -> AttentionTrunk:
    """A new trunk with only the heads where `keep` [n_blocks, heads_per_block] is True.

    Block l of the result has ``keep[l].sum()`` heads, in their original order; its gate row
    starts with their gates (the rest of the row is unused and set to 1).
    """
    heads = kept_heads(trunk, keep)
    config = dataclasses.replace(trunk.config, heads_per_layer=tuple(len(h) for h in heads))
    with torch.random.fork_rng(devices=[]):  # the new trunk's own init draws are discarded
        pruned = AttentionTrunk(config, trunk.window, trunk.n_features)
    state = trunk.state_dict()
    gates = torch.ones_like(trunk.head_gates)  # [n_blocks, heads_per_block]
    for layer, (block, kept) in enumerate(zip(trunk.block_sequence, heads, strict=True)):
        for key, value in block.attn.pruned_state(kept).items():
            state[f"blocks.{layer}.attn.{key}"] = value
        gates[layer, : len(kept)] = trunk.head_gates[layer, kept.to(gates.device)]
    state["head_gates"] = gates
    pruned.load_state_dict(state)
    return pruned.to(trunk.head_gates.device)


def prune_policy(policy: MultiHeadPolicy, keep: torch.Tensor) -> MultiHeadPolicy:
    """A new `MultiHeadPolicy` whose trunk keeps only the heads where `keep` is True.

    Every other weight is copied. The policy is built from its constructor parameters with the
    pruned `heads_per_layer`, as a config with those head counts builds it, so it has a fresh
    optimizer (Adam's moments of the removed slices have no meaning left; training resumes with
    new moments).
    """
    trunk = prune_trunk(policy.trunk, keep)
    heads_per_layer = trunk.config.heads_per_layer
    pruned = built_like(policy, trunk={**policy.trunk_config, "heads_per_layer": heads_per_layer})
    others = {key: value for key, value in policy.state_dict().items() if ".trunk." not in key}
    missing, unexpected = pruned.load_state_dict(others, strict=False)
    if unexpected or not all(".trunk." in key for key in missing):
        raise RuntimeError(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    pruned.trunk.load_state_dict(trunk.state_dict())
    pruned.set_training_mode(policy.training)
    return pruned
