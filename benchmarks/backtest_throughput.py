"""Backtest throughput: `FastPolicy` against the step-by-step `model.predict` loop, in one run.

Both run the deterministic agent over the same bars of the same file: the reference through
`TradingEnv` + `training.evaluation.rollout.record_episode` (a row per decision, every
`env.decision_interval` bars), the fast path through `FastPolicy.record_episode` (a row per bar:
the trunk over all windows in batches, then one compiled loop of the heads and the env's execution
kernel). Their records must agree (checked): `FastPolicy` through `TradingEnv.step` gives the
reference's record exactly, and the fast path's rows at each decision give its account and
actions. Throughputs are in bars backtested per second, whatever the interval. The model has
the trunk of `configs/default.yaml` and is untrained: speed does not depend on the weights, except
that near ties (`training.evaluation.fast_inference`) are rarer in a trained model; `--model` takes
a trained one instead. Prints bars/s of each and their ratio, how the fast path's time splits
between the batched trunk and the loop, and, for comparison, `FastPolicy` used as a policy
through `TradingEnv.step` (a Python loop) and that loop's floor with a constant policy.

The step-by-step loop runs torch on one thread, its fastest setting for batch-1 inference (on a
busy machine, two threads spin against each other and make it several times slower); the fast path
runs the batched trunk on `--threads` threads. Numba compilation is excluded (one warm-up run);
the fast path is timed `--repeats` times (median).

Usage: python benchmarks/backtest_throughput.py [--data CSV] [--ticker T] [--threads 2]
                                               [--model RUN_DIR] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pandas as pd
import torch
from machine import cpu_model

from agent import policy_of
from envs import BatchedTradingEnv, TradingEnv, load_market_data
from training.config import DEFAULT_CONFIG_PATH, load_config
from training.evaluation.backtest import record_strategy
from training.evaluation.baselines import baseline_env, flat
from training.evaluation.fast_inference import FastPolicy
from training.evaluation.rollout import record_episode
from training.run.folder import load_model
from training.run.session import build_model

DATA = Path(__file__).resolve().parents[1] / "data" / "gymanytrading_GOOGL_daily.csv"


def timed(run) -> tuple[float, object]:
    """(seconds, result) of `run()`."""
    start = time.perf_counter()
    result = run()
    return time.perf_counter() - start, result


# The columns a per-bar record shares with a per-decision one at each decision: the account and
# the actions (costs and fills add up over the bars a decision holds for)
DECIDED_COLUMNS = ("timestamp", "equity", "position", "direction", "leverage", "risk")


def at_decisions(record: pd.DataFrame, interval: int) -> pd.DataFrame:
    """The per-bar `record`'s rows at each decision, every `interval` bars from the start, and at
    its end: where a per-decision record of the same episode has its rows, in `DECIDED_COLUMNS`."""
    steps = len(record) - 1
    rows = sorted({*range(0, steps, interval), steps})
    return record.iloc[rows][list(DECIDED_COLUMNS)].reset_index(drop=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="OHLCV CSV")
    parser.add_argument("--ticker", help="ticker of a multi-ticker CSV")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the fast path")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of the fast path")
    parser.add_argument("--model", type=Path, help="a trained run folder or model file instead")
    args = parser.parse_args()

    market = load_market_data(args.data, ticker=args.ticker)
    if args.model:
        loaded = load_model(args.model)
        cfg, policy = loaded.config, loaded.policy
        print(f"model: {loaded.path}")
    else:
        cfg = load_config(DEFAULT_CONFIG_PATH, ["policy.device=cpu"])
        env = BatchedTradingEnv(market, cfg.env, n_envs=2)
        policy = policy_of(build_model(cfg, env, None))
        print("model: untrained, configs/default.yaml")
    env = TradingEnv(market, cfg.env, random_start=False, episode_length=None)
    bars = env.core.end_bar - env.core.first_bar
    interval = cfg.env.decision_interval
    print(f"{market!r}, {bars} bars (a decision every {interval}), window {cfg.env.window}")
    print(f"trunk {cfg.trunk}")
    print(
        f"{cpu_model()}, {os.cpu_count()} CPUs visible, "
        f"load average {os.getloadavg()[0]:.1f}, torch {torch.__version__}"
    )

    torch.set_num_threads(1)
    step_seconds, step_record = timed(
        lambda: record_episode(env, lambda obs: policy.predict(obs, deterministic=True)[0])
    )

    torch.set_num_threads(args.threads)
    FastPolicy(policy, env.core).record_episode()  # warm-up: numba compiles
    runs = []
    for _ in range(args.repeats):
        build_seconds, fast = timed(lambda: FastPolicy(policy, env.core))
        loop_seconds, fast_record = timed(fast.record_episode)
        runs.append((build_seconds + loop_seconds, build_seconds, loop_seconds, fast))
    fast_seconds, build_seconds, loop_seconds, fast = sorted(runs, key=lambda run: run[0])[
        len(runs) // 2
    ]
    via_env_seconds, via_env_record = timed(
        lambda: record_strategy(env, FastPolicy(policy, env.core))
    )
    floor_env = baseline_env(env)  # the same bars; the baselines' levels
    floor_seconds, _ = timed(lambda: record_strategy(floor_env, flat(floor_env.core.config)))

    same = step_record.equals(via_env_record) and at_decisions(fast_record, interval).equals(
        step_record[list(DECIDED_COLUMNS)]
    )
    assert same, "FastPolicy's record differs from the model.predict loop's"
    rows = {
        "step-by-step model.predict, 1 thread": step_seconds,
        f"FastPolicy.record_episode, {args.threads} thread(s)": fast_seconds,
        "FastPolicy as a policy via TradingEnv.step": via_env_seconds,
        "TradingEnv.step loop, constant policy": floor_seconds,
    }
    for label, seconds in rows.items():
        print(f"{label:<46}{bars / seconds:>10,.0f} bars/s")
    print(
        f"FastPolicy.record_episode (median of {args.repeats}): trunk over all windows "
        f"{build_seconds * 1e3:.0f} ms, compiled loop {loop_seconds * 1e3:.0f} ms "
        f"({fast.fallbacks} near-tie steps through model.predict)"
    )
    print(
        f"ratio: {step_seconds / fast_seconds:.1f}x; records agree at every decision "
        f"(every {interval} bars): {same}"
    )


if __name__ == "__main__":
    main()
