"""Multi-head self-attention and the pre-LayerNorm transformer block (in the manner of nanoGPT).

The attention is not causal: the market window already ends at the current bar, so every bar in
it may attend to every other one without seeing the future.

Head gates (Michel et al., "Are Sixteen Heads Really Better than One?", NeurIPS 2019): the layer
output is ``sum_h xi_h Att_h(x) W_h^O``. `SelfAttention.forward` takes the gate row ``xi`` of its
layer and scales each head's output by it before the output projection; the gates themselves live
in one buffer owned by `agent.trunk.AttentionTrunk`, which passes ``None`` when no gate is in use.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from agent.config import TrunkConfig


def init_linear(linear: nn.Linear, scheme: Literal["xavier", "normal"], n_stacked: int = 1) -> None:
    """Initialise a Linear layer in place: weights by `scheme`, biases to zero.

    `"xavier"` is Glorot & Bengio (2010) uniform, ``U[-b, b]``, ``b = sqrt(6 / (n_in + n_out))``,
    as used for the projections of Vaswani et al. (2017) style attention; `"normal"` is
    N(0, 0.02) as in GPT-2 / nanoGPT. `n_stacked` > 1 means the weight stacks that many projections
    along its output dimension (the fused qkv holds W^Q, W^K and W^V): each is initialised on its
    own, so the Xavier bound is that of one ``d_model x d_model`` projection.
    """
    for weight in linear.weight.chunk(n_stacked, dim=0):
        if scheme == "xavier":
            nn.init.xavier_uniform_(weight)
        else:
            nn.init.normal_(weight, mean=0.0, std=0.02)
    if linear.bias is not None:
        nn.init.zeros_(linear.bias)


class SelfAttention(nn.Module):
    """Multi-head self-attention over a window of bars, with an optional gate per head."""

    def __init__(self, config: TrunkConfig) -> None:
        super().__init__()
        if config.d_model % config.n_heads != 0:
            raise ValueError(
                f"d_model={config.d_model} is not divisible by n_heads={config.n_heads}"
            )
        self.n_heads = config.n_heads
        self.d_model = config.d_model
        self.dropout = config.dropout
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)  # W^Q, W^K, W^V of all heads
        self.proj = nn.Linear(config.d_model, config.d_model)  # W^O
        self.resid_dropout = nn.Dropout(config.dropout)
        init_linear(self.qkv, config.init, n_stacked=3)
        init_linear(self.proj, config.init)

    def forward(self, x: torch.Tensor, gate: torch.Tensor | None = None) -> torch.Tensor:
        """Attend over the window.

        Args:
            x: [B, T, d_model] tokens.
            gate: [n_heads] per-head gate xi_h, or None for no gating (all heads at 1).

        Returns:
            [B, T, d_model].
        """
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(self.d_model, dim=2)  # 3 x (B, T, C)
        q = q.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=False
        )  # (B, nh, T, hs)
        if gate is not None:
            y = y * gate.view(1, self.n_heads, 1, 1).to(y.dtype)  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C): heads side by side
        return self.resid_dropout(self.proj(y))


class MLP(nn.Module):
    """Position-wise feed-forward network: Linear -> GELU -> Linear."""

    def __init__(self, config: TrunkConfig) -> None:
        super().__init__()
        hidden = int(config.mlp_ratio * config.d_model)
        self.fc = nn.Linear(config.d_model, hidden)
        self.gelu = nn.GELU()
        self.proj = nn.Linear(hidden, config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        init_linear(self.fc, config.init)
        init_linear(self.proj, config.init)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, d_model] -> [B, T, d_model]."""
        return self.dropout(self.proj(self.gelu(self.fc(x))))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: attention then MLP, each on a residual branch."""

    def __init__(self, config: TrunkConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model)
        self.attn = SelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.d_model)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, gate: torch.Tensor | None = None) -> torch.Tensor:
        """[B, T, d_model] -> [B, T, d_model]; `gate` [n_heads] or None, see `SelfAttention`."""
        x = x + self.attn(self.ln_1(x), gate)
        x = x + self.mlp(self.ln_2(x))
        return x
