"""Trunk configuration (in the manner of nanoGPT's `GPTConfig`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass
class TrunkConfig:
    """Shape and initialisation of the attention trunk that encodes the market window."""

    window: int = 64  # bars in the market window (sequence length); set from the env
    n_features: int = 5  # features per bar; set from the env
    d_model: int = 64  # width of the residual stream
    n_heads: int = 4  # attention heads per layer (d_model must be divisible by it)
    n_layers: int = 2  # transformer blocks
    mlp_ratio: float = 4.0  # hidden width of each block's MLP as a multiple of d_model
    dropout: float = 0.0  # dropout on attention weights and residual branches (0 for RL)
    pooling: Literal["last", "mean", "cls"] = "last"  # how the window collapses to one vector
    init: Literal["xavier", "normal"] = "xavier"  # Xavier-uniform projections, or N(0, 0.02)
