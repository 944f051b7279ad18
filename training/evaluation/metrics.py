"""Backtest metrics: a per-bar record (`training.evaluation.rollout`) -> trades -> named metrics.

Two pure functions, in the manner of backtesting.py's `_stats.py`:

* `trades_from_record(record)`: the round trips of a record, one row per trade.
* `compute_metrics(record, trades, bars_per_year=...)`: a flat mapping of named metrics whose
  keys carry their units (`max_drawdown_pct`); `METRIC_DOCS` explains every key in one line.

`record_metrics(record, bars_per_year=...)` chains the two for callers that need no trades.

`format_metrics_table` renders the metrics of several strategies side by side for the terminal.

The record has one row per bar: row 0 is the starting state (flat, no costs, no action) and
row k the state after step k, marked at that bar's close. A step may fill the agent's order at
the bar's open (`order_fill`) and then exit by a stop or liquidation inside the bar
(`exit_fill`), so the position at the close alone does not show every trade; the side held
between the open fill and the exit is recovered from `direction`.

Edge cases, chosen once for every ratio (`_ratio`): a zero denominator gives +-inf when the
numerator is non-zero and NaN when it is zero too (0/0). The exception is the Sharpe ratio, which
is NaN at zero volatility, as in backtesting.py. Averages over an empty set are NaN.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from envs.config import DIRECTION_SIDES
from envs.sharpe import sharpe_ratio

TRADE_COLUMNS = (
    "entry_time", "exit_time", "side", "entry_price", "exit_price", "bars", "pnl", "return_pct",
    "exit_reason",
)  # fmt: skip

METRIC_DOCS: dict[str, str] = {
    "total_return_pct": "equity change over the whole record, % of the starting equity",
    "cagr_pct": "compound annual growth rate, % per year (-100 once equity is <= 0)",
    "volatility_ann_pct": "std of per-bar returns (ddof=1) * sqrt(bars_per_year), %",
    "sharpe": "mean excess per-bar return / its std * sqrt(bars_per_year); NaN at zero volatility",
    "sortino": "mean excess per-bar return / downside deviation * sqrt(bars_per_year)",
    "max_drawdown_pct": "largest fall of equity from its running peak, % of that peak (positive)",
    "calmar": "cagr_pct / max_drawdown_pct; inf when there is growth without any drawdown",
    "win_rate_pct": "trades with pnl > 0, % of all trades (NaN without trades)",
    "profit_factor": "gross profit / gross loss of trades (inf without losses, NaN without trades)",
    "exposure_pct": "bars that close with a non-zero position, % of all bars",
    "average_leverage": "mean |notional| / equity over the bars that close in a position",
    "turnover": "total traded notional / mean equity (times the book was traded)",
    "turnover_per_year": "turnover / years",
    "fees_pct_per_year": "commission + slippage + financing + borrow, % of mean equity a year",
    "trades": "number of round trips (a trade still open at the end counts)",
    "fees_paid": "commission + slippage + financing + borrow, money",
    "stops_hit": "positions closed by their stop",
    "liquidations": "positions liquidated at the maintenance margin",
    "bars": "steps in the record (rows after the starting row)",
    "years": "bars / bars_per_year",
}


# --- trades -----------------------------------------------------------------------------------


def _sides(record: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Side held before each bar and between its open fill and any exit (-1, 0, +1)."""
    after = np.sign(record["position"].to_numpy(dtype=float))
    before = np.concatenate([[0.0], after[:-1]])
    ordered = record["direction"].map(DIRECTION_SIDES).to_numpy(dtype=float)  # NaN on row 0
    has_order = record["order_fill"].notna().to_numpy()
    has_exit = record["exit_fill"].notna().to_numpy()
    # A stop or liquidation exit leaves the bar flat, so the side it exited is the one the open
    # fill set (or the one held before, without a fill). Without an exit, it is the close's side;
    # this also covers an order that found no equity left to trade with and flattened.
    at_open = np.where(has_exit, np.where(has_order, ordered, before), after)
    bad = (~has_order & (at_open != before)) | (has_exit & ((after != 0) | (at_open == 0)))
    bad |= np.isnan(at_open)  # an order fill with a `direction` that is not a side
    if after[0] != 0 or bad.any():
        row = 0 if after[0] != 0 else int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"record row {row}: position, order_fill, exit_fill and direction disagree "
            "(a position change needs a fill; an exit must leave the bar flat)"
        )
    return before, at_open


def _equity_at_open_fill(record: pd.DataFrame) -> np.ndarray:
    """Equity right after the held position is closed at the bar's open fill (NaN: no fill).

    The held units are marked from the previous close to the fill (which includes slippage) and
    pay their share of the bar's commission. The commission rate is read as commission /
    traded_notional of the bar, exact for the env's single rate on every fill.
    """
    equity = record["equity"].to_numpy(dtype=float)
    price = record["price"].to_numpy(dtype=float)
    position = record["position"].to_numpy(dtype=float)
    fill = record["order_fill"].to_numpy(dtype=float)
    notional = record["traded_notional"].to_numpy(dtype=float)
    commission = record["commission"].to_numpy(dtype=float)
    rate = np.divide(commission, notional, out=np.zeros_like(notional), where=notional > 0)
    held = np.concatenate([[0.0], position[:-1]])
    prev_equity = np.concatenate([[equity[0]], equity[:-1]])
    prev_price = np.concatenate([[price[0]], price[:-1]])
    return prev_equity + held * (fill - prev_price) - rate * np.abs(held) * fill


def trades_from_record(record: pd.DataFrame) -> pd.DataFrame:
    """The round trips of a backtest record, one row per trade (`TRADE_COLUMNS`).

    A trade opens when the position leaves 0 (on a flip: the new side) and closes when it
    returns to 0 or flips; resizes keep it open. `entry_price` is its first fill; `exit_price`
    the fill that closed it (`order_fill` for a "signal", `exit_fill` for a "stop" or
    "liquidation"), or the last close for a trade still open at the end ("end").
    `bars` counts the bars in which the trade held a position at some point: from its entry bar
    up to the bar before a signal exit (filled at that bar's open), or up to and including the
    bar of a stop, liquidation or the end.

    pnl is the equity change the trade is responsible for: equity right after its exit minus
    equity right before its entry. At an open fill, "right before/after" is the previous close's
    equity plus the held units marked to the fill, less their share of the commission
    (`_equity_at_open_fill`); after a stop or liquidation it is the bar's closing equity (flat);
    at the end, the last equity. A flip is split at its fill: the old trade takes the move up to
    the fill and the commission on the units it closes, the new trade the rest. Under the env's
    rules this is exact, not an approximation (it only assumes one commission rate per bar, which
    the env has): flat bars have no costs, so the trades' pnl sums to the record's total equity
    change. `return_pct` is pnl / equity before entry * 100.
    """
    before, at_open = _sides(record)
    open_equity = _equity_at_open_fill(record)
    times = record["timestamp"].to_numpy()
    equity = record["equity"].to_numpy(dtype=float)
    order_fill = record["order_fill"].to_numpy(dtype=float)
    exit_fill = record["exit_fill"].to_numpy(dtype=float)
    liquidated = record["liquidated"].to_numpy(dtype=bool)
    # Loop over the bars with a fill that changes the side, or an exit; not over every bar.
    # Each closed trade: (entry row, exit row, exit price, equity after its exit, reason).
    closed: list[tuple[int, int, float, float, str]] = []
    entry: int | None = None  # row of the open trade's entry fill; None while flat
    exits = ~np.isnan(exit_fill)
    for k in np.flatnonzero((at_open != before) | exits).tolist():
        if at_open[k] != before[k]:  # the open fill exits, enters or flips
            if entry is not None:
                closed.append((entry, k, order_fill[k], open_equity[k], "signal"))
            entry = k if at_open[k] != 0 else None
        if exits[k] and entry is not None:  # `_sides` checked that a position is held
            reason = "liquidation" if liquidated[k] else "stop"
            closed.append((entry, k, exit_fill[k], equity[k], reason))
            entry = None
    if entry is not None:
        last = len(record) - 1
        closed.append((entry, last, float(record["price"].iloc[last]), equity[last], "end"))

    done = pd.DataFrame(closed, columns=["entry", "exit", "price", "equity", "reason"])
    entries = done["entry"].to_numpy(dtype=np.int64)
    exit_rows = done["exit"].to_numpy(dtype=np.int64)
    reasons = done["reason"].to_numpy(dtype=object)
    pnl = done["equity"].to_numpy(dtype=float) - open_equity[entries]
    return pd.DataFrame(
        {
            "entry_time": times[entries],
            "exit_time": times[exit_rows],
            "side": np.where(at_open[entries] > 0, "long", "short"),
            "entry_price": order_fill[entries],
            "exit_price": done["price"].to_numpy(dtype=float),
            # A signal exit fills at the open of its bar, so that bar is not held.
            "bars": (exit_rows - entries + (reasons != "signal")).astype("int64"),
            "pnl": pnl,
            "return_pct": pnl / open_equity[entries] * 100.0,
            "exit_reason": reasons,
        },
        columns=list(TRADE_COLUMNS),
    )


# --- metrics ----------------------------------------------------------------------------------


def _wealth(equity: np.ndarray) -> np.ndarray:
    """Equity floored at 0 and kept at 0 once it gets there: a bankrupt account stays dead."""
    dead = np.logical_or.accumulate(equity <= 0)
    return np.where(dead, 0.0, equity)


def _bar_returns(wealth: np.ndarray) -> np.ndarray:
    """Simple per-bar returns of rows 1..n against rows 0..n-1 (0 after bankruptcy)."""
    prev, cur = wealth[:-1], wealth[1:]
    return np.divide(cur, prev, out=np.ones_like(cur), where=prev > 0) - 1.0


def _ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator; +-inf for x/0 with x != 0 and NaN for 0/0 (or any NaN)."""
    if math.isnan(numerator) or math.isnan(denominator):
        return math.nan
    if denominator == 0:
        return math.copysign(math.inf, numerator) if numerator != 0 else math.nan
    return numerator / denominator


def _max_drawdown(wealth: np.ndarray) -> float:
    """Largest fall from the running peak, as a fraction of the peak (1.0 when wiped out)."""
    peak = np.maximum.accumulate(wealth)
    drawdown = np.divide(peak - wealth, peak, out=np.zeros_like(wealth), where=peak > 0)
    return float(drawdown.max())


def _cagr(growth: float, years: float) -> float:
    """Compound annual growth rate (a fraction) of `growth` = final / initial equity.

    From the total growth over years = bars / bars_per_year. backtesting.py annualises the
    geometric mean of daily returns instead: the same number for a gapless bar index.
    """
    if years <= 0:
        return math.nan
    if growth <= 0:
        return -1.0
    with np.errstate(over="ignore"):  # a big gain over a short record overflows to inf
        return float(np.power(growth, 1.0 / years)) - 1.0


def _sharpe(returns: np.ndarray, risk_free_per_bar: float, bars_per_year: float) -> float:
    """Annualised Sharpe ratio of per-bar returns, as `envs.sharpe` defines it for the env too.

    NaN at zero volatility (or < 2 returns). backtesting.py divides the geometric annualised
    return by its own annualised volatility; the two agree for small per-bar returns.
    """
    if len(returns) < 2:
        return math.nan
    excess = float(np.mean(returns)) - risk_free_per_bar
    return sharpe_ratio(excess, float(np.std(returns, ddof=1)), bars_per_year)


def _sortino(returns: np.ndarray, risk_free_per_bar: float, bars_per_year: float) -> float:
    """Annualised Sortino ratio of per-bar returns in excess of the risk-free rate.

    Downside deviation = sqrt(mean(min(excess, 0)^2)) over *all* bars (the target downside
    deviation of Sortino & Price, with the risk-free rate as target), as backtesting.py does;
    some references divide by the count of negative bars instead, giving a smaller ratio.
    """
    if len(returns) == 0:
        return math.nan
    excess = returns - risk_free_per_bar
    downside = math.sqrt(float(np.mean(np.minimum(excess, 0.0) ** 2)))
    return _ratio(float(np.mean(excess)) * math.sqrt(bars_per_year), downside)


def _profit_factor(pnl: np.ndarray) -> float:
    """Gross profit / gross loss: inf with profit and no loss, NaN without trades (or 0/0)."""
    return _ratio(float(pnl[pnl > 0].sum()), float(-pnl[pnl < 0].sum()))


def _mean(values: np.ndarray) -> float:
    """Mean, NaN for an empty array (without numpy's warning)."""
    return float(values.mean()) if len(values) else math.nan


def compute_metrics(
    record: pd.DataFrame,
    trades: pd.DataFrame,
    *,
    bars_per_year: float,
    risk_free_rate: float = 0.0,
) -> dict[str, float]:
    """Named metrics of a backtest record and its trades (keys and meanings: `METRIC_DOCS`).

    `bars_per_year` annualises (about 252 for daily stocks, 8766 for hourly 24/7 crypto, 6200
    for hourly FX; the caller infers it from the bar spacing or overrides it). `risk_free_rate`
    is annual; Sharpe and Sortino subtract risk_free_rate / bars_per_year from each per-bar return
    (backtesting.py subtracts the annual rate from the annualised return: the same to first
    order). Once equity is <= 0 the account counts as wiped out: total return and CAGR are -100%.
    """
    if bars_per_year <= 0:
        raise ValueError(f"bars_per_year must be > 0, got {bars_per_year}")
    if len(record) == 0 or not record["equity"].iloc[0] > 0:
        raise ValueError("the record needs a starting row with positive equity")
    wealth = _wealth(record["equity"].to_numpy(dtype=float))
    returns = _bar_returns(wealth)
    risk_free_per_bar = risk_free_rate / bars_per_year
    bars = len(record) - 1
    years = bars / bars_per_year
    growth = float(wealth[-1] / wealth[0])
    cagr_pct = _cagr(growth, years) * 100.0
    max_drawdown_pct = _max_drawdown(wealth) * 100.0
    stepped = record.iloc[1:]  # the bars; row 0 is the starting state
    in_position = stepped["position"].to_numpy(dtype=float) != 0
    exposure = stepped["exposure"].to_numpy(dtype=float)
    pnl = trades["pnl"].to_numpy(dtype=float)
    turnover = _ratio(float(stepped["traded_notional"].sum()), float(wealth.mean()))
    fees = float(stepped["costs"].sum())
    return {
        "total_return_pct": (growth - 1.0) * 100.0,
        # Plain sqrt-of-time scaling, as in the Sharpe ratio (backtesting.py compounds the
        # per-bar mean and variance over a year instead).
        "cagr_pct": cagr_pct,
        "volatility_ann_pct": (
            float(np.std(returns, ddof=1)) * math.sqrt(bars_per_year) * 100.0
            if len(returns) >= 2
            else math.nan
        ),
        "sharpe": _sharpe(returns, risk_free_per_bar, bars_per_year),
        "sortino": _sortino(returns, risk_free_per_bar, bars_per_year),
        "max_drawdown_pct": max_drawdown_pct,
        "calmar": _ratio(cagr_pct, max_drawdown_pct),
        "win_rate_pct": _mean(pnl > 0) * 100.0,
        "profit_factor": _profit_factor(pnl),
        "exposure_pct": _mean(in_position) * 100.0,
        "average_leverage": _mean(np.abs(exposure[in_position])),
        "turnover": turnover,
        "turnover_per_year": turnover / years if years > 0 else math.nan,
        "fees_pct_per_year": (
            fees / float(wealth.mean()) / years * 100.0
            if years > 0 and wealth.mean() > 0
            else math.nan
        ),
        "trades": len(trades),
        "fees_paid": fees,
        "stops_hit": int(stepped["stop_hit"].sum()),
        "liquidations": int(stepped["liquidated"].sum()),
        "bars": bars,
        "years": years,
    }


def record_metrics(record: pd.DataFrame, *, bars_per_year: float) -> dict[str, float]:
    """`compute_metrics` of a record with its own trades (`trades_from_record`)."""
    return compute_metrics(record, trades_from_record(record), bars_per_year=bars_per_year)


# --- terminal table ---------------------------------------------------------------------------


def format_value(value: float | None) -> str:
    """A metric for the table: integers as integers, NaN (or None, JSON's NaN) as '-', small
    numbers in e-notation."""
    if value is None:
        return "-"
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return f"{value:,d}"
    value = float(value)
    if math.isnan(value):
        return "-"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value != 0 and abs(value) < 0.01:
        return f"{value:.2e}"
    return f"{value:,.2f}"


def format_metrics_table(columns: dict[str, dict[str, float]]) -> str:
    """Metrics of several strategies side by side: one row per metric, one column per strategy.

    `columns` maps a strategy name ("agent", "buy_and_hold", ...) to its `compute_metrics`
    result. Rows follow `METRIC_DOCS` order, then any other keys in first-seen order; a metric
    a strategy lacks shows as '-'.
    """
    keys = [key for key in METRIC_DOCS if any(key in m for m in columns.values())]
    for metrics in columns.values():
        keys += [key for key in metrics if key not in keys]
    header = ["metric", *columns]
    body = [[key, *(format_value(m.get(key, math.nan)) for m in columns.values())] for key in keys]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest])

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(header), rule, *(line(row) for row in body)])
