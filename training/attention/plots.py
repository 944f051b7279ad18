"""Pictures of the attention heads: importance heatmaps, the pruning curve and attention maps.

Each function returns a matplotlib `Figure`; `figure_png` (for files) and `figure_array` (for
TensorBoard) turn it into bytes or an RGB array. A bare `Figure` renders with Agg and leaves
pyplot's global state (and any GUI backend) alone, as `training.evaluation.report` does.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

PANEL_TITLES = {
    "direction": "direction: log p(action)",
    "leverage": "leverage: log p(action)",
    "risk": "risk: log p(action)",
    "value": "value V(s)",
    "ppo_loss": "PPO loss",
}


def figure_png(figure: Figure, dpi: int = 100) -> bytes:
    """The figure as PNG bytes."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def figure_array(figure: Figure) -> np.ndarray:
    """The figure as an RGB array [H, W, 3] of uint8 (TensorBoard's "HWC")."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()  # [H, W, 3]


def _heatmap(axis: Any, values: np.ndarray, title: str) -> Any:
    """Draw a layer x head heatmap with the value in each cell; NaN (no such head) in grey."""
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="lightgrey")
    image = axis.imshow(np.ma.masked_invalid(values), cmap=cmap, aspect="auto")
    finite = values[np.isfinite(values)]
    middle = (finite.min() + finite.max()) / 2 if finite.size else 0.0
    for (layer, head), value in np.ndenumerate(values):
        if np.isfinite(value):
            color = "black" if value > middle else "white"
            axis.text(head, layer, f"{value:.2g}", ha="center", va="center", color=color)
    n_layers, n_heads = values.shape
    axis.set_xticks(range(n_heads), [f"head {h}" for h in range(n_heads)])
    axis.set_yticks(range(n_layers), [f"layer {layer}" for layer in range(n_layers)])
    axis.set_title(title, fontsize=10)
    return image


def importance_figure(importance: Mapping[str, np.ndarray], title: str) -> Figure:
    """One heatmap panel per target (layer x head), e.g. the `head_importance` result."""
    n_layers, n_heads = next(iter(importance.values())).shape
    figure = Figure(
        figsize=(2.2 + 1.1 * n_heads * len(importance), 1.8 + 0.45 * n_layers),
        layout="constrained",
    )
    axes = figure.subplots(1, len(importance), squeeze=False)
    for axis, (target, values) in zip(axes[0], importance.items(), strict=True):
        image = _heatmap(axis, values, PANEL_TITLES.get(target, target))
        figure.colorbar(image, ax=axis, shrink=0.8)
    figure.suptitle(title)
    return figure


def pruning_figure(curve: Sequence[Mapping[str, Any]], title: str) -> Figure:
    """Validation Sharpe and total return against the share of heads pruned."""
    shares = [100 * point["share"] for point in curve]
    figure = Figure(figsize=(7, 6), layout="constrained")
    sharpe_axis, return_axis = figure.subplots(2, 1, sharex=True)
    for axis, key, label in (
        (sharpe_axis, "sharpe", "validation Sharpe"),
        (return_axis, "total_return_pct", "validation total return (%)"),
    ):
        values = [np.nan if point[key] is None else point[key] for point in curve]
        axis.plot(shares, values, marker="o")
        for share, value, point in zip(shares, values, curve, strict=True):
            axis.annotate(f"{point['heads_pruned']}", (share, value), textcoords="offset points",
                          xytext=(0, 6), ha="center", fontsize=8)  # fmt: skip
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    return_axis.set_xlabel("heads pruned (%), least important first (labels: number of heads)")
    sharpe_axis.set_title(title)
    return figure


def attention_figure(
    weights: Sequence[np.ndarray],
    labels: Sequence[str],
    gates: np.ndarray,
    title: str,
    *,
    full: bool = False,
) -> Figure:
    """A layer x head grid of attention weights.

    `weights[l]` is block l's [heads, T] attention from the pooled position over the T tokens
    (bar charts), or with `full` its [heads, T, T] maps (query rows, key columns). `labels` names
    the T tokens (dates, and "cls"); `gates` [n_blocks, heads_per_block] marks masked heads.
    """
    n_layers, n_heads = gates.shape
    figure = Figure(figsize=(3.2 * n_heads + 0.8, 2.2 * n_layers + 0.8), layout="constrained")
    axes = figure.subplots(n_layers, n_heads, squeeze=False)
    n_tokens = len(labels)
    ticks = sorted({0, n_tokens // 2, n_tokens - 1})
    for (layer, head), axis in np.ndenumerate(axes):
        if head >= len(weights[layer]):  # a head this block no longer has (pruned)
            axis.set_axis_off()
            continue
        masked = " (gate 0)" if gates[layer, head] == 0 else ""
        if full:
            axis.imshow(weights[layer][head], cmap="magma", vmin=0.0, aspect="auto")
            axis.set_yticks(ticks, [labels[t] for t in ticks], fontsize=7)
        else:
            axis.bar(range(n_tokens), weights[layer][head], width=1.0, color="tab:blue")
            axis.axhline(1.0 / n_tokens, color="grey", linestyle="--", linewidth=0.8)  # uniform
            axis.set_ylim(0, max(float(weights[layer][head].max()) * 1.1, 1e-6))
        axis.set_xticks(ticks, [labels[t] for t in ticks], fontsize=7)
        axis.set_title(f"layer {layer} head {head}{masked}", fontsize=9)
    figure.suptitle(title)
    return figure
