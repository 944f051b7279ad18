"""The attention trunk: encodes a market window [B, W, F] into one vector [B, d_model]."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from agent.attention import Block, init_linear
from agent.config import TrunkConfig

POOLINGS = ("last", "mean", "cls")
INITS = ("xavier", "normal")


class AttentionTrunk(nn.Module):
    """Transformer encoder over the market window, pooled to one vector per sample.

    input Linear (n_features -> d_model) + learned positional embedding -> `n_layers` pre-LN
    `Block`s -> pooling -> final LayerNorm. Pooling takes the `"last"` bar (the current one), the
    `"mean"` over bars, or a learned `"cls"` token prepended to the window. The final LayerNorm is
    applied to the pooled vector: for "last" and "cls" that equals nanoGPT's per-token `ln_f`
    followed by pooling (LayerNorm acts per token) without normalising the tokens nobody reads;
    for "mean" it normalises the mean (like timm's `fc_norm` after average pooling).

    Initialisation is explicit (SB3's `ortho_init` would overwrite it, so `MultiHeadPolicy` turns
    that off): every projection is Xavier-uniform (Glorot & Bengio 2010; Vaswani et al. 2017) or,
    with ``init="normal"``, N(0, 0.02) (GPT-2); biases are zero; the positional embedding and the
    cls token are N(0, 0.02); LayerNorms start at weight 1, bias 0.

    Head gates (Michel et al. 2019): the buffer `head_gates` [n_layers, n_heads] holds one gate
    xi per head, all ones by default; layer l scales head h's output by ``head_gates[l, h]``
    before its output projection. Change the gates only through `set_head_gates`: it keeps a
    Python flag so the all-ones case skips the multiply with no device sync per forward (the flag
    is also refreshed by `load_state_dict`). Always multiplying by all-ones gates made a forward
    pass 5-14% slower on one CPU thread (d_model 32-64, 1-2 layers, window 16-64, batch 1-256),
    and testing the gate values on every forward would force a device sync on CUDA: hence the flag.
    For head importance, run the forward and backward inside `gate_gradients()`.
    """

    def __init__(self, config: TrunkConfig) -> None:
        super().__init__()
        if config.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {config.pooling!r}")
        if config.init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {config.init!r}")
        self.config = config
        n_tokens = config.window + (1 if config.pooling == "cls" else 0)
        self.input_proj = nn.Linear(config.n_features, config.d_model)
        self.pos_emb = nn.Parameter(torch.empty(n_tokens, config.d_model))
        self.cls_token = (
            nn.Parameter(torch.empty(1, 1, config.d_model)) if config.pooling == "cls" else None
        )
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layers)])
        self.ln_f = nn.LayerNorm(config.d_model)
        self.register_buffer("head_gates", torch.ones(config.n_layers, config.n_heads))
        self._gates_active = False  # True when some gate differs from 1 (see set_head_gates)
        self.register_load_state_dict_post_hook(_refresh_gates_flag)
        self.output_dim = config.d_model

        init_linear(self.input_proj, config.init)
        nn.init.normal_(self.pos_emb, mean=0.0, std=0.02)
        if self.cls_token is not None:
            nn.init.normal_(self.cls_token, mean=0.0, std=0.02)

    def set_head_gates(self, gates: torch.Tensor) -> None:
        """Copy `gates` [n_layers, n_heads] into `head_gates` (0 prunes a head, 1 keeps it)."""
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

    def forward(self, market: torch.Tensor) -> torch.Tensor:
        """Encode market windows [B, W, n_features] into [B, d_model]."""
        x = self.input_proj(market)  # [B, W, d_model]
        if self.cls_token is not None:
            cls = self.cls_token.expand(x.size(0), -1, -1)  # [B, 1, d_model]
            x = torch.cat([cls, x], dim=1)  # [B, 1 + W, d_model]
        x = self.drop(x + self.pos_emb)  # [B, T, d_model]
        gated = self._gates_active or self.head_gates.requires_grad
        for layer, block in enumerate(self.blocks):
            x = block(x, self.head_gates[layer] if gated else None)  # [B, T, d_model]
        if self.config.pooling == "mean":
            pooled = x.mean(dim=1)  # [B, d_model]
        elif self.config.pooling == "last":
            pooled = x[:, -1]  # [B, d_model]: the current bar
        else:
            pooled = x[:, 0]  # [B, d_model]: the cls token
        return self.ln_f(pooled)  # [B, d_model]


def _refresh_gates_flag(trunk: AttentionTrunk, incompatible_keys: object) -> None:
    """After `load_state_dict`, re-derive the all-ones flag from the loaded `head_gates`."""
    trunk._gates_active = not bool(torch.all(trunk.head_gates == 1))
