"""Several instruments' accounts as one: the equal-weight portfolio, rebalanced every bar."""

import numpy as np
import pandas as pd
import pytest

from training.evaluation.metrics import compute_metrics
from training.evaluation.portfolio import combine_records
from training.evaluation.rollout import RECORD_COLUMNS


def record(days: list[str], equity: list[float], exposure: list[float], costs: list[float]):
    n = len(days)
    frame = pd.DataFrame({name: np.nan for name in RECORD_COLUMNS}, index=range(n))
    frame["timestamp"] = pd.to_datetime(days)
    frame["equity"] = equity
    frame["exposure"] = exposure
    frame["position"] = exposure
    frame["direction"] = ""
    for name in ("traded_notional", "commission", "slippage", "financing", "borrow", "costs"):
        frame[name] = 0.0
    frame["costs"] = costs
    frame["traded_notional"] = [c * 100 for c in costs]
    for name in ("stop_hit", "liquidated", "bankrupt"):
        frame[name] = False
    return frame


def test_each_bar_grows_by_the_mean_return_of_the_accounts_stepping_on_it():
    # A: steps on Jan 2 and 3; B starts a day later (Jan 2 is its row 0) and steps on 3 and 4.
    a = record(["2020-01-01", "2020-01-02", "2020-01-03"], [100, 110, 99], [0, 1, 1], [0, 1, 2])
    b = record(["2020-01-02", "2020-01-03", "2020-01-04"], [100, 120, 120], [0, 2, 0], [0, 0, 3])
    combined = combine_records([a, b])
    assert list(combined["timestamp"].dt.day) == [1, 2, 3, 4]
    # Jan 2: A +10%; Jan 3: mean of A -10% and B +20% = +5%; Jan 4: B 0%.
    np.testing.assert_allclose(combined["equity"], [100, 110, 115.5, 115.5])
    np.testing.assert_allclose(combined["exposure"], [0, 1, 1.5, 0])
    # Costs as a share of each account's equity before the step, averaged, in combined money:
    # Jan 2: A 1/100 of 100; Jan 3: mean(2/110, 0/100) of 110; Jan 4: 3/120 of 115.5.
    np.testing.assert_allclose(combined["costs"], [0, 1.0, 1.0, 3 / 120 * 115.5])
    metrics = compute_metrics(combined, pd.DataFrame({"pnl": []}), bars_per_year=252)
    assert metrics["total_return_pct"] == pytest.approx(15.5)
    assert metrics["exposure_pct"] == pytest.approx(200 / 3)  # 2 of the 3 stepped bars


def test_one_account_is_its_own_portfolio():
    a = record(["2020-01-01", "2020-01-02", "2020-01-03"], [100, 110, 99], [0, 1, 1], [0, 1, 2])
    combined = combine_records([a])
    np.testing.assert_allclose(combined["equity"], a["equity"])
    np.testing.assert_allclose(combined["costs"], a["costs"])


def test_a_ruined_account_stops_adding_returns():
    a = record(["2020-01-01", "2020-01-02", "2020-01-03"], [100, 0, 0], [0, 1, 0], [0, 0, 0])
    b = record(["2020-01-01", "2020-01-02", "2020-01-03"], [100, 100, 110], [0, 1, 1], [0, 0, 0])
    combined = combine_records([a, b])
    np.testing.assert_allclose(combined["equity"], [100, 50, 55])  # -100% and 0%, then 0 and 10%


def test_an_account_without_a_bar_on_a_live_day_counts_with_a_return_of_0():
    """A holiday of one exchange: the other instrument's move is diluted, not the whole bar."""
    a = record(["2020-01-01", "2020-01-02", "2020-01-03", "2020-01-06"], [100, 110, 121, 121],
               [0, 1, 1, 1], [0, 0, 0, 0])  # fmt: skip
    b = record(["2020-01-01", "2020-01-02", "2020-01-06"], [100, 100, 100], [0, 2, 2], [0, 0, 0])
    combined = combine_records([a, b])
    # Jan 2: mean(10%, 0%); Jan 3: B is closed but live: mean(10%, 0); Jan 6: mean(0, 0)
    np.testing.assert_allclose(combined["equity"], [100, 105, 110.25, 110.25])
    np.testing.assert_allclose(combined["exposure"], [0, 1.5, 1.5, 1.5])  # B's 2x held over
