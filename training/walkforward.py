"""Walk-forward evaluation: `python -m training.walkforward --config ... --folds K [--set ...]`.

The bars split into K + 1 parts: K test segments of equal length at the end, the rest before
them. Fold k trains a fresh model on every bar before its test segment (an expanding window:
fold k + 1 trains on fold k's training and test bars) and backtests it, with the baselines, on
the segment (`training.backtest.backtest`). Each fold trains for `train.total_timesteps` and tests
its final model; `data.validation`, `data.test`, checkpoints and validation passes are not used.

The aggregate out-of-sample result chains the test segments into one account (`chain_records`):
each segment starts with the equity the previous one ended with. Every fold and the aggregate are
printed against the baselines and written to `<out>/walkforward.json`; fold k's config, model and
TensorBoard logs go to `<out>/fold_<k>/` (a run folder `training.backtest --model` accepts). The
last segment ends with the data, so the last fold's next order (`training.next_order`, on the
account of that segment) is printed and written too: the decision to act on after the data.

Reads top to bottom: config -> data -> folds -> (train -> backtest) per fold -> aggregate -> report.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from envs import MarketData, TradingEnv
from envs.features import FEATURE_NAMES
from envs.market_data import time_labels
from training.atomic import write_json_atomic
from training.backtest import AGENT, BacktestResult, backtest, format_next_order
from training.cli import reports_user_errors
from training.config import (
    REPO_ROOT,
    ConfigError,
    RunConfig,
    add_config_arguments,
    save_config,
)
from training.data import load_run_market
from training.metrics import compute_metrics, format_metrics_table
from training.run_dir import RunDir, save_model_atomic
from training.train import resolve_config, train_on_bars

# Record columns in money (or units of the asset, which scale with equity); the rest are prices,
# ratios and flags that do not depend on the account's size.
MONEY_COLUMNS = (
    "equity", "position", "traded_notional", "commission", "slippage", "financing", "borrow",
    "costs",
)  # fmt: skip
FOLD_SUMMARY = ("total_return_pct", "sharpe", "max_drawdown_pct", "trades")  # printed per fold


def fold_ranges(n_bars: int, folds: int) -> list[tuple[range, range]]:
    """(train, test) bar ranges of each fold: K equal test segments at the end, train before."""
    if folds < 1:
        raise ValueError(f"--folds must be >= 1, got {folds}")
    size = n_bars // (folds + 1)
    starts = [n_bars - (folds - k) * size for k in range(folds + 1)]  # test starts, then the end
    return [(range(0, a), range(a, b)) for a, b in itertools.pairwise(starts)]


def chain_records(
    records: Sequence[pd.DataFrame], trades: Sequence[pd.DataFrame]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Consecutive segments' records and trades as those of one account over all segments.

    Each segment's money columns (and trade pnl) are scaled so that it starts with the equity
    the previous one ended with; the starting row of every segment after the first is dropped.
    Per-bar returns, exposure and trade returns are unchanged by the scaling.
    """
    record_parts, trade_parts, equity = [], [], None
    for index, (record, trade) in enumerate(zip(records, trades, strict=True)):
        scale = 1.0 if equity is None else equity / float(record["equity"].iloc[0])
        part = record.copy()
        part[list(MONEY_COLUMNS)] *= scale
        record_parts.append(part if index == 0 else part.iloc[1:])
        trade_parts.append(trade.assign(pnl=trade["pnl"] * scale))
        equity = float(part["equity"].iloc[-1])
    return pd.concat(record_parts, ignore_index=True), pd.concat(trade_parts, ignore_index=True)


def aggregate(
    results: Sequence[BacktestResult], bars_per_year: float
) -> dict[str, dict[str, float]]:
    """Metrics of every strategy over the chained test segments of all folds."""
    return {
        name: compute_metrics(
            *chain_records([r.records[name] for r in results], [r.trades[name] for r in results]),
            bars_per_year=bars_per_year,
        )
        for name in results[0].records
    }


def _span(market: MarketData, bars: range) -> dict[str, Any]:
    first, last = time_labels(market.timestamps[[bars.start, bars.stop - 1]])
    return {"first": first, "last": last, "bars": len(bars)}


def _fold_table(metrics: dict[str, dict[str, float]]) -> str:
    return format_metrics_table(
        {name: {key: values[key] for key in FOLD_SUMMARY} for name, values in metrics.items()}
    )


def walk_forward(cfg: RunConfig, folds: int, out: Path | None) -> tuple[RunDir, dict[str, Any]]:
    """Train and test every fold; print each and the aggregate.

    Returns the output folder (`out`, or a new `runs/walkforward-<name>-<time>`), created once
    the folds are known to fit the data, and the walkforward.json data.
    """
    market = load_run_market(cfg)
    cfg.trunk = dataclasses.replace(cfg.trunk, n_features=len(FEATURE_NAMES))
    ranges = fold_ranges(len(market), folds)
    # Every test env first: a segment too short for the window fails before any training.
    test_envs = [
        TradingEnv(market, cfg.env, bars=test, random_start=False, episode_length=None)
        for _, test in ranges
    ]
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
        model = train_on_bars(cfg, market, train_bars, fold)
        save_config(cfg, fold.config)
        save_model_atomic(model, fold.final_model)
        result = backtest(model, test_env)
        results.append(result)
        report = {"fold": k, "train": _span(market, train_bars), "test": _span(market, test_bars)}
        reports.append({**report, "metrics": result.metrics})
        spans = (
            f"{part} {span['first']} .. {span['last']} ({span['bars']} bars)"
            for part, span in (("train", report["train"]), ("test", report["test"]))
        )
        print(f"\nfold {k}/{folds}: {', '.join(spans)}")
        print(_fold_table(result.metrics))
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
    parser.set_defaults(resume=None, run_dir=None)  # as `training.train.resolve_config` reads
    return parser.parse_args(argv)


@reports_user_errors()
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: walk forward, print the tables, write walkforward.json. Mistakes exit 2."""
    args = parse_args(argv)
    if args.folds < 1:
        raise ConfigError(f"--folds: expected an integer >= 1, got {args.folds}")
    cfg = resolve_config(args)
    out, report = walk_forward(cfg, args.folds, args.out)
    path = write_json_atomic(out.root / "walkforward.json", report)
    print(f"\nwalk-forward report: {path}\nfold models: {out.root}/fold_<k>/final_model.zip")
    return 0


if __name__ == "__main__":
    sys.exit(main())
