"""Walk-forward evaluation: `python -m training.walkforward --config ... --folds K [--set ...]`.

The run's instruments share one calendar (the union of their bar dates); its last part splits
into K test segments of equal length (`training.evaluation.walkforward.segment_starts`). Fold k is
an ordinary training run (`training.train.train`) on the instruments' bars before segment k:
the last `data.validation` share of those dates validates (and picks the fold's best model) and
segment k is its test split; `data.test` is not used. Its run folder, `<out>/fold_<k>/`, holds
its config, models, TensorBoard logs and test report, like any run.

The out-of-sample result trades one continuous account per instrument through every segment,
each fold's best model (or the vote it ships) deciding in its own segment (`trade_through`),
against the baselines over the same bars, and combines the instruments' accounts
(`training.evaluation.portfolio`). Printed and written to `<out>/walkforward.json`: every fold's
test table, each instrument's and the combined out-of-sample metrics, the edge over buy-and-hold
with its deflated Sharpe ratio for `--configs-tried` configurations, and the next order of each
instrument whose data runs to the end (the decision to act on after the data).

Reads top to bottom: config -> data -> folds -> (train -> test) per fold -> trade through -> report.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from envs import MarketData
from envs.splits import split_calendar
from training.cli import reports_user_errors
from training.config import (
    REPO_ROOT,
    ConfigError,
    RunConfig,
    add_config_arguments,
    resolve_config,
    save_config,
)
from training.evaluation.backtest import BacktestResult, format_comparison
from training.evaluation.portfolio import (
    combined_metrics,
    format_next_orders,
    instruments_table,
)
from training.evaluation.walkforward import (
    date_span,
    edge_significance,
    fold_table,
    segment_starts,
    trade_through,
)
from training.run.atomic import write_json_atomic
from training.run.challenger import read_contest
from training.run.data import RunData, instrument_name, load_run_markets, with_bars_per_year
from training.run.folder import ModelError, RunDir
from training.run.vote import load_trained
from training.train import train


def fold_data(
    markets: Sequence[MarketData], starts: Sequence[np.datetime64], k: int, validation: float
) -> RunData:
    """Fold k's instruments and split: bars before segment k to train and validate, segment k
    to test (every instrument cut at the start of segment k + 1, or whole for the last fold).

    Validation takes the last `validation` share of the calendar dates before segment k.
    """
    end = starts[k + 1] if k + 1 < len(starts) else None
    stops = [len(m) if end is None else m.bar_position(pd.Timestamp(end)) for m in markets]
    # Instruments with bars before segment k (to learn from) and a window of bars in all.
    cut = [m.slice(0, stop) for m, stop in zip(markets, stops, strict=True)
           if stop >= 2 and m.timestamps[0] < starts[k]]  # fmt: skip
    dates = np.unique(np.concatenate([m.timestamps for m in cut]))
    before = int(np.searchsorted(dates, starts[k]))
    validation_start = dates[before - max(round(validation * before), 1)]
    split = split_calendar(
        cut,
        validation_start=str(pd.Timestamp(validation_start)),
        test_start=str(pd.Timestamp(starts[k])),
    )
    return RunData(tuple(cut), split)


def walk_forward(
    cfg: RunConfig, folds: int, out: Path | None, configs_tried: int = 1, trained: bool = False
) -> tuple[RunDir, dict[str, Any]]:
    """Train and test every fold, trade each instrument through the segments; print the tables.

    Returns the output folder (`out`, or a new `runs/walkforward-<name>-<time>`) and the
    walkforward.json data. With `trained`, `out` holds every fold's trained contenders already
    (`fold_<k>/`, as a benchmark's reselection lays them out): each fold trains nothing, holds
    its contest again under `cfg` and is tested again (`train`'s resume of a finished run).
    """
    markets = load_run_markets(cfg)
    dates = np.unique(np.concatenate([m.timestamps for m in markets]))
    size = len(dates) // (folds + 1)
    if size < cfg.env.window + 1:  # before any folder is made or model trained
        raise ConfigError(
            f"--folds {folds}: {len(dates):,} calendar dates give test segments of {size} dates; "
            f"each needs at least env.window + 1 = {cfg.env.window + 1}"
        )
    starts = segment_starts(dates, folds)
    # One bars-per-year for every fold and the out-of-sample accounts, from fold 1's training.
    cfg = with_bars_per_year(cfg, fold_data(markets, starts, 0, cfg.data.validation))
    if out is None:
        run = RunDir.new(REPO_ROOT / "runs", f"walkforward-{cfg.train.name}")
    elif trained:  # the folds are there to be held again
        run = RunDir(out)
    else:  # a folder holding a run is refused: its folds would mix with this one's
        run = RunDir.claim(out, "pass another --out")
    save_config(cfg, run.config)
    policies, reports = [], []
    for k in range(folds):
        fold = RunDir(run.root / f"fold_{k + 1}")
        data = fold_data(markets, starts, k, cfg.data.validation)
        with contextlib.redirect_stdout(io.StringIO()):  # each fold's own report is in its folder
            train(cfg, fold, resume=trained, data=data)
        policies.append(load_trained(fold.root).trained)
        tested = fold.report / "metrics.json"
        metrics = json.loads(tested.read_text()) if tested.is_file() else {}
        end = starts[k + 1] if k + 1 < folds else dates[-1] + np.timedelta64(1, "ns")
        span = {
            "train": date_span(dates[dates < data.split.validation_start]),
            "validation": date_span(
                dates[(dates >= data.split.validation_start) & (dates < starts[k])]
            ),
            "test": date_span(dates[(dates >= starts[k]) & (dates < end)]),
        }
        report: dict[str, Any] = {"fold": k + 1, **span, "metrics": metrics}
        kept = ""
        if (contest := read_contest(fold)) is not None:  # which contender the fold kept
            report["contender_kept"] = contest["kept"]
            kept = f" (kept the {report['contender_kept']})"
        reports.append(report)
        print(f"\nfold {k + 1}/{folds}: " + ", ".join(
            f"{part} {s['first']} .. {s['last']}" for part, s in span.items()
        ) + kept)  # fmt: skip
        if metrics:
            print(fold_table(metrics))
    results: dict[str, BacktestResult] = {}
    for market in markets:
        result = trade_through(policies, market, cfg.env, starts)
        if result is not None:
            results[instrument_name(market)] = result
    combined = combined_metrics(results)
    significance = edge_significance(list(results.values()), configs_tried)
    print(f"\nout of sample: {len(results)} instrument(s), each one account through the "
          f"{folds} test segments; {', '.join(results)} combined:")  # fmt: skip
    print(format_comparison(results.values(), combined))
    if len(results) > 1:
        print(f"\n{instruments_table(results)}")
    print(
        f"\nedge over buy_and_hold: Sharpe {significance['edge_sharpe']:.2f} a year; deflated "
        f"for {configs_tried} configuration(s) tried, the probability that it is noise is "
        f"{significance['noise_probability']:.2f}"
    )
    print(f"\n{format_next_orders(results)}")
    return run, {
        "data": [m.source + (f" ({m.ticker})" if m.ticker else "") for m in markets],
        "test_starts": [str(pd.Timestamp(s)) for s in starts],
        "folds": reports,
        "aggregate": combined,
        "instruments": {name: r.metrics for name, r in results.items()},
        "edge": significance,
        "next_orders": {
            name: None if r.next_order is None else r.next_order.to_dict()
            for name, r in results.items()
        },
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options; `--set section.key=value` overrides any config key."""
    parser = argparse.ArgumentParser(
        prog="python -m training.walkforward", description=__doc__.splitlines()[0]
    )
    add_config_arguments(parser)
    parser.add_argument("--folds", type=int, required=True, help="number of test segments, >= 1")
    parser.add_argument("--data", nargs="+", help="OHLCV CSVs or globs (sets data.path)")
    parser.add_argument("--ticker", nargs="+", help="tickers of multi-ticker CSVs (data.ticker)")
    parser.add_argument(
        "--out", type=Path, help="output folder (default runs/walkforward-<name>-<time>)"
    )
    parser.add_argument(
        "--configs-tried",
        type=int,
        default=1,
        help="configurations tried before this one, for the deflated Sharpe ratio (default 1)",
    )
    return parser.parse_args(argv)


@reports_user_errors(ModelError)
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: walk forward, print the tables, write walkforward.json. Mistakes exit 2."""
    args = parse_args(argv)
    if args.folds < 1:
        raise ConfigError(f"--folds: expected an integer >= 1, got {args.folds}")
    if args.configs_tried < 1:
        raise ConfigError(f"--configs-tried: expected an integer >= 1, got {args.configs_tried}")
    cfg = resolve_config(args.config, args.overrides, data=args.data, ticker=args.ticker)
    out, report = walk_forward(cfg, args.folds, args.out, args.configs_tried)
    path = write_json_atomic(out.root / "walkforward.json", report)
    print(f"\nwalk-forward report: {path}\nfold runs: {out.root}/fold_<k>/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
