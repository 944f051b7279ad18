"""Self-attention (standard and collaborative) and the transformer block (in the manner of nanoGPT).

The attention is not causal: the market window already ends at the current bar, so every bar in
it may attend to every other one without seeing the future.

Head gates (Michel et al., "Are Sixteen Heads Really Better than One?", NeurIPS 2019): the layer
output is ``sum_h xi_h Att_h(x) W_h^O``. `forward` takes the gates of its layer (one row
[n_heads], or one row per sample [B, n_heads]) and scales each head's output by them before the
output projection; the gates live in one buffer owned by `agent.trunk.AttentionTrunk`, which
passes ``None`` when no gate is in use.

A layer may have fewer heads than `TrunkConfig.n_heads` (head pruning, `agent.pruning`): it is
then built with the smaller projections, so it runs only its own heads' matmuls; with no head
left the attention branch is the constant output bias.
"""

from __future__ import annotations

import math
import warnings
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
    own, so the Xavier bound is that of one ``d_model x d_model`` projection. An empty weight (a
    pruned layer without heads) is left alone.
    """
    if linear.weight.numel() == 0:
        return
    for weight in linear.weight.chunk(n_stacked, dim=0):
        if scheme == "xavier":
            nn.init.xavier_uniform_(weight)
        else:
            nn.init.normal_(weight, mean=0.0, std=0.02)
    if linear.bias is not None:
        nn.init.zeros_(linear.bias)


def head_linear(n_in: int, n_out: int) -> nn.Linear:
    """`nn.Linear`, quiet about the empty weight of a layer whose heads are all pruned."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Initializing zero-element tensors", UserWarning)
        return nn.Linear(n_in, n_out)


def _same_width(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Zero-pad the narrower of (q, k) and v on their last dimension to the wider width.

    SDPA's fused CPU kernel needs query/key and value heads of one width; with two widths it falls
    back to its much slower math path (benchmarks/RESULTS.md). Zero query/key columns add nothing to
    the scores (the scale is passed explicitly) and zero value columns give output columns that are
    sliced off.
    """
    width = max(q.size(-1), v.size(-1))

    def pad(t: torch.Tensor) -> torch.Tensor:
        return F.pad(t, (0, width - t.size(-1)))

    return pad(q), pad(k), pad(v)


class SelfAttention(nn.Module):
    """Multi-head self-attention over a window of bars, with an optional gate per head.

    Args:
        config: the trunk's shape; each head is ``config.head_dim`` wide.
        n_heads: heads of this layer (default ``config.heads_per_block``); fewer after pruning.
    """

    def __init__(self, config: TrunkConfig, n_heads: int | None = None) -> None:
        super().__init__()
        if config.d_model % config.n_heads != 0:
            raise ValueError(
                f"d_model={config.d_model} is not divisible by n_heads={config.n_heads}"
            )
        self.n_heads = config.heads_per_block if n_heads is None else n_heads
        self.d_model = config.d_model
        self.head_dim = config.head_dim
        self.inner = self.n_heads * self.head_dim  # width of the heads side by side
        self.scale = 1.0 / math.sqrt(self.head_dim)  # of the scores, as in Vaswani et al.
        self.dropout = config.dropout
        self._build_projections(config)
        self.proj = head_linear(self.inner, config.d_model)  # W^O
        self.resid_dropout = nn.Dropout(config.dropout)
        init_linear(self.proj, config.init)

    def _build_projections(self, config: TrunkConfig) -> None:
        self.qkv = head_linear(config.d_model, 3 * self.inner)  # W^Q, W^K, W^V of all heads
        init_linear(self.qkv, config.init, n_stacked=3)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values of every head: x [B, T, d_model] -> 3 x [B, nh, T, hs]."""
        B, T, _ = x.size()
        q, k, v = self.qkv(x).split(self.inner, dim=2)  # 3 x (B, T, nh * hs)
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        return q, k, v

    def forward(
        self, x: torch.Tensor, gate: torch.Tensor | None = None, last_only: bool = False
    ) -> torch.Tensor:
        """Attend over the window.

        Args:
            x: [B, T, d_model] tokens.
            gate: [n_heads] or [B, n_heads] per-head gates xi_h, or None (all heads at 1).
            last_only: attend from the last token only (every token is still a key and value);
                the output then has one token. Used when nothing reads the other tokens.

        Returns:
            [B, T, d_model], or [B, 1, d_model] with `last_only`.
        """
        B, T, C = x.size()
        if last_only:
            T = 1
        if self.n_heads == 0:  # every head pruned: only the output bias is left
            return self.resid_dropout(self.proj.bias.expand(B, T, C))
        q, k, v = self.project(x)  # q, k (B, nh, T, E), v (B, nh, T, hs)
        if last_only:
            q = q[:, :, -1:]  # (B, nh, 1, E)
        if q.size(-1) != v.size(-1):  # collaborative: E = d_shared
            q, k, v = _same_width(q, k, v)  # (B, nh, T, max(E, hs)) each
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, scale=self.scale
        )[..., : self.head_dim]  # (B, nh, T, hs)
        if gate is not None:
            y = y * gate.view(-1, self.n_heads, 1, 1).to(y.dtype)  # (B, nh, T, hs)
        y = y.transpose(1, 2).reshape(B, T, self.inner)  # (B, T, nh * hs): heads side by side
        return self.resid_dropout(self.proj(y))

    def pruned_state(self, heads: torch.Tensor) -> dict[str, torch.Tensor]:
        """This layer's state restricted to the heads `heads` (indices, ascending).

        It loads into the same class built with ``len(heads)`` heads (`agent.pruning`): the
        per-head rows of the input projections and columns of W^O are kept, in order.
        """
        cols = (heads[:, None] * self.head_dim + torch.arange(self.head_dim)).flatten()  # [k*hs]
        state = dict(self.state_dict())
        state["proj.weight"] = state["proj.weight"][:, cols]  # [d_model, k * hs]
        state.update(self._head_rows(state, heads, cols))
        return state

    def _head_rows(
        self, state: dict[str, torch.Tensor], heads: torch.Tensor, cols: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        rows = torch.cat([cols + part * self.inner for part in range(3)])  # q, k, v rows [3*k*hs]
        return {"qkv.weight": state["qkv.weight"][rows], "qkv.bias": state["qkv.bias"][rows]}

    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        """Each head's attention weights, softmax(Q K^T * scale): [B, T, d] -> [B, nh, T, T].

        For analysis only (SDPA does not return the weights; the forward never calls this).
        Row t of head h is the distribution bar t's query puts over the window's bars.
        """
        B, T, _ = x.size()
        if self.n_heads == 0:
            return x.new_zeros(B, 0, T, T)
        q, k, _ = self.project(x)  # (B, nh, T, E)
        return torch.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1)  # (B, nh, T, T)


class CollaborativeAttention(SelfAttention):
    """Collaborative heads (Cordonnier et al., "Multi-head attention: collaborate instead of
    concatenate"): one query and one key projection of width ``D = config.shared_dim`` shared by
    the heads of the layer, and a mixing vector m_i [D] per head,
    ``score_i = (X W_Q) diag(m_i) (X W_K)^T / sqrt(D / n_heads)``. Values and the output
    projection stay per head, as in standard attention.

    m_i is folded into the queries, ``(Q * m_i) K^T``, so one SDPA call still computes every
    head. The query bias, multiplied by m_i, gives each head its own content bias on the keys
    (the term Cordonnier et al. add explicitly); the key bias only shifts a query's scores by a
    constant and cancels in the softmax. With ``D = d_model``, W_Q and W_K the per-head
    projections side by side and m_i the indicator of head i's slice, this is exactly standard
    attention; the mixing vectors start that way (their "concatenate" initialisation), so at
    initialisation a collaborative layer is a standard one of head width ``D / n_heads``.
    """

    def _build_projections(self, config: TrunkConfig) -> None:
        shared = config.shared_dim
        self.shared_dim = shared
        self.scale = 1.0 / math.sqrt(shared / config.n_heads)  # Cordonnier et al.'s head size
        self.qk = nn.Linear(config.d_model, 2 * shared)  # shared W_Q, W_K
        self.value = head_linear(config.d_model, self.inner)  # W^V of all heads
        slice_of = torch.arange(shared) // (shared // config.n_heads)  # [D]: the head of a dim
        heads = torch.arange(self.n_heads)[:, None]  # [nh, 1]
        self.mixing = nn.Parameter((slice_of[None, :] == heads).float())  # [nh, D]
        init_linear(self.qk, config.init, n_stacked=2)
        init_linear(self.value, config.init)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Mixed queries, shared keys and per-head values: x [B, T, d] -> [B, nh, T, D] x 2,
        [B, nh, T, hs]."""
        B, T, _ = x.size()
        q, k = self.qk(x).split(self.shared_dim, dim=2)  # 2 x (B, T, D)
        q = q.unsqueeze(1) * self.mixing.view(1, self.n_heads, 1, self.shared_dim)  # (B, nh, T, D)
        k = k.unsqueeze(1).expand(B, self.n_heads, T, self.shared_dim)  # (B, nh, T, D): a view
        v = self.value(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        return q, k, v

    def _head_rows(
        self, state: dict[str, torch.Tensor], heads: torch.Tensor, cols: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        # The shared query/key projection serves every head and stays whole.
        return {
            "value.weight": state["value.weight"][cols],
            "value.bias": state["value.bias"][cols],
            "mixing": state["mixing"][heads],
        }


ATTENTIONS: dict[str, type[SelfAttention]] = {
    "standard": SelfAttention,
    "collaborative": CollaborativeAttention,
}


class MLP(nn.Module):
    """Position-wise feed-forward network: Linear -> GELU -> Linear (``config.mlp_hidden`` wide)."""

    def __init__(self, config: TrunkConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.d_model, config.mlp_hidden)
        self.gelu = nn.GELU()
        self.proj = nn.Linear(config.mlp_hidden, config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        init_linear(self.fc, config.init)
        init_linear(self.proj, config.init)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, d_model] -> [B, T, d_model]."""
        return self.dropout(self.proj(self.gelu(self.fc(x))))


class Block(nn.Module):
    """Transformer block: attention then MLP, each on a residual branch (`config.residual`).

    `"pre_ln"`: ``x + f(LN(x))``. `"post_ln"`: ``LN(x + f(x))``. `"admin"`: ``LN(omega * x +
    f(x))`` with omega [2, d_model] (one row per branch), a parameter set by `admin_init_`.
    """

    def __init__(self, config: TrunkConfig, n_heads: int | None = None) -> None:
        super().__init__()
        self.residual = config.residual
        self.ln_1 = nn.LayerNorm(config.d_model)
        self.attn = ATTENTIONS[config.attention](config, n_heads)
        self.ln_2 = nn.LayerNorm(config.d_model)
        self.mlp = MLP(config)
        self.omega = (
            nn.Parameter(torch.ones(2, config.d_model)) if config.residual == "admin" else None
        )

    def forward(
        self, x: torch.Tensor, gate: torch.Tensor | None = None, last_only: bool = False
    ) -> torch.Tensor:
        """[B, T, d_model] -> [B, T, d_model] ([B, 1, d_model] with `last_only`: only the last
        token's output is computed); `gate` [nh], [B, nh] or None, see `SelfAttention`."""
        stream = x[:, -1:] if last_only else x  # the residual stream of the computed tokens
        if self.residual == "pre_ln":
            x = stream + self.attn(self.ln_1(x), gate, last_only)
            return x + self.mlp(self.ln_2(x))
        x = self.ln_1(self._skip(stream, 0) + self.attn(x, gate, last_only))
        return self.ln_2(self._skip(x, 1) + self.mlp(x))

    def _skip(self, x: torch.Tensor, branch: int) -> torch.Tensor:
        """The residual stream entering branch 0 (attention) or 1 (MLP): x, or omega * x."""
        return x if self.omega is None else x * self.omega[branch]

    def attention_input(self, x: torch.Tensor) -> torch.Tensor:
        """What the attention reads from the stream x: LN(x) before pre-LN, x itself after."""
        return self.ln_1(x) if self.residual == "pre_ln" else x

    @torch.no_grad()
    def admin_init_(self, x: torch.Tensor, ratio: float) -> tuple[torch.Tensor, float]:
        """Admin profiling (Liu et al. 2020) of this block's two branches on the stream x.

        Branch i gets ``omega_i = ratio`` (the running ratio, 1 for the first branch of the
        trunk), then ``ratio = sqrt(Var[omega_i x] + Var[f_i(x)])`` for the next one, as in the
        authors' reference code (variances over all elements of the profiling batch); so
        ``omega_i^2`` is the variance the stream would have accumulated without LayerNorm.

        Returns the block's output and the ratio for the next block.
        """
        if self.omega is None:
            raise ValueError("admin_init_ needs a block built with residual='admin'")
        for branch, (norm, f) in enumerate(((self.ln_1, self.attn), (self.ln_2, self.mlp))):
            self.omega[branch].fill_(ratio)
            out = f(x)  # [B, T, d_model]
            skip = self._skip(x, branch)  # [B, T, d_model]
            ratio = math.sqrt(float(skip.var() + out.var()))
            x = norm(skip + out)
        return x, ratio
