"""Walk-forward evaluation: test segments on one calendar, each instrument traded on through them.

The calendar (the union of the instruments' bar dates) splits into K + 1 parts: K test segments of
equal length at the end, the rest before them (`segment_starts`). Fold k trains on every bar before
its segment and is tested on it. The out-of-sample result is one continuous account per
instrument (`trade_through`): fold k's model decides on the bars of segment k, and the account it
leaves at the segment's last bar trades on under fold k + 1's model, with no close, no skipped bar
and no free fill between segments. Every cost is paid as it would be by a user who swapped in the
new model on that date. The walk itself (train -> test per fold) is the entry point
`training.walkforward`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from envs import EnvConfig, MarketData
from envs.core import Accounts
from envs.market_data import time_labels
from training.evaluation.backtest import BacktestResult, evaluation_env, with_baselines
from training.evaluation.metrics import format_metrics_table
from training.evaluation.next_order import decide_next_order
from training.evaluation.portfolio import combine_records
from training.evaluation.report import AGENT
from training.evaluation.selection import deflated_sharpe_ratio
from training.evaluation.vote import Trained, record_trained

FOLD_SUMMARY = ("total_return_pct", "sharpe", "max_drawdown_pct", "turnover_per_year")


def segment_starts(dates: np.ndarray, folds: int) -> list[np.datetime64]:
    """The first dates of `folds` equal test segments at the end of the sorted `dates`."""
    if folds < 1:
        raise ValueError(f"--folds must be >= 1, got {folds}")
    n = len(dates)
    size = n // (folds + 1)
    if size < 1:
        raise ValueError(f"{n} dates cannot make {folds} test segments and a training part")
    return [dates[n - (folds - k) * size] for k in range(folds)]


def segments(market: MarketData, starts: Sequence[np.datetime64]) -> list[tuple[int, range]]:
    """(fold, bars) of each test segment `market` has bars in, in order.

    Segment k holds the bars from `starts[k]` up to and including the first bar of segment
    k + 1 (the bar its last decision fills on, where the next fold's model takes over), or to
    the end of the data. A segment with fewer than two bars is left out.
    """
    bounds = [market.bar_position(pd.Timestamp(s)) for s in starts] + [len(market)]
    found = []
    for k, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        stop = min(hi + 1, len(market))
        if stop - lo >= 2:
            found.append((k, range(lo, stop)))
    return found


def trade_through(
    policies: Sequence[Trained],
    market: MarketData,
    config: EnvConfig,
    starts: Sequence[np.datetime64],
) -> BacktestResult | None:
    """One account on `market` through every test segment, fold k's policy deciding in segment k.

    Returns the agent's record over all segments, the baselines' over the same bars (one
    episode each, as in a backtest), their metrics and the last policy's next order; None when
    the instrument has no test bars after a window of history.
    """
    parts = [(k, bars) for k, bars in segments(market, starts)
             if bars.stop - 1 - max(bars.start, config.window - 1) >= 1]  # fmt: skip
    if not parts:
        return None
    records: list[pd.DataFrame] = []
    accounts: Accounts | None = None
    policy, core = None, None
    for k, bars in parts:
        policy = policies[k]
        core = evaluation_env(market, config, bars).core
        record, accounts = record_trained(policy, core, accounts)
        records.append(record if not records else record.iloc[1:])
        if accounts is None:  # liquidated or bankrupt: the account is over
            break
    assert policy is not None and core is not None
    next_order = None if accounts is None else decide_next_order(policy, core, accounts)
    agent = pd.concat(records, ignore_index=True)
    first = max(parts[0][1].start, config.window - 1)
    whole = evaluation_env(market, config, range(first, first + len(agent)))
    return with_baselines(agent, next_order, whole)


def edge_significance(
    results: Sequence[BacktestResult], configs_tried: int, baseline: str = "buy_and_hold"
) -> dict[str, float]:
    """How likely the agent's edge over `baseline` is noise, counting `configs_tried` configs.

    The edge is the per-bar difference of the combined accounts' returns (agent minus
    baseline). Its Sharpe ratio is deflated (`training.evaluation.selection`) for the best of
    `configs_tried` unskilled tries, each with the sampling variance of a Sharpe estimate of T
    returns whose true value is 0, 1 / (T - 1); its skewness and kurtosis enter the test.
    `noise_probability` is 1 - DSR.
    """
    agent = combine_records([r.records[AGENT] for r in results])["equity"].to_numpy()
    other = combine_records([r.records[baseline] for r in results])["equity"].to_numpy()
    edge = np.diff(agent) / agent[:-1] - np.diff(other) / other[:-1]  # [T]
    t = len(edge)
    std = float(edge.std(ddof=1)) if t > 1 else 0.0
    if t < 3 or std == 0:
        return {"edge_sharpe": math.nan, "deflated_sharpe": math.nan, "noise_probability": math.nan}
    sharpe = float(edge.mean()) / std  # per bar
    centred = (edge - edge.mean()) / std
    dsr = deflated_sharpe_ratio(
        sharpe,
        n_trials=configs_tried,
        sharpe_variance=1.0 / (t - 1),
        n_returns=t,
        skew=float(np.mean(centred**3)),
        kurtosis=float(np.mean(centred**4)),
    )
    bars_per_year = results[0].bars_per_year
    return {
        "edge_sharpe": sharpe * math.sqrt(bars_per_year),  # annualised, as every Sharpe shown
        "configs_tried": configs_tried,
        "deflated_sharpe": dsr,
        "noise_probability": 1.0 - dsr,
    }


def date_span(dates: np.ndarray) -> dict[str, Any]:
    """The first and last of `dates` as time labels, and their count, for the report."""
    first, last = time_labels(np.asarray(dates)[[0, -1]])
    return {"first": first, "last": last, "dates": len(dates)}


def fold_table(metrics: dict[str, dict[str, float]]) -> str:
    """The metrics table of one fold, `FOLD_SUMMARY` rows only."""
    return format_metrics_table(
        {name: {key: values[key] for key in FOLD_SUMMARY} for name, values in metrics.items()}
    )
