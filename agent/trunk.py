"""The attention trunk: encodes a market window [B, W, F] into one vector [B, d_model]."""

from __future__ import annotations

import typing
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Literal, cast

import torch
from torch import nn

from agent.attention import Block, init_linear
from agent.config import TrunkConfig

# The allowed values of every Literal field of TrunkConfig (pooling, init, attention, ...).
CHOICES = {
    name: typing.get_args(hint)
    for name, hint in typing.get_type_hints(TrunkConfig).items()
    if typing.get_origin(hint) is Literal
}
ADMIN_PROFILE_BATCH = 64  # windows in the Admin profiling batch
ADMIN_PROFILE_SEED = 0  # its own generator: building a trunk draws no extra global randomness


class AttentionTrunk(nn.Module):
    """Transformer encoder over the market window, pooled to one vector per sample.

    input Linear (n_features -> d_model) + learned positional embedding -> `config.n_blocks`
    `Block`s (pre-LN by default; `config.residual`) -> pooling -> final LayerNorm. Pooling takes
    the `"last"` bar (the current one), the `"mean"` over bars, or a learned `"cls"` token
    prepended to the window. The final LayerNorm is applied to the pooled vector: for "last" and
    "cls" that equals nanoGPT's per-token `ln_f` followed by pooling (LayerNorm acts per token)
    without normalising the tokens nobody reads; for "mean" it normalises the mean (like timm's
    `fc_norm` after average pooling). The variants (collaborative attention, deep single-head
    layout, post-LN / Admin) are described in `TrunkConfig`.

    Initialisation is explicit (SB3's `ortho_init` would overwrite it, so `MultiHeadPolicy` turns
    that off): every projection is Xavier-uniform (Glorot & Bengio 2010; Vaswani et al. 2017) or,
    with ``init="normal"``, N(0, 0.02) (GPT-2); biases are zero; the positional embedding and the
    cls token are N(0, 0.02); LayerNorms start at weight 1, bias 0. With ``residual="admin"`` the
    residual scales omega are then profiled on a batch of standard-normal windows (the market
    features are volatility-scaled, so roughly unit scale; `admin_init_` re-profiles on real
    windows if wanted); loading a model's tensors restores the trained omegas from the state dict.

    Head gates (Michel et al. 2019): the buffer `head_gates` [n_blocks, heads_per_block] holds
    one gate xi per head, all ones by default; block l scales head h's output by
    ``head_gates[l, h]`` before its output projection. After pruning, block l has
    ``config.block_heads[l]`` heads, which read the first entries of its row (the others are
    unused). Change the gates only through `set_head_gates`: it keeps a Python flag so the
    all-ones case skips the multiply with no device sync per forward (the flag is also refreshed
    by `load_state_dict`). Always multiplying by all-ones gates slows a forward pass measurably
    (benchmarks/RESULTS.md, "Measurements behind design choices"), and testing the gate values
    on every forward would force a device sync on CUDA: hence the flag. For head
    importance, run the forward and backward inside `gate_gradients()` (dL/dxi summed over the
    batch) or `sample_gate_gradients()` (one dL_b/dxi per sample b).
    """

    head_gates: torch.Tensor  # a buffer [n_blocks, heads_per_block] (registered in __init__)

    def __init__(self, config: TrunkConfig, window: int, n_features: int) -> None:
        """A trunk of shape `config` over windows of `window` bars of `n_features` features."""
        super().__init__()
        if window < 1 or n_features < 1:
            raise ValueError(f"need window >= 1 and n_features >= 1, got {window}, {n_features}")
        for key, ok, expected in config.problems():
            if not ok:
                raise ValueError(f"trunk.{key}: expected {expected}, got {getattr(config, key)!r}")
        for key, allowed in CHOICES.items():
            if getattr(config, key) not in allowed:
                raise ValueError(f"{key} must be one of {allowed}, got {getattr(config, key)!r}")
        self.config = config
        self.window = window  # bars per market window (from the observation space)
        self.n_features = n_features  # features per bar (from the observation space)
        n_tokens = window + (1 if config.pooling == "cls" else 0)
        self.input_proj = nn.Linear(n_features, config.d_model)
        self.pos_emb = nn.Parameter(torch.empty(n_tokens, config.d_model))
        self.cls_token = (
            nn.Parameter(torch.empty(1, 1, config.d_model)) if config.pooling == "cls" else None
        )
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList([Block(config, n_heads) for n_heads in config.block_heads])
        self.ln_f = nn.LayerNorm(config.d_model)
        self.register_buffer("head_gates", torch.ones(config.n_blocks, config.heads_per_block))
        self._gates_active = False  # True when some gate differs from 1 (see set_head_gates)
        self._sample_gates: torch.Tensor | None = None  # set inside `sample_gate_gradients`
        self.register_load_state_dict_post_hook(_refresh_gates_flag)
        self.output_dim = config.d_model

        init_linear(self.input_proj, config.init)
        nn.init.normal_(self.pos_emb, mean=0.0, std=0.02)
        if self.cls_token is not None:
            nn.init.normal_(self.cls_token, mean=0.0, std=0.02)
        if config.residual == "admin":
            self.admin_init_(admin_profiling_batch(window, n_features))

    def set_head_gates(self, gates: torch.Tensor) -> None:
        """Copy `gates` [n_blocks, heads_per_block] into `head_gates` (0 masks a head, 1 keeps)."""
        if gates.shape != self.head_gates.shape:
            raise ValueError(
                f"gates must have shape {tuple(self.head_gates.shape)}, got {gates.shape}"
            )
        with torch.no_grad():
            self.head_gates.copy_(gates)
        self._gates_active = not bool(torch.all(self.head_gates == 1))

    @contextmanager
    def gate_gradients(self) -> Iterator[torch.Tensor]:
        """Within this block `head_gates` requires grad; yields it.

        After ``loss.backward()`` inside the block, ``gates.grad[l, h]`` is dL/dxi_{l,h}; the head
        importance of Michel et al. (2019) is ``I_h = E_x |dL/dxi_h|`` over batches. The gradient
        is cleared on entry and kept after the block.
        """
        self.head_gates.grad = None
        self.head_gates.requires_grad_(True)
        try:
            yield self.head_gates
        finally:
            self.head_gates.requires_grad_(False)

    @contextmanager
    def sample_gate_gradients(self, batch_size: int) -> Iterator[torch.Tensor]:
        """Within this block every sample has its own copy of the gates; yields them.

        The yielded tensor [batch_size, n_blocks, heads_per_block] holds the current gate values
        and requires grad; forwards inside the block must have exactly `batch_size` samples.
        Sample b's output depends only on its own copy, so for a loss that sums per-sample terms,
        ``L = sum_b L_b``, the gradient row b is dL_b/dxi: the per-example gradients in the
        expectation ``I_h = E_x |dL(x)/dxi_h|`` of Michel et al. (2019), from one backward.
        """
        gates = self.head_gates.detach().expand(batch_size, -1, -1).clone().requires_grad_(True)
        self._sample_gates = gates
        try:
            yield gates
        finally:
            self._sample_gates = None

    def _gates(self) -> torch.Tensor | None:
        """The gates the forward applies ([..., n_blocks, heads_per_block]), or None for none."""
        if self._sample_gates is not None:
            return self._sample_gates
        if self._gates_active or self.head_gates.requires_grad:
            return self.head_gates
        return None

    @property
    def block_sequence(self) -> Sequence[Block]:
        """The blocks, typed: iterating `blocks`, an `nn.ModuleList`, gives plain modules."""
        return cast(Sequence[Block], self.blocks)

    def embed(self, market: torch.Tensor) -> torch.Tensor:
        """Market windows [B, W, n_features] -> tokens [B, T, d_model] entering the blocks."""
        x = self.input_proj(market)  # [B, W, d_model]
        if self.cls_token is not None:
            cls = self.cls_token.expand(x.size(0), -1, -1)  # [B, 1, d_model]
            x = torch.cat([cls, x], dim=1)  # [B, 1 + W, d_model]
        return self.drop(x + self.pos_emb)  # [B, T, d_model]

    def pool(self, x: torch.Tensor) -> torch.Tensor:
        """Tokens [B, T, d_model] leaving the blocks -> one normalised vector [B, d_model]."""
        if self.config.pooling == "mean":
            pooled = x.mean(dim=1)  # [B, d_model]
        elif self.config.pooling == "last":
            pooled = x[:, -1]  # [B, d_model]: the current bar
        else:
            pooled = x[:, 0]  # [B, d_model]: the cls token
        return self.ln_f(pooled)  # [B, d_model]

    def forward(self, market: torch.Tensor) -> torch.Tensor:
        """Encode market windows [B, W, n_features] into [B, d_model]."""
        x = self.embed(market)  # [B, T, d_model]
        gates = self._gates()
        last = len(self.blocks) - 1
        for layer, block in enumerate(self.block_sequence):
            gate = None if gates is None else gates[..., layer, : block.attn.n_heads]
            # "last" pooling reads one token: the final block computes only that one.
            last_only = layer == last and self.config.pooling == "last"
            x = block(x, gate, last_only)  # [B, T, d_model] ([B, 1, d_model] if last_only)
        return self.pool(x)  # [B, d_model]

    @torch.no_grad()
    def attention_maps(self, market: torch.Tensor) -> list[torch.Tensor]:
        """Every head's attention weights on market windows [B, W, F], for analysis.

        Returns one tensor per block, [B, heads of the block, T, T] (T = W, plus 1 with a cls
        token first), computed explicitly from the queries and keys (the forward's SDPA does not
        return them). The blocks run with the current gates, as in the forward.
        """
        maps = []
        x = self.embed(market)  # [B, T, d_model]
        gates = self._gates()
        for layer, block in enumerate(self.block_sequence):
            maps.append(block.attn.attention_weights(block.attention_input(x)))  # [B, nh, T, T]
            gate = None if gates is None else gates[..., layer, : block.attn.n_heads]
            x = block(x, gate)  # [B, T, d_model]
        return maps

    @torch.no_grad()
    def admin_init_(self, market: torch.Tensor) -> None:
        """Set every block's Admin residual scales omega from a profiling batch [B, W, F].

        Liu et al. (2020): the first branch's omega is 1, each later one
        ``sqrt(Var[omega x] + Var[f(x)])`` of the branch before it (`Block.admin_init_`).
        """
        if self.config.residual != "admin":
            raise ValueError(f"admin_init_ needs residual='admin', not {self.config.residual!r}")
        x, ratio = self.embed(market), 1.0  # [B, T, d_model]
        for block in self.block_sequence:
            x, ratio = block.admin_init_(x, ratio)


def admin_profiling_batch(window: int, n_features: int) -> torch.Tensor:
    """Standard-normal market windows [ADMIN_PROFILE_BATCH, window, n_features], fixed seed."""
    generator = torch.Generator().manual_seed(ADMIN_PROFILE_SEED)
    shape = (ADMIN_PROFILE_BATCH, window, n_features)
    return torch.randn(shape, generator=generator)


def _refresh_gates_flag(trunk: AttentionTrunk, incompatible_keys: object) -> None:
    """After `load_state_dict`, re-derive the all-ones flag from the loaded `head_gates`."""
    trunk._gates_active = not bool(torch.all(trunk.head_gates == 1))
