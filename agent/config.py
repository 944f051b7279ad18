"""Trunk configuration (in the manner of nanoGPT's `GPTConfig`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass
class TrunkConfig:
    """Shape and initialisation of the attention trunk that encodes the market window.

    Three choices select a trunk variant; they are saved with the model (`policy_kwargs`):

    - `attention`: `"standard"` multi-head attention (Vaswani et al. 2017), or `"collaborative"`
      heads (Cordonnier et al., "Collaborate instead of concatenate"): one query and one key
      projection of size `d_shared` shared by the heads of a layer, re-weighted per head by a
      mixing vector m_i, ``score_i = Q diag(m_i) K^T``.
    - `layout`: `"multi_head"` is `n_layers` blocks of `n_heads` heads. `"deep_single_head"`
      (Liu et al. 2021, "Multi-head or single-head?") re-arranges the same heads into
      ``n_layers * n_heads`` blocks of one head each. The head width stays
      ``d_model / n_heads`` and each block's MLP gets ``1 / n_heads`` of the hidden width, so
      every weight matrix count is unchanged: attention ``4 d^2`` and MLP ``2 r d^2`` per
      original layer either way. Only the extra blocks' biases and LayerNorms are added
      (``6 d`` per extra block: the output-projection and MLP-output biases and two
      LayerNorms). `n_layers` and `n_heads` keep their multi-head meaning: the head budget.
    - `residual`: `"pre_ln"` (nanoGPT: ``x + f(LN(x))``), `"post_ln"` (Vaswani et al.:
      ``LN(x + f(x))``), or `"admin"`: post-LN with a per-branch residual scale,
      ``LN(omega * x + f(x))``, omega initialised from the output variances of the blocks on a
      profiling batch (Liu et al. 2020, "Understanding the difficulty of training transformers";
      see `agent.attention.Block.admin_init_`).

    `heads_per_layer` is written by head pruning (`agent.pruning`): the number of heads each block
    still has, so a pruned model's config rebuilds the smaller projections before its tensors load.

    The window length and the features per bar are not configured here: the trunk reads them from
    the observation space (`MarketAccountExtractor`), which the env builds from `env.window` and
    the data's feature columns.
    """

    d_model: int = 64  # width of the residual stream
    n_heads: int = 4  # attention heads per layer (d_model must be divisible by it)
    n_layers: int = 2  # transformer blocks (deep_single_head: n_layers * n_heads blocks)
    mlp_ratio: float = 4.0  # hidden width of each block's MLP as a multiple of d_model
    dropout: float = 0.0  # dropout on attention weights and residual branches (0 for RL)
    pooling: Literal["last", "mean", "cls"] = "last"  # how the window collapses to one vector
    init: Literal["xavier", "normal"] = "xavier"  # Xavier-uniform projections, or N(0, 0.02)
    attention: Literal["standard", "collaborative"] = "standard"  # per-head or shared W^Q, W^K
    d_shared: int | None = None  # collaborative: shared query/key width; None: d_model
    layout: Literal["multi_head", "deep_single_head"] = "multi_head"  # see the class docstring
    residual: Literal["pre_ln", "post_ln", "admin"] = "pre_ln"  # where LayerNorm sits; admin scale
    heads_per_layer: tuple[int, ...] | None = None  # heads kept per block by pruning; None: all

    def __post_init__(self) -> None:
        if self.heads_per_layer is not None:  # YAML and JSON give lists
            self.heads_per_layer = tuple(int(n) for n in self.heads_per_layer)

    @property
    def head_dim(self) -> int:
        """Width of one head's query, key and value: ``d_model // n_heads`` in every layout."""
        return self.d_model // self.n_heads

    @property
    def n_blocks(self) -> int:
        """Transformer blocks actually built: ``n_layers``, or ``n_layers * n_heads``."""
        return self.n_layers * (self.n_heads if self.layout == "deep_single_head" else 1)

    @property
    def heads_per_block(self) -> int:
        """Heads of an unpruned block: ``n_heads``, or 1 in the deep single-head layout."""
        return 1 if self.layout == "deep_single_head" else self.n_heads

    @property
    def block_heads(self) -> tuple[int, ...]:
        """Heads of each block: `heads_per_layer` after pruning, else `heads_per_block` each."""
        if self.heads_per_layer is not None:
            return self.heads_per_layer
        return (self.heads_per_block,) * self.n_blocks

    @property
    def mlp_hidden(self) -> int:
        """Hidden width of each block's MLP (divided among the blocks of a deep single-head)."""
        return int(self.mlp_ratio * self.d_model) // (self.n_blocks // self.n_layers)

    @property
    def shared_dim(self) -> int:
        """Collaborative attention: the shared query/key size (`d_shared`, default `d_model`)."""
        return self.d_model if self.d_shared is None else self.d_shared

    def problems(self) -> list[tuple[str, bool, str]]:
        """Checks of the fields as ``(key, ok, expected)`` triples, for `training.config`'s report.

        The shape of the trunk (`d_model` divisible by `n_heads`, ...) and the consistency of the
        variant fields. `AttentionTrunk` raises on the first failed one.
        """
        heads, hidden = self.n_heads, int(self.mlp_ratio * self.d_model)
        deep = self.layout == "deep_single_head"
        per_layer = self.heads_per_layer
        return [
            ("n_heads", heads >= 1, "an integer >= 1"),
            ("d_model", self.d_model >= 1, "an integer >= 1"),
            (
                "d_model",
                heads >= 1 and self.d_model % heads == 0,
                f"a multiple of trunk.n_heads ({heads})",
            ),
            ("n_layers", self.n_layers >= 1, "an integer >= 1"),
            ("mlp_ratio", self.mlp_ratio > 0, "a positive number"),
            ("dropout", 0 <= self.dropout < 1, "a number in [0, 1)"),
            (
                "mlp_ratio",
                not deep or (heads >= 1 and hidden % heads == 0 and hidden >= heads),
                f"mlp_ratio * d_model ({hidden}) divisible by trunk.n_heads ({heads}) for "
                "deep_single_head (each block gets an equal share of the MLP width)",
            ),
            (
                "d_shared",
                self.d_shared is None
                or (heads >= 1 and self.d_shared >= heads and self.d_shared % heads == 0),
                f"null or a positive multiple of trunk.n_heads ({heads})",
            ),
            (
                "attention",
                not (deep and self.attention == "collaborative"),
                "'standard' with layout 'deep_single_head' (collaborative heads share "
                "projections within a layer, and a deep single-head layer has one head)",
            ),
            (
                "heads_per_layer",
                per_layer is None
                or (
                    heads >= 1
                    and len(per_layer) == self.n_blocks
                    and all(0 <= n <= self.heads_per_block for n in per_layer)
                ),
                f"null or {self.n_blocks} head counts in [0, {max(self.heads_per_block, 0)}]",
            ),
        ]
