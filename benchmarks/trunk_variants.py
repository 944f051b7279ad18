"""Trunk variants on one budget: parameters, PPO env-steps/s and validation Sharpe over seeds.

Variants (`TrunkConfig`; the shape comes from the config file, `configs/default.yaml` by
default: d_model 32, 4 heads, 2 layers, window 32):

- `standard`: multi-head attention, pre-LN.
- `collaborative`: shared query/key projections of width d_model / 2 mixed per head
  (Cordonnier et al.), pre-LN.
- `deep_single_head`: the same heads re-arranged as n_layers * n_heads blocks of one head, the
  MLP width shared out among them (Liu et al. 2021), pre-LN.
- `deep_single_head_admin`: the same, post-LN with Admin residual scales (Liu et al. 2020).
- `deep_single_head_post_ln`: post-LN without Admin, the setting where Liu et al. saw deep
  single-head models fail to train (the control for Admin).

For each seed (outer loop, so a drift in machine load touches every variant alike) and variant:
PPO built as `training.train` builds it on the `BatchedTradingEnv` over the train split, trained
for `--timesteps`; env-steps/s is timesteps / wall time of `learn()` (rollouts and updates,
TensorBoard off). The deterministic policy is then backtested on the whole validation range
(`training.attention.pruning.agent_metrics`: `record_episode` + `compute_metrics`). The table gives
mean +- sample std over seeds; "nan" counts runs whose Sharpe is undefined (no position held).
A last row gives buy-and-hold (`training.evaluation.baselines`) on the same validation range,
for scale.

A second table times the trunk's forward pass (no grad, freshly initialised weights) of each
variant whole, with every other head masked by its gate, and with those heads pruned out
(`agent.pruning.prune_trunk`): the best of 3 repeats of the mean over `--forward-repeats`
calls, at batch 1 (one step of a backtest) and 256 (a PPO minibatch).

Usage:
    python benchmarks/trunk_variants.py [--seeds 3] [--timesteps 16384] [--threads 2]
        [--variants standard collaborative ...] [--set trunk.d_model=64]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime
import math
import os
import shlex
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from machine import cpu_model
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import VecMonitor

from agent.pruning import prune_trunk
from agent.trunk import AttentionTrunk
from envs import BatchedTradingEnv, MarketData, TradingEnv
from envs.features import FEATURE_NAMES
from envs.splits import Splits
from training.attention.pruning import parameter_count
from training.config import RunConfig, add_config_arguments, load_config
from training.evaluation.backtest import agent_metrics, strategy_metrics
from training.evaluation.baselines import baseline_env, buy_and_hold
from training.run.data import load_run_market, split_run_market
from training.run.session import build_model

REPO = Path(__file__).resolve().parents[1]

VARIANTS = {
    "standard": [],
    "collaborative": ["trunk.attention=collaborative"],  # d_shared set from d_model in main
    "deep_single_head": ["trunk.layout=deep_single_head"],
    "deep_single_head_admin": ["trunk.layout=deep_single_head", "trunk.residual=admin"],
    "deep_single_head_post_ln": ["trunk.layout=deep_single_head", "trunk.residual=post_ln"],
}


def data(cfg: RunConfig) -> tuple[MarketData, Splits]:
    """The bundled GOOGL file's bars (with the config's loader settings) and their split."""
    market = load_run_market(cfg, REPO / "data" / "gymanytrading_GOOGL_daily.csv")
    return market, split_run_market(market, cfg.data)


def validation_env(cfg: RunConfig) -> TradingEnv:
    """An env over the whole validation range."""
    market, splits = data(cfg)
    return TradingEnv(market, cfg.env, bars=splits.validation, random_start=False,
                      episode_length=None)  # fmt: skip


def buy_and_hold_row(cfg: RunConfig) -> str:
    """The reference row: buy-and-hold over the validation range."""
    env = baseline_env(validation_env(cfg))
    metrics = strategy_metrics(env, buy_and_hold(env.core.config))
    numbers = [f"{metrics['sharpe']:.2f}", f"{metrics['total_return_pct']:.1f}",
               f"{metrics['exposure_pct']:.1f}"]  # fmt: skip
    cells = ["buy_and_hold (reference)", "-", "-", "-", *numbers, "-"]
    return "| " + " | ".join(cells) + " |"


def run_one(cfg: RunConfig, timesteps: int) -> dict[str, float]:
    """Train one variant with one seed; its sizes, env-steps/s and validation metrics."""
    set_random_seed(cfg.train.seed)
    market, splits = data(cfg)
    env = BatchedTradingEnv(market, cfg.env, n_envs=cfg.ppo.n_envs, bars=splits.train)
    env.seed(cfg.train.seed)
    model = build_model(cfg, VecMonitor(env), None)  # no event files
    start = time.perf_counter()
    model.learn(timesteps)
    seconds = time.perf_counter() - start
    metrics = agent_metrics(model.policy, validation_env(cfg))
    return {
        "trunk_params": parameter_count(model.policy.trunk),
        "policy_params": parameter_count(model.policy),
        "steps_per_s": timesteps / seconds,
        "sharpe": float(metrics["sharpe"]),
        "total_return_pct": float(metrics["total_return_pct"]),
        "exposure_pct": float(metrics["exposure_pct"]),
    }


def forward_times(cfg: RunConfig, batch: int, repeats: int) -> dict[str, float]:
    """Microseconds per trunk forward: whole, half the heads gated off, those heads pruned."""
    torch.manual_seed(0)
    whole = AttentionTrunk(cfg.trunk, cfg.env.window, len(FEATURE_NAMES)).eval()
    keep = torch.arange(whole.head_gates.numel()).reshape(whole.head_gates.shape) % 2 == 0
    gated = copy.deepcopy(whole)
    gated.set_head_gates(keep.float())
    market = torch.randn(batch, whole.window, whole.n_features)
    trunks = {"whole": whole, "gated": gated, "pruned": prune_trunk(whole, keep)}
    times = {}
    with torch.no_grad():
        for name, trunk in trunks.items():
            trunk(market)  # warm-up
            best = math.inf
            for _ in range(3):
                start = time.perf_counter()
                for _ in range(repeats):
                    trunk(market)
                best = min(best, (time.perf_counter() - start) / repeats)
            times[name] = best * 1e6
    return times


def forward_table(configs: dict[str, RunConfig], repeats: int) -> str:
    """Markdown: trunk forward time per variant and batch size."""
    header = ["variant", "batch", "whole", "half the heads gated off", "those heads pruned",
              "pruned / gated"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, cfg in configs.items():
        for batch in (1, 256):
            t = forward_times(cfg, batch, repeats if batch == 1 else max(1, repeats // 10))
            cells = [name, str(batch), *(f"{t[k]:,.0f} us" for k in ("whole", "gated", "pruned")),
                     f"{t['pruned'] / t['gated']:.2f}"]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(values: list[float], digits: int) -> str:
    """'mean +- std' of the finite values (sample std), with the count of NaN runs."""
    finite = np.array([v for v in values if np.isfinite(v)])
    if finite.size == 0:
        return f"nan ({len(values)} nan)"
    text = f"{finite.mean():.{digits}f}"
    if finite.size > 1:
        text += f" +- {finite.std(ddof=1):.{digits}f}"
    missing = len(values) - finite.size
    return text + (f" ({missing} nan)" if missing else "")


def table(results: dict[str, list[dict[str, float]]]) -> str:
    """Markdown: one row per variant."""
    header = ["variant", "trunk params", "policy params", "train env-steps/s", "val Sharpe",
              "val return %", "exposure %", "per seed Sharpe"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, runs in results.items():
        column = {key: [run[key] for run in runs] for key in runs[0]}
        per_seed = ", ".join(f"{s:.2f}" for s in column["sharpe"])
        lines.append("| " + " | ".join([
            name, f"{int(column['trunk_params'][0]):,}", f"{int(column['policy_params'][0]):,}",
            summary(column["steps_per_s"], 0), summary(column["sharpe"], 2),
            summary(column["total_return_pct"], 1), summary(column["exposure_pct"], 1), per_seed,
        ]) + " |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_arguments(parser)
    parser.add_argument("--seeds", type=int, default=3, help="training seeds 0..N-1")
    parser.add_argument("--timesteps", type=int, default=16_384, help="env steps per run")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument(
        "--forward-repeats",
        type=int,
        default=300,
        help="calls per timing at batch 1 (a tenth of it at batch 256)",
    )
    args = parser.parse_args()  # fmt: skip
    warnings.filterwarnings("ignore", category=UserWarning)
    if args.threads:
        torch.set_num_threads(args.threads)
    base = load_config(args.config, ["policy.device=cpu", *args.overrides])
    shared = [f"trunk.d_shared={base.trunk.d_model // 2}"]
    configs = {
        name: load_config(args.config, ["policy.device=cpu", *args.overrides, *VARIANTS[name],
                                        *(shared if name == "collaborative" else [])])
        for name in args.variants
    }  # fmt: skip

    started = time.perf_counter()
    print("## Trunk variants\n")
    print(f"date (UTC): {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M:%S}  ")
    print(f"command: `{shlex.join(['python', *sys.argv])}`  ")
    print(
        f"machine: {cpu_model()}, "
        f"{len(os.sched_getaffinity(0))} cores, torch {torch.__version__} with "
        f"{torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.2f} at start  "
    )
    t, p = base.trunk, base.ppo
    print(f"shape: window {base.env.window}, d_model {t.d_model}, {t.n_heads} heads x {t.n_layers} "
          f"layers, mlp_ratio {t.mlp_ratio}; ppo: {p.n_envs} envs x {p.n_steps} steps, batch "
          f"{p.batch_size}, {p.n_epochs} epochs; {args.timesteps:,} timesteps per run, seeds "
          f"0..{args.seeds - 1}; data {base.data.path}\n")  # fmt: skip
    results: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
    for seed in range(args.seeds):
        for name, cfg in configs.items():
            cfg.train = dataclasses.replace(cfg.train, seed=seed)
            run = run_one(cfg, args.timesteps)
            results[name].append(run)
            print(f"<!-- seed {seed} {name}: " + ", ".join(f"{k} {v:,.3f}" for k, v in run.items())
                  + " -->", flush=True)  # fmt: skip
    print()
    print(table(results))
    print(buy_and_hold_row(base))
    print()
    print(forward_table(configs, args.forward_repeats))
    minutes = (time.perf_counter() - started) / 60
    print(f"\n{minutes:.1f} min in all; load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
