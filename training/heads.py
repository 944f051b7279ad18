"""Attention heads of a trained agent: importance, pruning and attention maps.

    python -m training.heads [importance] --model RUN_DIR --data CSV [--ticker T] [--out DIR]
        [--split train|validation|test|all] [--deterministic] [--seed 0]
        [--normalize auto|layer|none]
    python -m training.heads prune --model RUN_DIR --data CSV [--share 0.3]
        [--rank-by ppo_loss|direction|leverage|risk|value] [the importance options]
    python -m training.heads attention --model RUN_DIR --data CSV --date 2017-06-30 [--full]

`importance` (the default command) measures each head's importance ``E|dL/dxi_h|`` (Michel et
al. 2019; `training.head_importance`) for the PPO loss, each decision head's log-probability
(`direction`, `leverage`, `risk`) and the value, over one pass of the policy through the
`--split` bars of the data (default `train`: the bars it learned on), actions sampled from the
policy (`--deterministic`: the most likely ones). Writes `importance.json` (raw and shown
scores) and `importance.png` (layer x head, one panel per target; per-layer l2-normalised as
Michel et al. when every layer has two or more heads, raw otherwise: `--normalize`).

`prune` ranks the heads by that importance (`--rank-by`, default the PPO loss), masks 0%, 10%,
..., 90% of them least important first and backtests each on the validation split: `pruning.json`
and `pruning.png`. It then saves the model with `--share` of the heads physically removed,
`pruned_model.zip`, with the run's `config.yaml` next to it (trunk.heads_per_layer set), so
`--model OUT/pruned_model.zip` works here and in `training.backtest`; it checks that the pruned
model's logits match the gated model's and its actions are identical.

`attention` draws, for the bar at `--date` (the last bar on or before it), each head's attention
weights over the window from the pooled position (`--full`: the whole T x T maps):
`attention_<date>.png` and `.json`.

`--model` is a run folder (its `best_model.zip`, else `final_model.zip`) or a model zip with its
run's `config.yaml` next to it; the config gives the env settings and the splits. Outputs go to
`--out` (default `<run_dir>/heads`), each file written atomically. A user mistake (not one of
our models, data that does not fit it, a bad date or share) prints one line on stderr and
exits with code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from envs import DataError, MarketData, TradingEnv
from training.atomic import write_atomic, write_json_atomic
from training.attention_maps import DateError, attention_at, bar_at
from training.backtest import BacktestError, LoadedModel, check_fits, load_model
from training.cli import add_model_and_data_arguments, reports_user_errors
from training.config import save_config
from training.data import load_run_market, split_run_market
from training.head_importance import (
    TARGETS,
    ImportanceBatch,
    collect_batch,
    head_importance,
    normalized,
    resolve_normalization,
)
from training.head_plots import attention_figure, figure_png, importance_figure, pruning_figure
from training.head_pruning import heads_to_prune, prune_and_check, pruning_curve, pruning_order
from training.run_dir import save_model_atomic

COMMANDS = ("importance", "prune", "attention")
SPLITS = ("train", "validation", "test", "all")


class UsageError(ValueError):
    """A command-line value out of its range (one line naming the option)."""


# --- shared steps -----------------------------------------------------------------------------


def load_market(loaded: LoadedModel, args: argparse.Namespace) -> MarketData:
    """The bars of `--data` with the run's loader settings."""
    cfg = dataclasses.replace(
        loaded.config, data=dataclasses.replace(loaded.config.data, ticker=args.ticker)
    )
    return load_run_market(cfg, args.data)


def split_env(loaded: LoadedModel, market: MarketData, split: str) -> TradingEnv:
    """An env over one split of `market` (the run's split settings), checked against the model."""
    splits = split_run_market(market, loaded.config.data)
    bars = None if split == "all" else getattr(splits, split)
    if bars is not None and len(bars) == 0:
        raise DataError(f"{market.source}: the run's config leaves no {split} bars")
    env = TradingEnv(market, loaded.config.env, bars=bars, random_start=False, episode_length=None)
    check_fits(loaded.model, env, loaded.path)
    return env


def measure(
    loaded: LoadedModel, env: TradingEnv, args: argparse.Namespace
) -> tuple[ImportanceBatch, dict[str, Any]]:
    """Importance of every head on one pass over `env`: the pass, and the scores as JSON data."""
    model = loaded.model
    batch = collect_batch(model, env, deterministic=args.deterministic, seed=args.seed)
    raw = head_importance(
        model.policy,
        batch,
        ent_coef=float(model.ent_coef),
        vf_coef=float(model.vf_coef),
        normalize_advantage=model.normalize_advantage,
    )
    trunk_config = model.policy.features_extractor.trunk.config
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


def run_importance(loaded: LoadedModel, args: argparse.Namespace, out: Path) -> list[Path]:
    """`importance`: importance.json and importance.png."""
    env = split_env(loaded, load_market(loaded, args), args.split)
    _, result = measure(loaded, env, args)
    shown = as_arrays(result["importance"])
    picture = figure_png(importance_figure(shown, scores_title(result)))
    print_scores(shown)
    return [
        write_json_atomic(out / "importance.json", result),
        write_atomic(out / "importance.png", lambda file: file.write(picture)),
    ]


def run_prune(loaded: LoadedModel, args: argparse.Namespace, out: Path) -> list[Path]:
    """`prune`: pruning.json, pruning.png, pruned_model.zip and its config.yaml."""
    if not 0.0 <= args.share < 1.0:
        raise UsageError(f"--share: expected a fraction in [0, 1), got {args.share}")
    market = load_market(loaded, args)
    batch, result = measure(loaded, split_env(loaded, market, args.split), args)
    order = pruning_order(np.array(result["importance"][args.rank_by], dtype=float))
    curve = pruning_curve(loaded.model.policy, split_env(loaded, market, "validation"), order)

    pruned = order[: heads_to_prune(args.share, len(order))]
    smaller, summary = prune_and_check(loaded.model, pruned, batch.observations)
    config = dataclasses.replace(
        loaded.config, trunk=smaller.policy.features_extractor.trunk.config
    )
    summary["path"] = str(save_model_atomic(smaller, out / "pruned_model.zip"))
    data = {**result, "ranked_by": args.rank_by, "order": [list(h) for h in order],
            "curve_split": "validation", "curve": curve, "pruned_model": summary}  # fmt: skip
    title = f"pruning by {args.rank_by} importance ({result['normalization']}), validation split"
    picture = figure_png(pruning_figure(curve, title))
    print_curve(curve, summary)
    return [
        write_json_atomic(out / "pruning.json", data),
        write_atomic(out / "pruning.png", lambda file: file.write(picture)),
        Path(summary["path"]),
        save_config(config, out / "config.yaml"),
    ]


def run_attention(loaded: LoadedModel, args: argparse.Namespace, out: Path) -> list[Path]:
    """`attention`: attention_<date>.png and attention_<date>.json."""
    env = split_env(loaded, load_market(loaded, args), "all")
    bar = bar_at(env.core, args.date)
    snapshot = attention_at(loaded.model.policy, env.core, bar)
    when = snapshot.labels[-1]
    pooling = loaded.model.policy.features_extractor.trunk.config.pooling
    weights = snapshot.maps if args.full else snapshot.pooled
    what = "full maps (query rows, key columns)" if args.full else f"from the {pooling} row"
    title = f"attention on the window ending {when} (bar {bar}), {what}"
    picture = figure_png(attention_figure(weights, snapshot.labels, snapshot.gates, title,
                                          full=args.full))  # fmt: skip
    stem = f"attention_{when.replace(' ', 'T').replace(':', '')}"
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
        write_atomic(out / f"{stem}.png", lambda file: file.write(picture)),
        write_json_atomic(out / f"{stem}.json", data),
    ]


RUNNERS = {"importance": run_importance, "prune": run_prune, "attention": run_attention}


# --- entry point ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options; the command defaults to `importance`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        argv.insert(0, "importance")
    parser = argparse.ArgumentParser(
        prog="python -m training.heads",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    add_model_and_data_arguments(common)
    common.add_argument("--out", type=Path, help="output folder (default <run_dir>/heads)")
    scoring = argparse.ArgumentParser(add_help=False)
    scoring.add_argument(
        "--split",
        choices=SPLITS,
        default="train",
        help="bars of the pass that measures importance (default train)",
    )
    scoring.add_argument(
        "--deterministic",
        action="store_true",
        help="take the most likely actions instead of sampling them",
    )
    scoring.add_argument("--seed", type=int, default=0, help="seed of the sampled actions")
    scoring.add_argument(
        "--normalize",
        choices=("auto", "layer", "none"),
        default="auto",
        help="per-layer l2 normalisation (auto: when every layer has >= 2 heads)",
    )
    commands.add_parser("importance", parents=[common, scoring], help="head importance")
    prune = commands.add_parser("prune", parents=[common, scoring], help="pruning curve + model")
    prune.add_argument(
        "--share",
        type=float,
        default=0.3,
        help="share of the heads the saved pruned model drops (default 0.3)",
    )
    prune.add_argument(
        "--rank-by",
        choices=TARGETS,
        default="ppo_loss",
        help="importance that orders the heads (default ppo_loss)",
    )
    attention = commands.add_parser("attention", parents=[common], help="attention maps")
    attention.add_argument("--date", required=True, help="date of the window's last bar")
    attention.add_argument("--full", action="store_true", help="draw the full T x T maps")
    return parser.parse_args(argv)


@reports_user_errors(BacktestError, DateError, UsageError)
def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; print where its files are. User mistakes exit 2 with one line."""
    args = parse_args(argv)
    loaded = load_model(args.model)
    out = args.out or loaded.run_dir / "heads"
    written = RUNNERS[args.command](loaded, args, out)
    print("\n".join(["written:", *(f"  {path}" for path in written)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
