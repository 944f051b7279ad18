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

from envs import MarketData, TradingEnv
from envs.market_data import DataError
from training.cli import INTERRUPTED_STATUS, reports_user_errors
from training.config import (
    REPO_ROOT,
    ConfigError,
    RunConfig,
    add_config_arguments,
    config_to_dict,
    load_config,
    resolve_config,
    save_config,
)
from training.evaluation.backtest import backtest, evaluation_env
from training.evaluation.metrics import format_metrics_table
from training.evaluation.portfolio import (
    combined_metrics,
    describe_span,
    format_next_orders,
    instruments_table,
    write_reports,
)
from training.evaluation.validation import (
    generalization_summary,
    read_validation_history,
    validate,
)
from training.run.atomic import write_json_atomic
from training.run.callbacks import (
    AtomicCheckpoint,
    HeadImportanceCallback,
    HyperParameters,
    ValidationCallback,
    flatten,
)
from training.run.data import RunData, instrument_name, with_bars_per_year
from training.run.folder import ModelError, RunDir, load_model, save_model_atomic
from training.run.session import fit, prepare_torch

MIN_EVALUATION_STEPS = 20  # an instrument is validated / tested on a range of this many decisions


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options; `--set section.key=value` overrides any config key."""
    parser = argparse.ArgumentParser(prog="python -m training.train", description=__doc__)
    add_config_arguments(parser)
    parser.add_argument(
        "--data", nargs="+", help="OHLCV CSVs or globs to train on (sets data.path)"
    )
    parser.add_argument(
        "--ticker", nargs="+", help="tickers to take from multi-ticker CSVs (data.ticker)"
    )
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
    """The configured run folder (`train.run_dir`), or a fresh `runs/<name>-<time>`.

    A configured folder that already holds a run is refused (`RunDir.claim`, one line): a second
    run there would mix its models and validation history with the first one's.
    """
    if cfg.train.run_dir:
        root = Path(cfg.train.run_dir)
        return RunDir.claim(root, f"continue it with --resume {root}, or pass another --run-dir")
    return RunDir.new(REPO_ROOT / "runs", cfg.train.name)


def train(
    cfg: RunConfig, run: RunDir, resume: bool, data: RunData | None = None
) -> dict[str, Path]:
    """Train (or continue) the run; return where the outputs are.

    `data` None loads and splits the config's instruments; benchmarks pass their own (e.g.
    generated series, `training.run.data.RunData`).
    """
    prepare_torch(cfg)
    data = RunData.load(cfg) if data is None else data
    cfg = with_bars_per_year(cfg, data)  # a resumed run's config holds it already
    window = cfg.env.window
    train_ranges = data.ranges("train", 1, window)
    if not train_ranges:
        raise DataError(f"{run.root}: no instrument has training bars before the validation dates")
    validation_envs = evaluation_envs(data.ranges("validation", MIN_EVALUATION_STEPS, window), cfg)
    test_envs = evaluation_envs(data.ranges("test", MIN_EVALUATION_STEPS, window), cfg)
    interval = cfg.env.decision_interval
    steps = f"{cfg.train.total_timesteps:,} timesteps"
    if interval > 1:
        steps += f" (one decision each, every {interval} bars)"
    print(
        f"training {run.root}: {len(data.markets)} instrument(s), "
        f"{steps}, {cfg.env.bars_per_year:,.1f} bars a year, "
        f"device {cfg.policy.device}, torch CPU threads {torch.get_num_threads()}\n"
        f"{data.describe()}"
    )
    if not resume:
        save_config(cfg, run.config)
        write_json_atomic(run.splits, data.to_dict())

    callbacks: list[BaseCallback] = [HyperParameters(flatten(config_to_dict(cfg)))]
    if cfg.train.checkpoint_every:
        callbacks.append(AtomicCheckpoint(run, cfg.train.checkpoint_every))
    if cfg.train.importance_every:
        callbacks.append(HeadImportanceCallback(cfg.train.importance_every))
    if cfg.train.eval_every and validation_envs:
        every, patience = cfg.train.eval_every, cfg.train.patience
        callbacks.append(ValidationCallback(validation_envs, run, every, patience))
    checkpoint = run.latest_checkpoint() if resume else None
    model = fit(cfg, train_ranges, run, callbacks=callbacks, checkpoint=checkpoint)
    save_model_atomic(model, run.final_model)
    if not run.best_model.exists() and validation_envs:  # no pass saved one: validate the final
        validate(model, validation_envs, run)

    # The model `python -m training.backtest --model RUN_DIR` reads: best_model, else final_model.
    policy = load_model(run.root).policy
    results = {name: backtest(policy, env) for name, env in test_envs.items()}
    print(f"\n{generalization_summary(read_validation_history(run))}")
    if not results:
        print("no instrument has enough test bars: no test backtest")
        return _outputs(run, None)
    report = write_reports(results, run.report, f"{run.root.name} on the test split")
    print(f"\nbacktest of the test split ({describe_span(results)}), agent vs baselines:")
    print(format_metrics_table(combined_metrics(results)))
    if len(results) > 1:
        print(f"\neach instrument (the table above combines their accounts):\n"
              f"{instruments_table(results)}")  # fmt: skip
    print(f"\n{format_next_orders(results)}")
    return _outputs(run, report)


def _outputs(run: RunDir, report: Path | None) -> dict[str, Path]:
    outputs = {
        "final model": run.final_model,
        "best model (validation Sharpe)": run.best_model,
        "TensorBoard logs": run.tensorboard,
    }
    if report is not None:
        outputs["backtest report (test split)"] = report
    return outputs


def evaluation_envs(
    ranges: list[tuple[MarketData, range]], cfg: RunConfig
) -> dict[str, TradingEnv]:
    """One evaluation env per instrument range, by instrument name."""
    return {instrument_name(m): evaluation_env(m, cfg.env, bars) for m, bars in ranges}


@reports_user_errors(ModelError)
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: train, then print where everything is. User mistakes exit 2, one line."""
    args = parse_args(argv)
    if args.resume is not None:  # the run's own config; --set may extend it (total_timesteps)
        run = RunDir(args.resume)
        cfg = load_config(run.config, args.overrides)
        if run.latest_checkpoint() is None:
            raise ConfigError(
                f"{run.root}: no checkpoint to resume from (checkpoints/checkpoint_<timesteps>"
                "_steps.safetensors); start a new run in another folder"
            )
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
