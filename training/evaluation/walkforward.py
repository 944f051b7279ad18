"""Walk-forward evaluation: folds of an expanding window, and their test segments chained.

The bars split into K + 1 parts: K test segments of equal length at the end, the rest before
them (`fold_ranges`). Fold k trains on every bar before its test segment and is backtested on the
segment. The aggregate out-of-sample result chains the test segments into one account
(`chain_records`, `aggregate`): each segment starts with the equity the previous one ended with.
The walk itself (train -> backtest per fold) is the entry point `training.walkforward`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pandas as pd

from envs import MarketData
from envs.market_data import time_labels
from training.evaluation.backtest import BacktestResult
from training.evaluation.metrics import compute_metrics, format_metrics_table

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


def bar_span(market: MarketData, bars: range) -> dict[str, Any]:
    """The first and last bar of `bars` as time labels, and their count, for the report."""
    first, last = time_labels(market.timestamps[[bars.start, bars.stop - 1]])
    return {"first": first, "last": last, "bars": len(bars)}


def fold_table(metrics: dict[str, dict[str, float]]) -> str:
    """The metrics table of one fold, `FOLD_SUMMARY` rows only."""
    return format_metrics_table(
        {name: {key: values[key] for key in FOLD_SUMMARY} for name, values in metrics.items()}
    )
