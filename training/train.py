"""Train the multi-head agent with PPO: `python -m training.train [--config ...] [options]`.

Reads top to bottom: config -> data -> envs -> model -> learn -> save -> backtest -> summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import CallbackList
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import VecMonitor

from agent import MultiHeadPolicy
from envs import BatchedTradingEnv, MarketData, TradingEnv
from envs.features import FEATURE_NAMES
from training.backtest import backtest, format_next_order, load_model, write_report
from training.callbacks import (
    AtomicCheckpoint,
    HeadMonitor,
    HyperParameters,
    TradingMonitor,
    ValidationCallback,
    flatten,
)
from training.cli import INTERRUPTED_STATUS, reports_user_errors
from training.config import (
    REPO_ROOT,
    RunConfig,
    add_config_arguments,
    config_to_dict,
    load_config,
    save_config,
)
from training.data import load_run_market, split_run_market
from training.head_importance import HeadImportanceCallback
from training.metrics import format_metrics_table
from training.run_dir import RunDir, save_model_atomic

TB_RUN_NAME = "train"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options; `--set section.key=value` overrides any config key."""
    parser = argparse.ArgumentParser(prog="python -m training.train", description=__doc__)
    add_config_arguments(parser)
    parser.add_argument("--data", help="OHLCV CSV to train on (sets data.path)")
    parser.add_argument("--ticker", help="ticker to select in a multi-ticker CSV (data.ticker)")
    parser.add_argument("--run-dir", type=Path, help="output folder (default runs/<name>-<time>)")
    parser.add_argument(
        "--resume",
        type=Path,
        metavar="RUN_DIR",
        help="continue a run from its newest checkpoint, with its saved config "
        "(plus any --set, e.g. train.total_timesteps)",
    )
    return parser.parse_args(argv)


def resolve_config(args: argparse.Namespace) -> RunConfig:
    """The run's config: the resumed run's own, or the file plus command-line overrides."""
    overrides = list(args.overrides)
    if args.resume is not None:  # the run's own config; --set may extend it (total_timesteps)
        return load_config(RunDir(args.resume).config, overrides)
    if args.data:  # from the current folder (a config file's data.path is from the repo root)
        overrides.append(f"data.path={Path(args.data).expanduser().absolute()}")
    if args.ticker:
        overrides.append(f"data.ticker={args.ticker}")
    if args.run_dir:
        overrides.append(f"train.run_dir={args.run_dir}")
    return load_config(args.config, overrides)


def make_run_dir(cfg: RunConfig, resume: Path | None) -> RunDir:
    """The resumed run's folder, the configured one, or a fresh `runs/<name>-<time>`."""
    if resume is not None:
        return RunDir(resume)
    if cfg.train.run_dir:
        root = Path(cfg.train.run_dir)
        root.mkdir(parents=True, exist_ok=True)
        return RunDir(root)
    return RunDir.new(REPO_ROOT / "runs", cfg.train.name)


def build_model(cfg: RunConfig, env: BatchedTradingEnv, run: RunDir) -> PPO:
    """PPO with the multi-head policy, configured from `cfg`."""
    ppo = dataclasses.asdict(cfg.ppo)
    ppo.pop("n_envs")
    policy_kwargs = dict(
        trunk=dataclasses.asdict(cfg.trunk),
        flat_direction_index=cfg.env.flat_direction_index,
        conditional_heads=cfg.policy.conditional_heads,
        head_hidden=cfg.policy.head_hidden,
        account_dim=cfg.policy.account_dim,
        use_bf16=cfg.policy.bf16,
    )
    return PPO(
        MultiHeadPolicy,
        env,
        policy_kwargs=policy_kwargs,
        seed=cfg.train.seed,
        device=cfg.policy.device,
        tensorboard_log=str(run.tensorboard),
        verbose=0,
        **ppo,
    )


def prepare_torch(cfg: RunConfig) -> None:
    """Seed Python, NumPy and torch, and set torch's CPU threads when `train.threads` is set."""
    set_random_seed(cfg.train.seed)
    if cfg.train.threads is not None:
        torch.set_num_threads(cfg.train.threads)


def train(cfg: RunConfig, run: RunDir, resume: bool) -> dict[str, Path]:
    """Train (or continue) the run; return where the outputs are."""
    prepare_torch(cfg)
    market = load_run_market(cfg)
    splits = split_run_market(market, cfg.data)
    print(
        f"training {run.root}: {market.source}, {len(splits.train):,} train / "
        f"{len(splits.validation):,} validation / {len(splits.test):,} test bars, "
        f"{cfg.train.total_timesteps:,} timesteps, device {cfg.policy.device}, "
        f"torch CPU threads {torch.get_num_threads()}"
    )
    cfg.trunk = dataclasses.replace(cfg.trunk, n_features=len(FEATURE_NAMES))
    if not resume:
        save_config(cfg, run.config)

    train_env = BatchedTradingEnv(market, cfg.env, n_envs=cfg.ppo.n_envs, bars=splits.train)
    train_env.seed(cfg.train.seed)
    train_env = VecMonitor(train_env)
    whole_range = dict(random_start=False, episode_length=None)
    validation_env = TradingEnv(market, cfg.env, bars=splits.validation, **whole_range)

    checkpoint = run.latest_checkpoint() if resume else None
    if checkpoint is not None:
        model = PPO.load(
            checkpoint,
            env=train_env,
            device=cfg.policy.device,
            tensorboard_log=str(run.tensorboard),
        )
        print(f"resuming from {checkpoint} at {model.num_timesteps:,} timesteps")
    else:
        model = build_model(cfg, train_env, run)

    callbacks = [
        HeadMonitor(cfg.env),
        TradingMonitor(),
        HyperParameters(flatten(config_to_dict(cfg))),
    ]
    if cfg.train.checkpoint_every:
        callbacks.append(AtomicCheckpoint(run, cfg.train.checkpoint_every))
    if cfg.train.importance_every:
        callbacks.append(HeadImportanceCallback(cfg.train.importance_every))
    validation = ValidationCallback(validation_env, run, cfg.train.eval_every or 1)
    if cfg.train.eval_every:
        callbacks.append(validation)
    remaining = cfg.train.total_timesteps - model.num_timesteps
    if remaining > 0:
        model.learn(
            remaining,
            callback=CallbackList(callbacks),
            tb_log_name=TB_RUN_NAME,
            reset_num_timesteps=checkpoint is None,
            progress_bar=cfg.train.progress_bar,
            log_interval=cfg.train.log_interval,
        )
    save_model_atomic(model, run.final_model)
    if not run.best_model.exists():  # no validation pass happened: the final model is the best
        validation.init_callback(model)
        validation.evaluate()

    test_env = TradingEnv(market, cfg.env, bars=splits.test, **whole_range)
    # The model `python -m training.backtest --model RUN_DIR` reads: best_model.zip, else final.
    result = backtest(load_model(run.root).model, test_env)
    report = write_report(result, run.report, f"{run.root.name} on the test split")
    print(f"\nbacktest of the test split ({len(splits.test)} bars), agent vs baselines:")
    print(format_metrics_table(result.metrics))
    print(f"\n{format_next_order(result)}")
    return {
        "final model": run.final_model,
        "best model (validation Sharpe)": run.best_model,
        "TensorBoard logs": run.tensorboard,
        "backtest report (test split)": report,
    }


def train_on_bars(cfg: RunConfig, market: MarketData, bars: range, run: RunDir) -> PPO:
    """A fresh model trained for `cfg.train.total_timesteps` on the bars `bars` of `market`.

    No checkpoints, validation or saving: the training step of each fold of
    `training.walkforward`. TensorBoard logs go to `run.tensorboard`.
    """
    prepare_torch(cfg)
    env = BatchedTradingEnv(market, cfg.env, n_envs=cfg.ppo.n_envs, bars=bars)
    env.seed(cfg.train.seed)
    model = build_model(cfg, VecMonitor(env), run)
    model.learn(
        cfg.train.total_timesteps,
        callback=CallbackList([HeadMonitor(cfg.env), TradingMonitor()]),
        tb_log_name=TB_RUN_NAME,
        progress_bar=cfg.train.progress_bar,
        log_interval=cfg.train.log_interval,
    )
    return model


@reports_user_errors()
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: train, then print where everything is. User mistakes exit 2, one line."""
    args = parse_args(argv)
    cfg = resolve_config(args)
    run = make_run_dir(cfg, args.resume)
    try:
        outputs = train(cfg, run, resume=args.resume is not None)
    except KeyboardInterrupt:
        checkpoint = run.latest_checkpoint()
        saved = f"newest checkpoint {checkpoint}" if checkpoint else "no checkpoint yet"
        print(
            f"\ninterrupted ({saved}); continue with: python -m training.train --resume {run.root}",
            file=sys.stderr,
        )
        return INTERRUPTED_STATUS
    width = max(len(name) for name in outputs)
    print(f"\nrun finished: {run.root}")
    for name, path in outputs.items():
        print(f"  {name:<{width}}  {path}")
    print(f"  {'watch it':<{width}}  tensorboard --logdir {run.root.parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
