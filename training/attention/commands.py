"""The commands of `python -m training.heads`: importance, prune and attention.

Each `run_<command>(loaded, args, folder_for)` takes the loaded model, the parsed options and
`folder_for`, which names the folder to write a list of files to (the entry point's choice: never
over an earlier output), prints its table and returns the files it wrote atomically. The options
and outputs are described in `training.heads`, the entry point.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from envs import DataError, MarketData, TradingEnv
from training.attention.importance import (
    TARGETS,
    ImportanceBatch,
    collect_batch,
    head_importance,
    normalized,
    resolve_normalization,
)
from training.attention.maps import attention_at, bar_at
from training.attention.plots import attention_figure, figure_png, importance_figure, pruning_figure
from training.attention.pruning import heads_to_prune, prune_and_check, pruning_curve, pruning_order
from training.config import save_config
from training.evaluation.backtest import evaluation_env
from training.run.atomic import write_bytes_atomic, write_json_atomic
from training.run.data import load_run_market, recorded_splits
from training.run.folder import LoadedModel, RunDir
from training.run.model_file import SUFFIX, write_model_file

COMMANDS = ("importance", "prune", "attention")
SPLITS = ("train", "validation", "test", "all")


class UsageError(ValueError):
    """A command-line value out of its range (one line naming the option)."""


# --- shared steps -----------------------------------------------------------------------------


def load_market(loaded: LoadedModel, args: argparse.Namespace) -> MarketData:
    """The bars of `--data` with the run's loader settings."""
    return load_run_market(loaded.config, args.data, ticker=args.ticker)


def split_env(loaded: LoadedModel, market: MarketData, split: str) -> TradingEnv:
    """An env over one split of `market`: the bars of `market` in that range of the run's dates."""
    splits = recorded_splits(RunDir(loaded.run_dir).splits, market, loaded.config.data)
    bars = None if split == "all" else getattr(splits, split)
    if bars is not None and len(bars) == 0:
        raise DataError(f"{market.source}: the run's config leaves no {split} bars")
    return evaluation_env(market, loaded.config.env, bars)


def measure(
    loaded: LoadedModel, env: TradingEnv, args: argparse.Namespace
) -> tuple[ImportanceBatch, dict[str, Any]]:
    """Importance of every head on one pass over `env`: the pass, and the scores as JSON data."""
    ppo = loaded.config.ppo
    batch = collect_batch(
        loaded.policy,
        env,
        gamma=ppo.gamma,
        gae_lambda=ppo.gae_lambda,
        deterministic=args.deterministic,
        seed=args.seed,
    )
    # Advantages standardised (head_importance's default), as PPO does by default in training.
    raw = head_importance(loaded.policy, batch, ent_coef=ppo.ent_coef, vf_coef=ppo.vf_coef)
    trunk_config = loaded.policy.trunk.config
    mode = resolve_normalization(args.normalize, trunk_config.block_heads)
    shown = normalized(raw, mode)
    return batch, {
        "model": str(loaded.path),
        "data": str(args.data),
        "ticker": args.ticker,
        "split": args.split,
        "bars": [int(env.core.first_bar), int(env.core.end_bar)],
        "samples": len(batch),
        "actions": "deterministic" if args.deterministic else f"sampled (seed {args.seed})",
        "trunk": dataclasses.asdict(trunk_config),
        "normalization": mode,
        "layout": "[layer][head]; null: a head the layer no longer has",
        "importance": {target: shown[target].tolist() for target in TARGETS},
        "raw_importance": {target: raw[target].tolist() for target in TARGETS},
    }


def scores_title(result: dict[str, Any]) -> str:
    """The heatmap title: what was measured, on what."""
    norm = "l2-normalised per layer" if result["normalization"] == "layer" else "raw"
    return (
        f"head importance E|dL/dxi| ({norm}), {result['samples']} steps of the "
        f"{result['split']} bars, actions {result['actions']}"
    )


def as_arrays(scores: dict[str, list]) -> dict[str, np.ndarray]:
    """JSON lists (null for absent heads) back to float arrays with NaN."""
    return {key: np.array(value, dtype=float) for key, value in scores.items()}


def print_scores(scores: dict[str, np.ndarray]) -> None:
    """One line per head: its score for every target."""
    print("layer head " + " ".join(f"{target:>10}" for target in scores))
    first = next(iter(scores.values()))
    for (layer, head), value in np.ndenumerate(first):
        if np.isfinite(value):
            row = " ".join(f"{scores[t][layer, head]:10.4g}" for t in scores)
            print(f"{layer:5d} {head:4d} {row}")


def print_curve(curve: list[dict[str, Any]], pruned: dict[str, Any]) -> None:
    """The pruning curve as a table, and what the saved pruned model is."""
    print("share  heads  val Sharpe  val return %")
    for point in curve:
        print(f"{point['share']:5.0%}  {point['heads_pruned']:5d}  {point['sharpe']:10.3f}  "
              f"{point['total_return_pct']:12.2f}")  # fmt: skip
    before, after = pruned["trunk_parameters"]
    print(f"pruned model: {pruned['heads_per_layer']} heads per block, trunk parameters "
          f"{before:,} -> {after:,}; max |logit difference| vs the gated model "
          f"{pruned['max_abs_logit_difference_vs_gated']:.2e}, identical actions: "
          f"{pruned['identical_deterministic_actions']}")  # fmt: skip


# --- commands ---------------------------------------------------------------------------------


FolderFor = Callable[[Sequence[str]], Path]
"""The folder to write the named files to (`run_<command>`'s third argument)."""


def run_importance(
    loaded: LoadedModel, args: argparse.Namespace, folder_for: FolderFor
) -> list[Path]:
    """`importance`: importance.json and importance.png."""
    out = folder_for(["importance.json", "importance.png"])
    env = split_env(loaded, load_market(loaded, args), args.split)
    _, result = measure(loaded, env, args)
    shown = as_arrays(result["importance"])
    picture = figure_png(importance_figure(shown, scores_title(result)))
    print_scores(shown)
    return [
        write_json_atomic(out / "importance.json", result),
        write_bytes_atomic(out / "importance.png", picture),
    ]


def run_prune(loaded: LoadedModel, args: argparse.Namespace, folder_for: FolderFor) -> list[Path]:
    """`prune`: pruning.json, pruning.png, pruned_model.safetensors and its config.yaml."""
    if not 0.0 <= args.share < 1.0:
        raise UsageError(f"--share: expected a fraction in [0, 1), got {args.share}")
    out = folder_for(["pruning.json", "pruning.png", f"pruned_model{SUFFIX}", "config.yaml"])
    market = load_market(loaded, args)
    batch, result = measure(loaded, split_env(loaded, market, args.split), args)
    order = pruning_order(np.array(result["importance"][args.rank_by], dtype=float))
    curve = pruning_curve(loaded.policy, split_env(loaded, market, "validation"), order)

    pruned = order[: heads_to_prune(args.share, len(order))]
    smaller, summary = prune_and_check(loaded.policy, pruned, batch.observations)
    config = dataclasses.replace(loaded.config, trunk=smaller.trunk.config)
    pruned_path = write_model_file(out / f"pruned_model{SUFFIX}", smaller, loaded.num_timesteps)
    summary["path"] = str(pruned_path)
    data = {**result, "ranked_by": args.rank_by, "order": [list(h) for h in order],
            "curve_split": "validation", "curve": curve, "pruned_model": summary}  # fmt: skip
    title = f"pruning by {args.rank_by} importance ({result['normalization']}), validation split"
    picture = figure_png(pruning_figure(curve, title))
    print_curve(curve, summary)
    return [
        write_json_atomic(out / "pruning.json", data),
        write_bytes_atomic(out / "pruning.png", picture),
        pruned_path,
        save_config(config, out / "config.yaml"),
    ]


def run_attention(
    loaded: LoadedModel, args: argparse.Namespace, folder_for: FolderFor
) -> list[Path]:
    """`attention`: attention_<date>.png and attention_<date>.json."""
    env = split_env(loaded, load_market(loaded, args), "all")
    bar = bar_at(env.core, args.date)
    snapshot = attention_at(loaded.policy, env.core, bar)
    when = snapshot.labels[-1]
    stem = f"attention_{when.replace(' ', 'T').replace(':', '')}"
    out = folder_for([f"{stem}.png", f"{stem}.json"])
    pooling = loaded.policy.trunk.config.pooling
    weights = snapshot.maps if args.full else snapshot.pooled
    what = "full maps (query rows, key columns)" if args.full else f"from the {pooling} row"
    title = f"attention on the window ending {when} (bar {bar}), {what}"
    picture = figure_png(attention_figure(weights, snapshot.labels, snapshot.gates, title,
                                          full=args.full))  # fmt: skip
    print(f"window ending {when} (bar {bar}); pooling {pooling}")
    data = {
        "model": str(loaded.path),
        "date": args.date,
        "bar": bar,
        "pooling": pooling,
        "tokens": snapshot.labels,
        "layout": "pooled[layer][head][token]; maps[layer][head][query][key]",
        "pooled": [w.tolist() for w in snapshot.pooled],
        "maps": [m.tolist() for m in snapshot.maps],
        "gates": snapshot.gates.tolist(),
    }
    return [
        write_bytes_atomic(out / f"{stem}.png", picture),
        write_json_atomic(out / f"{stem}.json", data),
    ]


RUNNERS = {"importance": run_importance, "prune": run_prune, "attention": run_attention}
