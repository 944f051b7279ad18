"""Backtest metrics on hand-computed records: every expected value is written as its arithmetic.

Fixtures (`tests/fixtures/`, the `training.evaluation.rollout` record layout, no costs):
* `record_long_hold.csv`: 1 unit long from bar 1's open at 100 to the end; equity = price, so
  the per-bar returns are +10%, -10%, +10%, +20%, -10%.
* `record_long_signal_short_stop.csv`: 10 units long 100 -> 104 closed by a flat signal, then
  10 units short at 104 stopped at 109.2 (risk 5% at leverage 1: 104 * 1.05).
"""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from training.evaluation.metrics import (
    METRIC_DOCS,
    compute_metrics,
    format_metrics_table,
    trades_from_record,
)

FIXTURES = Path(__file__).parent / "fixtures"
NAN = math.nan


def load_record(name: str) -> pd.DataFrame:
    record = pd.read_csv(FIXTURES / name, parse_dates=["timestamp"])
    record["direction"] = record["direction"].fillna("")  # row 0 has no action
    return record


def make_record(
    price: list[float],
    equity: list[float],
    position: list[float],
    direction: list[str],
    *,
    order_fill: dict[int, float] | None = None,
    exit_fill: dict[int, float] | None = None,
    commission: dict[int, float] | None = None,
    traded_notional: dict[int, float] | None = None,
    stop_hit: tuple[int, ...] = (),
    liquidated: tuple[int, ...] = (),
    bankrupt: tuple[int, ...] = (),
) -> pd.DataFrame:
    """A record in the `training.evaluation.rollout` layout; sparse columns as {row: value}."""
    n = len(price)

    def column(values: dict[int, float] | None, default: float) -> np.ndarray:
        out = np.full(n, default)
        for row, value in (values or {}).items():
            out[row] = value
        return out

    price_a, equity_a, position_a = (np.asarray(x, dtype=float) for x in (price, equity, position))
    fees = column(commission, 0.0)
    return pd.DataFrame(
        {
            "timestamp": pd.date_range("2024-01-01", periods=n, freq="D"),
            "price": price_a,
            "equity": equity_a,
            "position": position_a,
            "exposure": np.where(equity_a > 0, position_a * price_a / equity_a, 0.0),
            "direction": ["", *direction],
            "leverage": 1.0,
            "risk": 0.05,
            "order_fill": column(order_fill, NAN),
            "exit_fill": column(exit_fill, NAN),
            "traded_notional": column(traded_notional, 0.0),
            "commission": fees,
            "slippage": 0.0,
            "financing": 0.0,
            "borrow": 0.0,
            "costs": fees,
            "stop_hit": np.isin(np.arange(n), stop_hit),
            "liquidated": np.isin(np.arange(n), liquidated),
            "bankrupt": np.isin(np.arange(n), bankrupt),
        }
    )


def metrics_of(record: pd.DataFrame, bars_per_year: float = 252.0, **kwargs) -> dict:
    return compute_metrics(record, trades_from_record(record), bars_per_year=bars_per_year,
                           **kwargs)  # fmt: skip


def test_known_equity_curve_golden_values():
    record = load_record("record_long_hold.csv")
    m = metrics_of(record, bars_per_year=5.0)  # 5 bars = exactly one year
    r = np.array([0.1, -0.1, 0.1, 0.2, -0.1])
    mean = (0.1 - 0.1 + 0.1 + 0.2 - 0.1) / 5  # 0.04
    std = math.sqrt((0.06**2 + 0.14**2 + 0.06**2 + 0.16**2 + 0.14**2) / (5 - 1))  # ddof=1
    downside = math.sqrt((0.1**2 + 0.1**2) / 5)  # over all 5 bars, not only the 2 losing ones
    total = 1.1 * 0.9 * 1.1 * 1.2 * 0.9 - 1  # 117.612 / 100 - 1
    assert np.std(r, ddof=1) == pytest.approx(std)
    assert m["total_return_pct"] == pytest.approx(17.612)
    assert m["total_return_pct"] == pytest.approx(total * 100)
    assert m["cagr_pct"] == pytest.approx(total * 100)  # one year
    assert m["volatility_ann_pct"] == pytest.approx(std * math.sqrt(5) * 100)
    assert m["sharpe"] == pytest.approx(mean / std * math.sqrt(5))
    assert m["sortino"] == pytest.approx(mean / downside * math.sqrt(5))
    # Peak 110 -> 99 and peak 130.68 -> 117.612 are both a 10% fall.
    assert m["max_drawdown_pct"] == pytest.approx(10.0)
    assert m["calmar"] == pytest.approx(total * 100 / 10.0)
    assert m["exposure_pct"] == 100.0
    assert m["average_leverage"] == pytest.approx(1.0)
    mean_equity = (100 + 110 + 99 + 108.9 + 130.68 + 117.612) / 6
    assert m["turnover"] == pytest.approx(100.0 / mean_equity)  # one entry of 1 unit at 100
    assert m["trades"] == 1 and m["win_rate_pct"] == 100.0
    assert m["profit_factor"] == math.inf  # a profit and no loss
    assert m["bars"] == 5 and m["years"] == 1.0
    assert m["fees_paid"] == 0.0 and m["stops_hit"] == 0 and m["liquidations"] == 0
    assert list(m) == list(METRIC_DOCS)


def test_trade_open_at_the_end_closes_at_the_last_close():
    trades = trades_from_record(load_record("record_long_hold.csv"))
    [trade] = trades.to_dict("records")
    assert trade["side"] == "long" and trade["exit_reason"] == "end"
    assert trade["entry_price"] == 100.0 and trade["exit_price"] == 117.612
    assert trade["entry_time"] == pd.Timestamp("2024-01-02")
    assert trade["exit_time"] == pd.Timestamp("2024-01-06")
    assert trade["bars"] == 5  # held in bars 1..5
    assert trade["pnl"] == pytest.approx(117.612 - 100)
    assert trade["return_pct"] == pytest.approx((117.612 - 100) / 100 * 100)


def test_long_signal_exit_and_short_stop_exit():
    record = load_record("record_long_signal_short_stop.csv")
    trades = trades_from_record(record)
    assert trades["side"].tolist() == ["long", "short"]
    assert trades["exit_reason"].tolist() == ["signal", "stop"]
    assert trades["entry_price"].tolist() == [100.0, 104.0]
    assert trades["exit_price"].tolist() == [104.0, 104 * (1 + 0.05)]
    long_pnl = 10 * (104 - 100)
    short_pnl = -10 * (109.2 - 104)
    assert trades["pnl"].tolist() == pytest.approx([long_pnl, short_pnl])
    assert trades["return_pct"].tolist() == pytest.approx(
        [long_pnl / 1000 * 100, short_pnl / (1000 + long_pnl) * 100]
    )
    # Long: entered at bar 1's open, held in bars 1-2, sold at bar 3's open. Short: bars 5-6.
    assert trades["bars"].tolist() == [2, 2]
    assert trades["entry_time"].tolist() == [pd.Timestamp("2024-01-02"), pd.Timestamp("2024-01-06")]
    assert trades["exit_time"].tolist() == [pd.Timestamp("2024-01-04"), pd.Timestamp("2024-01-07")]

    m = compute_metrics(record, trades, bars_per_year=252.0)
    assert m["trades"] == 2 and m["stops_hit"] == 1
    assert m["win_rate_pct"] == 50.0
    assert m["profit_factor"] == pytest.approx(long_pnl / -short_pnl)  # 40 / 52
    assert m["total_return_pct"] == pytest.approx((988 / 1000 - 1) * 100)
    assert m["max_drawdown_pct"] == pytest.approx((1050 - 988) / 1050 * 100)
    assert m["exposure_pct"] == pytest.approx(3 / 7 * 100)  # bars 1, 2 and 5 close in a position
    assert m["average_leverage"] == pytest.approx((1 + 1 + 10 * 103 / 1050) / 3)
    mean_equity = (1000 + 1020 + 1050 + 1040 + 1040 + 1050 + 988 + 988) / 8
    notional = 10 * 100 + 10 * 104 + 10 * 104 + 10 * 109.2
    assert m["turnover"] == pytest.approx(notional / mean_equity)


def test_flat_record_has_no_volatility_and_undefined_ratios():
    record = make_record([100, 101, 99, 102], [1000] * 4, [0] * 4, ["flat"] * 3)
    m = metrics_of(record)
    assert m["total_return_pct"] == 0.0 and m["cagr_pct"] == 0.0
    assert m["volatility_ann_pct"] == 0.0 and m["max_drawdown_pct"] == 0.0
    # Sharpe is NaN at zero volatility; Sortino and Calmar are 0/0 here, also NaN.
    assert math.isnan(m["sharpe"]) and math.isnan(m["sortino"]) and math.isnan(m["calmar"])
    # No trades and no bars in a position: rates and averages over nothing are NaN.
    assert m["trades"] == 0
    assert math.isnan(m["win_rate_pct"]) and math.isnan(m["profit_factor"])
    assert m["exposure_pct"] == 0.0 and math.isnan(m["average_leverage"])
    assert m["turnover"] == 0.0 and m["fees_paid"] == 0.0
    assert trades_from_record(record).empty
    # With a risk-free rate the flat book earns less than it: a negative Sortino, Sharpe still NaN.
    m = metrics_of(record, risk_free_rate=0.05)
    assert m["sortino"] == pytest.approx(-math.sqrt(252)) and math.isnan(m["sharpe"])


def test_bankrupt_record_is_minus_100_pct():
    # 5x long: 50 units at 100 with 1000 equity; bar 2 opens at 75, through the liquidation
    # level, so the exit fills at the open and equity ends at 1000 + 50 * (75 - 100) = -250.
    record = make_record(
        [100, 100, 70], [1000, 1000, 1000 + 50 * (75 - 100)], [0, 50, 0], ["long", "long"],
        order_fill={1: 100.0}, exit_fill={2: 75.0}, traded_notional={1: 5000.0, 2: 3750.0},
        liquidated=(2,), bankrupt=(2,),
    )  # fmt: skip
    m = metrics_of(record)
    assert m["total_return_pct"] == -100.0 and m["cagr_pct"] == -100.0
    assert m["max_drawdown_pct"] == 100.0 and m["liquidations"] == 1
    assert m["calmar"] == pytest.approx(-100.0 / 100.0)
    r = np.array([0.0, -1.0])  # equity is floored at 0 for returns: 0 / 1000 - 1
    assert m["sharpe"] == pytest.approx(r.mean() / r.std(ddof=1) * math.sqrt(252))
    assert all(math.isfinite(v) for v in m.values())  # logs and powers handled safely
    [trade] = trades_from_record(record).to_dict("records")
    assert trade["exit_reason"] == "liquidation" and trade["exit_price"] == 75.0
    assert trade["pnl"] == pytest.approx(50 * (75 - 100))  # the full loss, beyond the equity
    assert trade["return_pct"] == pytest.approx(50 * (75 - 100) / 1000 * 100)


def test_flip_long_to_short_splits_pnl_and_commission_at_the_fill():
    c = 0.001  # commission rate on traded notional
    # Bar 1: buy 10 at 100 (fee 10 * 100 * c); close 110.
    cash1 = 1000 - 10 * 100 - 10 * 100 * c
    # Bar 2: flip at the open 111 to short 1x the equity at the open: sell 10 + short units.
    short = (cash1 + 10 * 111) / 111
    cash2 = cash1 + (10 + short) * 111 - (10 + short) * 111 * c
    record = make_record(
        [100, 110, 105, 100],
        [1000, cash1 + 10 * 110, cash2 - short * 105, cash2 - short * 100],
        [0, 10, -short, -short],
        ["long", "short", "short"],
        order_fill={1: 100.0, 2: 111.0},
        traded_notional={1: 10 * 100, 2: (10 + short) * 111},
        commission={1: 10 * 100 * c, 2: (10 + short) * 111 * c},
    )
    trades = trades_from_record(record)
    assert trades["side"].tolist() == ["long", "short"]
    assert trades["exit_reason"].tolist() == ["signal", "end"]
    assert trades["entry_price"].tolist() == [100.0, 111.0]
    assert trades["exit_price"].tolist() == [111.0, 100.0]
    # Each leg pays the commission on its own units of the shared fill.
    long_pnl = 10 * (111 - 100) - 10 * 100 * c - 10 * 111 * c
    short_pnl = short * (111 - 100) - short * 111 * c
    assert trades["pnl"].tolist() == pytest.approx([long_pnl, short_pnl], rel=1e-12)
    assert trades["return_pct"].tolist() == pytest.approx(
        [long_pnl / 1000 * 100, short_pnl / (1000 + long_pnl) * 100], rel=1e-12
    )
    assert trades["bars"].tolist() == [1, 2]  # long held in bar 1; short in bars 2-3 (open)
    assert trades["pnl"].sum() == pytest.approx(record["equity"].iloc[-1] - 1000, rel=1e-12)
    m = compute_metrics(record, trades, bars_per_year=252.0)
    assert m["fees_paid"] == pytest.approx(10 * 100 * c + (10 + short) * 111 * c)


def test_entry_and_stop_in_the_same_bar_is_a_trade():
    # Long 10 at bar 1's open 100, stopped inside the bar at 95; the bar closes flat.
    record = make_record(
        [100, 97, 98], [1000, 1000 + 10 * (95 - 100), 950], [0, 0, 0], ["long", "flat"],
        order_fill={1: 100.0}, exit_fill={1: 95.0}, traded_notional={1: 1000 + 950},
        stop_hit=(1,),
    )  # fmt: skip
    [trade] = trades_from_record(record).to_dict("records")
    assert trade["exit_reason"] == "stop" and trade["bars"] == 1
    assert trade["pnl"] == pytest.approx(10 * (95 - 100))
    m = metrics_of(record)
    assert m["trades"] == 1 and m["stops_hit"] == 1 and m["exposure_pct"] == 0.0


def test_annualised_figures_scale_with_bars_per_year():
    record = load_record("record_long_hold.csv")
    daily, hourly = metrics_of(record, 252.0), metrics_of(record, 8766.0)
    factor = math.sqrt(8766 / 252)
    for key in ("sharpe", "sortino", "volatility_ann_pct"):
        assert hourly[key] == pytest.approx(daily[key] * factor)
    for key in ("total_return_pct", "max_drawdown_pct", "win_rate_pct", "turnover", "bars"):
        assert hourly[key] == daily[key]
    assert hourly["years"] == pytest.approx(5 / 8766) and daily["years"] == pytest.approx(5 / 252)
    assert daily["cagr_pct"] == pytest.approx((1.17612 ** (252 / 5) - 1) * 100)
    assert hourly["cagr_pct"] == pytest.approx((1.17612 ** (8766 / 5) - 1) * 100)


def test_inconsistent_record_is_rejected():
    # The position changes on bar 1 without any fill.
    record = make_record([100, 101], [1000, 1000], [0, 10], ["long"])
    with pytest.raises(ValueError, match="row 1"):
        trades_from_record(record)


def test_table_aligns_strategies_side_by_side():
    record = load_record("record_long_signal_short_stop.csv")
    flat = make_record([100] * 8, [1000] * 8, [0] * 8, ["flat"] * 7)
    table = format_metrics_table({"agent": metrics_of(record), "flat": metrics_of(flat)})
    lines = table.splitlines()
    assert lines[0].split() == ["metric", "agent", "flat"]
    assert len({len(line) for line in lines}) == 1  # every line padded to the same width
    assert len(lines) == 2 + len(METRIC_DOCS)
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    assert rows["trades"] == ["2", "0"]
    assert rows["win_rate_pct"] == ["50.00", "-"]  # NaN prints as '-'
    assert rows["profit_factor"] == [f"{40 / 52:.2f}", "-"]


def simulate(seed: int, commission: float, carry: float) -> tuple[pd.DataFrame, int]:
    """A random record under the env's rules (open fills, stops, carry cost), and its entries.

    A reference for `trades_from_record`, independent of its logic: actions are random, bars
    gap and swing enough to hit stops, including on the bar of an entry or a flip.
    """
    rng = np.random.default_rng(seed)
    n, risk = 40, 0.05
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.03, n)))
    open_ = np.r_[100.0, close[:-1]] * np.exp(rng.normal(0, 0.01, n))
    high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0, 0.02, n)))
    low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0, 0.02, n)))
    cash, qty, side, lev, stop, entries = 1000.0, 0.0, 0, 0.0, 0.0, 0
    rows = [dict(price=close[0], equity=cash, position=0.0, direction="", order_fill=NAN,
                 exit_fill=NAN, traded_notional=0.0, commission=0.0, stop_hit=False)]  # fmt: skip
    for t in range(1, n):
        want, want_lev = int(rng.integers(-1, 2)), float(rng.choice([1.0, 2.0]))
        row = dict(direction={-1: "short", 0: "flat", 1: "long"}[want], order_fill=NAN,
                   exit_fill=NAN, traded_notional=0.0, commission=0.0, stop_hit=False)  # fmt: skip
        if want != side or (want != 0 and want_lev != lev):
            target = want * want_lev * (cash + qty * open_[t]) / open_[t]
            units = target - qty
            fee = abs(units) * open_[t] * commission
            cash, qty = cash - units * open_[t] - fee, target
            entries += want != 0 and want != side
            side, lev = want, want_lev
            stop = open_[t] * (1 - side * risk / lev) if side else 0.0
            row.update(order_fill=open_[t], traded_notional=abs(units) * open_[t], commission=fee)
        if qty != 0 and (low[t] <= stop if qty > 0 else high[t] >= stop):
            fill = min(open_[t], stop) if qty > 0 else max(open_[t], stop)
            fee = abs(qty) * fill * commission
            cash += qty * fill - fee
            row.update(exit_fill=fill, stop_hit=True, commission=row["commission"] + fee,
                       traded_notional=row["traded_notional"] + abs(qty) * fill)  # fmt: skip
            qty, side, lev = 0.0, 0, 0.0
        cash -= carry * abs(qty) * close[t]
        row.update(price=close[t], equity=cash + qty * close[t], position=qty)
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame.insert(0, "timestamp", pd.date_range("2024-01-01", periods=n, freq="h"))
    frame["exposure"] = frame["position"] * frame["price"] / frame["equity"]
    frame["costs"] = frame["commission"]
    frame[["leverage", "risk", "slippage", "financing", "borrow"]] = 0.0
    frame["liquidated"] = frame["bankrupt"] = False
    return frame, entries


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    commission=st.sampled_from([0.0, 0.001]),
    carry=st.sampled_from([0.0, 1e-4]),
)
def test_trade_pnl_adds_up_to_the_equity_change(seed, commission, carry):
    record, entries = simulate(seed, commission, carry)
    trades = trades_from_record(record)
    assert len(trades) == entries
    total = record["equity"].iloc[-1] - record["equity"].iloc[0]
    assert trades["pnl"].sum() == pytest.approx(total, rel=1e-9, abs=1e-9)
    assert (trades["exit_reason"] == "stop").sum() == record["stop_hit"].sum()
    assert (trades["bars"] >= 1).all()


@pytest.mark.parametrize("seed", [0, 1])
def test_real_env_rollout_trades_add_up_to_the_equity_change(seed):
    # The env's own kernel, random actions; 10x leverage so that liquidations and gaps through
    # zero equity happen too (seed 0 gaps through zero equity, seed 1 ends in a liquidation).
    from envs import TradingEnv
    from training.evaluation.rollout import record_episode

    env = TradingEnv(
        "data/gymanytrading_GOOGL_daily.csv", window=16, episode_length=None, random_start=False,
        leverage_levels=(1.0, 10.0), risk_levels=(0.05, 1.0),
    )  # fmt: skip
    rng = np.random.default_rng(seed)
    record = record_episode(env, lambda obs: rng.integers(0, [3, 2, 2]), seed=seed)
    trades = trades_from_record(record)
    total = record["equity"].iloc[-1] - record["equity"].iloc[0]
    assert trades["pnl"].sum() == pytest.approx(total, rel=1e-9, abs=1e-6)
    assert (trades["exit_reason"] == "stop").sum() == record["stop_hit"].sum()
    assert (trades["exit_reason"] == "liquidation").sum() == record["liquidated"].sum()
    m = compute_metrics(record, trades, bars_per_year=env.core.bars_per_year)
    assert m["trades"] == len(trades) > 100
