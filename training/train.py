"""Train the multi-head agent with PPO: `python -m training.train [--config ...] [options]`.

Reads top to bottom: config -> data -> envs -> model -> learn -> save -> backtest -> summary.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from stable_baselines3.common.callbacks import BaseCallback

from training.cli import INTERRUPTED_STATUS, reports_user_errors
from training.config import (
    REPO_ROOT,
    RunConfig,
    add_config_arguments,
    config_to_dict,
    load_config,
    resolve_config,
    save_config,
)
from training.evaluation.backtest import (
    backtest,
    evaluation_env,
    format_next_order,
    write_report,
)
from training.evaluation.metrics import format_metrics_table
from training.evaluation.validation import validate
from training.run.callbacks import (
    AtomicCheckpoint,
    HeadImportanceCallback,
    HyperParameters,
    ValidationCallback,
    flatten,
)
from training.run.data import load_run_market, split_run_market
from training.run.folder import RunDir, load_model, save_model_atomic
from training.run.session import fit, prepare_torch


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


def new_run_dir(cfg: RunConfig) -> RunDir:
    """The configured run folder (`train.run_dir`), or a fresh `runs/<name>-<time>`."""
    if cfg.train.run_dir:
        root = Path(cfg.train.run_dir)
        root.mkdir(parents=True, exist_ok=True)
        return RunDir(root)
    return RunDir.new(REPO_ROOT / "runs", cfg.train.name)


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
    if not resume:
        save_config(cfg, run.config)

    validation_env = evaluation_env(market, cfg.env, splits.validation)
    callbacks: list[BaseCallback] = [HyperParameters(flatten(config_to_dict(cfg)))]
    if cfg.train.checkpoint_every:
        callbacks.append(AtomicCheckpoint(run, cfg.train.checkpoint_every))
    if cfg.train.importance_every:
        callbacks.append(HeadImportanceCallback(cfg.train.importance_every))
    if cfg.train.eval_every:
        callbacks.append(ValidationCallback(validation_env, run, cfg.train.eval_every))
    checkpoint = run.latest_checkpoint() if resume else None
    model = fit(cfg, market, splits.train, run, callbacks=callbacks, checkpoint=checkpoint)
    save_model_atomic(model, run.final_model)
    if not run.best_model.exists():  # no validation pass saved one: validate the final model
        validate(model, validation_env, run)

    test_env = evaluation_env(market, cfg.env, splits.test)
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


@reports_user_errors()
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: train, then print where everything is. User mistakes exit 2, one line."""
    args = parse_args(argv)
    if args.resume is not None:  # the run's own config; --set may extend it (total_timesteps)
        run = RunDir(args.resume)
        cfg = load_config(run.config, args.overrides)
    else:
        cfg = resolve_config(
            args.config, args.overrides, data=args.data, ticker=args.ticker, run_dir=args.run_dir
        )
        run = new_run_dir(cfg)
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
