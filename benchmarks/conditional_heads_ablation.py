"""Ablation of `policy.conditional_heads`: PPO with and without conditional heads, several seeds.

With `conditional_heads=True` (the default) a flat `direction` leaves the `leverage` and `risk`
log-probabilities and entropies out of the PPO loss (see `agent.distribution`); with False the
three heads always count. This trains both settings for each seed on a fixed budget and
evaluates the deterministic policy over the validation range with the code `training.train`
uses (`training.attention.pruning.agent_metrics`: `FastPolicy.record_episode` over the whole range,
the actions of `model.predict`, then `training.evaluation.metrics.compute_metrics`).

Datasets:
- `googl`: the bundled GOOGL daily file (with `configs/default.yaml`'s loader settings and splits).
- `synthetic`: a series with an exploitable pattern: close-to-close log returns alternate in
  sign, r_t = a * (-1)^t + noise (a = --amplitude, noise N(0, --noise)), each bar opening at
  the previous close with small wicks. The next bar's sign is predictable from the last one,
  so a good policy trades every bar, and leverage and risk (stop distance) matter.
  The series is fixed (data seed 0); only the training seed varies.

A small trunk keeps it to a few minutes on 2 CPU cores: window 16, d_model 16, 2 heads,
1 layer; every other key comes from the config file. Both settings of a seed start from the
same initial weights and env seeds; a run is deterministic (the same seed gives the same
figures). The table gives mean +- sample std (ddof=1) over seeds of the validation Sharpe,
total return, exposure (share of bars in a position), average leverage while in a position
and training env-steps/s, then the paired difference True - False over seeds with its t
statistic, mean / (std / sqrt(n)): |t| below ~2 is within the noise of these seeds.

Usage:
    python benchmarks/conditional_heads_ablation.py [--seeds 5] [--timesteps 61440]
        [--datasets googl synthetic] [--threads 1] [--set ppo.n_epochs=8]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import shlex
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from machine import cpu_model
from stable_baselines3 import PPO
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import VecMonitor

from envs import BatchedTradingEnv, MarketData, TradingEnv, load_market_data
from envs.splits import Splits
from training.config import RunConfig, add_config_arguments, load_config
from training.evaluation.backtest import agent_metrics
from training.run.data import load_run_market, split_run_market
from training.run.session import build_model

REPO = Path(__file__).resolve().parents[1]

SMALL_TRUNK = [
    "env.window=16",  # the trunk reads the env's window
    "trunk.d_model=16",
    "trunk.n_heads=2",
    "trunk.n_layers=1",
    "policy.device=cpu",
]
METRICS = ("sharpe", "total_return_pct", "exposure_pct", "average_leverage")


# --- data -------------------------------------------------------------------------------------


def synthetic_frame(n_bars: int, amplitude: float, noise: float, seed: int = 0) -> pd.DataFrame:
    """OHLCV bars whose close-to-close log returns alternate in sign, plus Gaussian noise."""
    rng = np.random.default_rng(seed)
    signs = np.where(np.arange(n_bars) % 2 == 0, 1.0, -1.0)
    returns = amplitude * signs + rng.normal(0.0, noise, n_bars)
    close = 100.0 * np.exp(np.cumsum(returns))
    open_ = np.concatenate([[100.0], close[:-1]])  # each bar opens at the previous close
    wick = np.exp(np.abs(rng.normal(0.0, noise / 4, (2, n_bars))))
    return pd.DataFrame(
        {
            "Open": open_,
            "High": np.maximum(open_, close) * wick[0],
            "Low": np.minimum(open_, close) / wick[1],
            "Close": close,
            "Volume": rng.integers(1_000_000, 2_000_000, n_bars),
        },
        index=pd.bdate_range("2010-01-04", periods=n_bars, name="Date"),
    )


def load_dataset(name: str, cfg: RunConfig, args: argparse.Namespace) -> MarketData:
    """The bars of dataset `name` ('googl' or 'synthetic')."""
    if name == "googl":
        return load_run_market(cfg, REPO / "data" / "gymanytrading_GOOGL_daily.csv")
    frame = synthetic_frame(args.synthetic_bars, args.amplitude, args.noise)
    return load_market_data(frame, ticker="SYNTH")


def warm_up(market: MarketData, splits: Splits, cfg: RunConfig) -> None:
    """Step a batched env once, so that compiling its kernel is not timed as training."""
    env = BatchedTradingEnv(market, cfg.env, n_envs=cfg.ppo.n_envs, bars=splits.train)
    env.reset()
    env.step(np.zeros((cfg.ppo.n_envs, 3), dtype=np.int64))


# --- one run ----------------------------------------------------------------------------------


def train(market: MarketData, splits: Splits, cfg: RunConfig, timesteps: int) -> tuple[PPO, float]:
    """Train PPO (built as `training.train` builds it) for `timesteps`; return it and steps/s."""
    set_random_seed(cfg.train.seed)
    env = BatchedTradingEnv(market, cfg.env, n_envs=cfg.ppo.n_envs, bars=splits.train)
    env.seed(cfg.train.seed)
    model = build_model(cfg, VecMonitor(env), None)  # no event files
    start = time.perf_counter()
    model.learn(timesteps)
    return model, timesteps / (time.perf_counter() - start)


def validate(model: PPO, market: MarketData, splits: Splits, cfg: RunConfig) -> dict[str, float]:
    """Metrics of the deterministic policy over the whole validation range."""
    env = TradingEnv(
        market, cfg.env, bars=splits.validation, random_start=False, episode_length=None
    )
    return agent_metrics(model.policy, env)


def run_one(
    market: MarketData,
    splits: Splits,
    base: RunConfig,
    conditional: bool,
    seed: int,
    timesteps: int,
) -> dict[str, float]:
    """Train one setting with one seed; return its validation metrics and training steps/s."""
    cfg = dataclasses.replace(
        base,
        policy=dataclasses.replace(base.policy, conditional_heads=conditional),
        train=dataclasses.replace(base.train, seed=seed),
    )
    model, steps_per_second = train(market, splits, cfg, timesteps)
    metrics = validate(model, market, splits, cfg)
    return {**{key: float(metrics[key]) for key in METRICS}, "steps_per_s": steps_per_second}


# --- report -----------------------------------------------------------------------------------


def mean_std(values: list[float], digits: int = 2) -> str:
    """'mean +- std' (sample std; no std for one value) of the finite values; NaNs are counted."""
    finite = [v for v in values if np.isfinite(v)]
    if not finite:
        return "nan"
    text = f"{np.mean(finite):,.{digits}f}"
    text += f" +- {np.std(finite, ddof=1):,.{digits}f}" if len(finite) > 1 else ""
    missing = len(values) - len(finite)
    return text + (f" ({missing} nan)" if missing else "")


def paired(values: list[float], digits: int = 2) -> str:
    """'mean +- std (t ...)' of paired differences; t = mean / (std / sqrt(n))."""
    finite = np.array([v for v in values if np.isfinite(v)])
    if len(finite) < 2 or finite.std(ddof=1) == 0:
        return mean_std(values, digits)
    t = finite.mean() / (finite.std(ddof=1) / np.sqrt(len(finite)))
    return f"{mean_std(values, digits)} (t {t:.1f})"


COLUMNS = {  # table column -> (result key, digits)
    "val Sharpe": ("sharpe", 2),
    "val return %": ("total_return_pct", 1),
    "exposure %": ("exposure_pct", 1),
    "avg leverage": ("average_leverage", 2),
    "train env-steps/s": ("steps_per_s", 0),
}


def summary_table(results: pd.DataFrame) -> str:
    """Markdown table: mean +- std per dataset and setting, then the paired True - False."""
    header = ["dataset", "conditional_heads", "seeds", *COLUMNS]
    rows = []
    for (dataset, conditional), group in results.groupby(["dataset", "conditional"], sort=False):
        cells = [mean_std(group[key].tolist(), digits) for key, digits in COLUMNS.values()]
        rows.append([dataset, str(conditional), str(len(group)), *cells])
    for dataset, group in results.groupby("dataset", sort=False):
        by_seed = group.pivot(index="seed", columns="conditional")
        diffs = {
            key: (by_seed[key][True] - by_seed[key][False]).tolist() for key, _ in COLUMNS.values()
        }
        cells = [paired(diffs[key], digits) for key, digits in COLUMNS.values()]
        rows.append([dataset, "True - False (paired)", str(len(by_seed)), *cells])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_arguments(parser)
    parser.add_argument("--seeds", type=int, default=5, help="training seeds 0..N-1")
    parser.add_argument("--timesteps", type=int, default=61_440, help="env steps per run")
    parser.add_argument(
        "--datasets",
        nargs="+",
        default=["googl", "synthetic"],
        choices=["googl", "synthetic"],
        help="datasets to train on",
    )
    parser.add_argument("--synthetic-bars", type=int, default=2_000, help="synthetic series size")
    parser.add_argument(
        "--amplitude",
        type=float,
        default=0.005,
        help="synthetic: alternating log-return size per bar",
    )
    parser.add_argument(
        "--noise",
        type=float,
        default=0.01,
        help="synthetic: std of the Gaussian noise on each log return",
    )
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)
    if args.threads:
        torch.set_num_threads(args.threads)

    base = load_config(args.config, SMALL_TRUNK + args.overrides)
    cores = len(os.sched_getaffinity(0))
    print("# Conditional heads ablation")
    print(f"date (UTC): {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M:%S}")
    print(f"command: {shlex.join(['python', *sys.argv])}")
    print(
        f"machine: {cpu_model()}, {cores} cores, "
        f"torch threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.2f}"
    )
    t, p = base.trunk, base.ppo
    print(
        f"trunk: window {base.env.window}, d_model {t.d_model}, n_heads {t.n_heads}, "
        f"n_layers {t.n_layers}; ppo: n_envs {p.n_envs}, n_steps {p.n_steps}, "
        f"batch_size {p.batch_size}, n_epochs {p.n_epochs}, ent_coef {p.ent_coef}; "
        f"{args.timesteps:,} timesteps per run, seeds 0..{args.seeds - 1}"
    )

    rows = []
    for dataset in args.datasets:
        market = load_dataset(dataset, base, args)
        splits = split_run_market(market, base.data)
        warm_up(market, splits, base)
        print(
            f"\n{dataset}: {len(market)} bars; train {len(splits.train)}, "
            f"validation {len(splits.validation)} bars"
        )
        for seed in range(args.seeds):
            for conditional in (True, False):
                result = run_one(market, splits, base, conditional, seed, args.timesteps)
                rows.append(
                    {"dataset": dataset, "conditional": conditional, "seed": seed, **result}
                )
                print(
                    f"  seed {seed} conditional_heads={conditional!s:5}: "
                    + ", ".join(f"{k} {v:,.2f}" for k, v in result.items()),
                    flush=True,
                )
    print()
    print(summary_table(pd.DataFrame(rows)))


if __name__ == "__main__":
    main()
