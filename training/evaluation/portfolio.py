"""Several instruments' backtests as one account: the aggregate a multi-instrument run reports.

Each instrument is traded by its own account. `combine_records` joins them as an equal-weight
portfolio rebalanced every bar: on each bar of the union of their bar times, the combined return
is the mean of the returns of the accounts live on that bar (0 for one whose exchange is closed
that day), so no single instrument's
lucky (or ruinous) compounding dominates the aggregate, as it would in a sum of unrebalanced
accounts. Costs, traded notional and exposure combine the same way (each as a share of its
account's equity, averaged), so the aggregate's Sharpe ratio, drawdown, turnover and fees come
from `compute_metrics` exactly as one instrument's do. An instrument takes part from its first
step to its last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from envs.market_data import time_labels
from training.evaluation.backtest import BacktestResult, format_next_order, write_report
from training.evaluation.metrics import compute_metrics, format_value
from training.evaluation.report import AGENT
from training.evaluation.rollout import RECORD_COLUMNS
from training.run.atomic import write_bytes_atomic, write_json_atomic

# Per-step flows, each a share of its account's equity before the step, averaged.
_FLOWS = ("traded_notional", "commission", "slippage", "financing", "borrow", "costs")
_EVENTS = ("stop_hit", "liquidated", "bankrupt")  # counted over the instruments


def combine_records(records: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The record (`RECORD_COLUMNS`) of the records' equal-weight portfolio, rebalanced each bar.

    On each union bar, `equity` grows by the mean return of the records live on it (from their
    first step to their last; one without a bar there, on a holiday of its exchange, counts with
    a return of 0); `exposure` (and `position`, so that "in a position" means some account holds
    one) is the mean gross exposure of those records, held over such holidays; flows
    (`traded_notional`, the costs) are their mean share of equity, in money of the combined
    account; `stop_hit`, `liquidated` and `bankrupt`
    count the records with that event on the bar. Columns that only mean something for one
    instrument (`price`, the head actions, the fills) are empty. Row 0 is the starting state at
    the first record's start, with the records' common starting equity.
    """
    if not records:
        raise ValueError("combine_records needs at least one record")
    times = np.unique(np.concatenate([r["timestamp"].to_numpy() for r in records]))  # [U]
    index = pd.DatetimeIndex(times)
    returns = np.zeros(len(times))
    live = np.zeros(len(times))  # records between their first and last step, on each bar
    exposure = np.zeros(len(times))
    shares = {name: np.zeros(len(times)) for name in _FLOWS}
    events = {name: np.zeros(len(times), dtype=np.int64) for name in _EVENTS}
    for record in records:
        rows = index.get_indexer(pd.DatetimeIndex(record["timestamp"]))[1:]  # its steps
        if len(rows) == 0:
            continue
        equity = record["equity"].to_numpy(dtype=float)
        ruin = np.flatnonzero(equity[1:] <= 0)  # a ruined account leaves at its ruin
        last = rows[ruin[0]] if ruin.size else rows[-1]
        span = slice(rows[0], last + 1)  # a bar it has none of (a holiday of its exchange)
        live[span] += 1  # is a bar of 0 return, with its position held over it
        before = equity[:-1]
        safe = np.where(before > 0, before, 1.0)
        returns[rows] += np.where(before > 0, equity[1:] / safe - 1.0, 0.0)
        held = np.abs(record["exposure"].to_numpy(dtype=float)[1:])
        exposure[span] += pd.Series(held, index=rows).reindex(range(span.start, span.stop)).ffill()
        for name in _FLOWS:
            shares[name][rows] += np.where(
                before > 0, record[name].to_numpy(dtype=float)[1:] / safe, 0
            )
        for name in _EVENTS:
            events[name][rows] += record[name].to_numpy(dtype=bool)[1:]
    count = np.maximum(live, 1.0)
    start = float(records[0]["equity"].iloc[0])
    combined_equity = start * np.cumprod(1.0 + returns / count)  # [U]
    combined_equity[0] = start  # row 0: before any step
    previous = np.concatenate([[start], combined_equity[:-1]])
    held = exposure / count
    combined = pd.DataFrame(
        {
            "timestamp": times,
            "price": np.nan,
            "equity": combined_equity,
            "position": held * combined_equity,
            "exposure": held,
            "direction": "",
            "leverage": np.nan,
            "risk": np.nan,
            "order_fill": np.nan,
            "exit_fill": np.nan,
            **{name: share / count * previous for name, share in shares.items()},
            **events,
        },
        columns=list(RECORD_COLUMNS),
    )
    return combined


def combined_metrics(results: Mapping[str, BacktestResult]) -> dict[str, dict[str, float]]:
    """Every strategy's metrics over all instruments' accounts combined (`combine_records`).

    One instrument: its own metrics. Trades are the instruments' trades together (win rate,
    profit factor and the count are over all of them); annualised with the first result's
    bars per year.
    """
    first = next(iter(results.values()))
    if len(results) == 1:
        return first.metrics
    metrics = {}
    for strategy in first.records:
        record = combine_records([r.records[strategy] for r in results.values()])
        trades = pd.concat([r.trades[strategy] for r in results.values()], ignore_index=True)
        metrics[strategy] = compute_metrics(record, trades, bars_per_year=first.bars_per_year)
    return metrics


def write_reports(results: Mapping[str, BacktestResult], out: Path, title: str) -> Path:
    """Write the backtest of one instrument, or of several, to `out`.

    One instrument: `write_report`'s files in `out`. Several: each instrument's in
    `out/instruments/<name>/`, and in `out` the combined accounts' `metrics.json` (the same
    keys as one instrument's), `equity.csv` (per bar of the combined account: timestamp, the
    agent's equity and gross exposure, each baseline's equity) and `instruments.json` (each
    instrument's metrics of every strategy). Every file is written atomically.
    """
    if len(results) == 1:
        return write_report(next(iter(results.values())), out, title)
    for name, result in results.items():
        write_report(result, out / "instruments" / name, f"{title}: {name}")
    write_json_atomic(out / "metrics.json", combined_metrics(results))
    first = next(iter(results.values()))
    combined = {s: combine_records([r.records[s] for r in results.values()]) for s in first.records}
    baselines = {f"{name}_equity": r["equity"].to_numpy() for name, r in combined.items()}
    baselines.pop(f"{AGENT}_equity")
    equity = combined[AGENT][["timestamp", "equity", "exposure"]].assign(**baselines)
    write_bytes_atomic(out / "equity.csv", equity.to_csv(index=False).encode())
    write_json_atomic(out / "instruments.json", {n: r.metrics for n, r in results.items()})
    return out


INSTRUMENT_COLUMNS = (  # (metric, heading) of `instruments_table`
    ("bars", "bars"),
    ("sharpe", "sharpe"),
    ("total_return_pct", "return %"),
    ("max_drawdown_pct", "max dd %"),
    ("turnover_per_year", "turnover/yr"),
    ("fees_pct_per_year", "fees %/yr"),
)


def instruments_table(results: Mapping[str, BacktestResult], baseline: str = "buy_and_hold") -> str:
    """One row per instrument: the agent's headline metrics, then `baseline`'s Sharpe and return."""
    headers = ["instrument", *(h for _, h in INSTRUMENT_COLUMNS), f"{baseline} sharpe", "return %"]
    rows = []
    for name, result in results.items():
        agent, other = result.metrics[AGENT], result.metrics[baseline]
        cells = [agent[key] for key, _ in INSTRUMENT_COLUMNS]
        cells += [other["sharpe"], other["total_return_pct"]]
        rows.append([name, *(format_value(v) for v in cells)])
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    lines = [headers, ["-" * w for w in widths], *rows]

    def aligned(line: list[str]) -> str:
        cells = zip(line, widths, strict=True)
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(cells))

    return "\n".join(aligned(line) for line in lines)


def format_next_orders(results: Mapping[str, BacktestResult]) -> str:
    """The agent's next order of one instrument in full, or one line each for several."""
    if len(results) == 1:
        return format_next_order(next(iter(results.values())))
    lines = ["next orders, each decided on its instrument's last close, for the next open:"]
    for name, result in results.items():
        order = result.next_order
        if order is None:
            lines.append(f"  {name}: {format_next_order(result)}")
        else:
            lines.append(
                f"  {name} ({order.decided_at}, holding {order.held.brief()}): {order.order}"
            )
    return "\n".join(lines)


def describe_span(results: Mapping[str, BacktestResult]) -> str:
    """`<first> .. <last>, N bars` of one instrument, or the span and count of several."""
    records = [r.records[AGENT] for r in results.values()]
    first = min(r["timestamp"].iloc[0] for r in records)
    last = max(r["timestamp"].iloc[-1] for r in records)
    start, end = time_labels(np.array([first, last], dtype="datetime64[ns]"))
    if len(records) == 1:
        return f"{start} .. {end}, {len(records[0]) - 1:,} bars"
    return f"{start} .. {end}, {len(records)} instruments"
