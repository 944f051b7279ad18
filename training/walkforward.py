"""Walk-forward evaluation: `python -m training.walkforward --config ... --folds K [--set ...]`.

The bars split into K + 1 parts: K test segments of equal length at the end, the rest before them.
Fold k trains a fresh model on every bar before its test segment (an expanding window: fold k + 1
trains on fold k's training and test bars) and backtests it, with the baselines, on the segment
(`training.evaluation.backtest.backtest`). Each fold trains for `train.total_timesteps` and tests
its final model; `data.validation`, `data.test`, checkpoints and validation passes are not used.

The aggregate out-of-sample result chains the test segments into one account
(`training.evaluation.walkforward.chain_records`): each segment starts with the equity the previous
one ended with. Every fold and the aggregate are printed against the baselines and written to
`<out>/walkforward.json`; fold k's config, model and TensorBoard logs go to `<out>/fold_<k>/` (a run
folder `training.backtest --model` accepts). The last segment ends with the data, so the last fold's
next order (`training.evaluation.next_order`, on the account of that segment) is printed and written
too: the decision to act on after the data.

Reads top to bottom: config -> data -> folds -> (train -> backtest) per fold -> aggregate -> report.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from training.cli import reports_user_errors
from training.config import (
    REPO_ROOT,
    ConfigError,
    RunConfig,
    add_config_arguments,
    resolve_config,
    save_config,
)
from training.evaluation.backtest import AGENT, backtest, evaluation_env, format_next_order
from training.evaluation.metrics import format_metrics_table
from training.evaluation.walkforward import aggregate, bar_span, fold_ranges, fold_table
from training.run.atomic import write_json_atomic
from training.run.data import load_run_market
from training.run.folder import RunDir, save_model_atomic
from training.run.session import fit, prepare_torch


def walk_forward(cfg: RunConfig, folds: int, out: Path | None) -> tuple[RunDir, dict[str, Any]]:
    """Train and test every fold; print each and the aggregate.

    Returns the output folder (`out`, or a new `runs/walkforward-<name>-<time>`), created once
    the folds are known to fit the data, and the walkforward.json data.
    """
    prepare_torch(cfg)
    market = load_run_market(cfg)
    ranges = fold_ranges(len(market), folds)
    # Every test env first: a segment too short for the window fails before any training.
    test_envs = [evaluation_env(market, cfg.env, test) for _, test in ranges]
    if out is None:
        run = RunDir.new(REPO_ROOT / "runs", f"walkforward-{cfg.train.name}")
    else:
        out.mkdir(parents=True, exist_ok=True)
        run = RunDir(out)
    save_config(cfg, run.config)
    reports, results = [], []
    for k, ((train_bars, test_bars), test_env) in enumerate(
        zip(ranges, test_envs, strict=True), start=1
    ):
        fold = RunDir(run.root / f"fold_{k}")
        model = fit(cfg, market, train_bars, fold)  # no checkpoints, validation or test split
        save_config(cfg, fold.config)
        save_model_atomic(model, fold.final_model)
        result = backtest(model, test_env)
        results.append(result)
        report: dict[str, Any] = {
            "fold": k,
            "train": bar_span(market, train_bars),
            "test": bar_span(market, test_bars),
        }
        reports.append({**report, "metrics": result.metrics})
        spans = (
            f"{part} {span['first']} .. {span['last']} ({span['bars']} bars)"
            for part, span in (("train", report["train"]), ("test", report["test"]))
        )
        print(f"\nfold {k}/{folds}: {', '.join(spans)}")
        print(fold_table(result.metrics))
    combined = aggregate(results, test_envs[0].core.bars_per_year)
    print(f"\naggregate out-of-sample ({folds} test segments chained), {AGENT} vs baselines")
    print(format_metrics_table(combined))
    # The last segment ends with the data: its model's decision there is the live one.
    last = results[-1].next_order
    print(f"\nfold {folds}'s model, on the account of its test segment:")
    print(format_next_order(results[-1]))
    return run, {
        "data": market.source,
        "ticker": market.ticker,
        "folds": reports,
        "aggregate": combined,
        "next_order": None if last is None else last.to_dict(),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options; `--set section.key=value` overrides any config key."""
    parser = argparse.ArgumentParser(
        prog="python -m training.walkforward", description=__doc__.splitlines()[0]
    )
    add_config_arguments(parser)
    parser.add_argument("--folds", type=int, required=True, help="number of test segments, >= 1")
    parser.add_argument("--data", help="OHLCV CSV (sets data.path)")
    parser.add_argument("--ticker", help="ticker to select in a multi-ticker CSV (data.ticker)")
    parser.add_argument(
        "--out", type=Path, help="output folder (default runs/walkforward-<name>-<time>)"
    )
    return parser.parse_args(argv)


@reports_user_errors()
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: walk forward, print the tables, write walkforward.json. Mistakes exit 2."""
    args = parse_args(argv)
    if args.folds < 1:
        raise ConfigError(f"--folds: expected an integer >= 1, got {args.folds}")
    cfg = resolve_config(args.config, args.overrides, data=args.data, ticker=args.ticker)
    out, report = walk_forward(cfg, args.folds, args.out)
    path = write_json_atomic(out.root / "walkforward.json", report)
    print(f"\nwalk-forward report: {path}\nfold models: {out.root}/fold_<k>/final_model.zip")
    return 0


if __name__ == "__main__":
    sys.exit(main())
