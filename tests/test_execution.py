"""Exact accounting on hand-computed examples: fills, costs, stops, gaps, financing, liquidation."""

import math

import numpy as np
import pandas as pd
import pytest

from envs import TradingEnv
from envs import execution as ex

LONG, SHORT, FLAT = 2, 0, 1  # direction indices with (short, flat, long)
COMMISSION = 10e-4  # 10 bps
SLIPPAGE = 5e-4  # 5 bps


def make_env(bars: list[tuple[float, float, float, float]], **overrides) -> TradingEnv:
    """An env over hand-written OHLC bars; the first decision is taken on bar 1's close."""
    frame = pd.DataFrame(
        bars,
        columns=["Open", "High", "Low", "Close"],
        index=pd.date_range("2020-01-01", periods=len(bars), freq="D", name="Date"),
    )
    frame["Volume"] = 1000.0
    config = dict(
        window=2,
        initial_equity=1000.0,
        commission_bps=10.0,
        slippage_bps=5.0,
        financing_rate_annual=0.10,
        borrow_fee_annual=0.05,
        bars_per_year=100.0,
        maintenance_margin=0.1,
        leverage_levels=(1.0, 2.0, 5.0),
        risk_levels=(0.05, 1.0),
        episode_length=None,
        random_start=False,
    )
    config.update(overrides)
    env = TradingEnv(frame, **config)
    env.reset(seed=0)
    return env


def act(direction: int, leverage: int, risk: int) -> np.ndarray:
    return np.array([direction, leverage, risk])


def test_leveraged_long_pays_commission_slippage_and_financing():
    env = make_env(
        [(100, 101, 99, 100), (100, 102, 99, 101), (102, 104, 101, 103), (103, 105, 102, 104)]
    )
    _, reward, terminated, truncated, info = env.step(act(LONG, 1, 0))  # 2x, risk 5%
    # Fill at bar 2's open, 102, moved up by slippage; 2 x equity of 1000 at the open.
    units = 2 * 1000.0 / 102
    fill = 102 * (1 + SLIPPAGE)
    commission = units * fill * COMMISSION
    cash = 1000.0 - units * fill - commission
    financing = -cash * 0.10 / 100  # borrowed cash, per bar
    cash -= financing
    equity = cash + units * 103
    assert info["order_fill"] == pytest.approx(fill, rel=1e-12)
    assert info["commission"] == pytest.approx(commission, rel=1e-12)
    assert info["slippage"] == pytest.approx(units * 102 * SLIPPAGE, rel=1e-12)
    assert info["financing"] == pytest.approx(financing, rel=1e-12)
    assert info["position"] == pytest.approx(units, rel=1e-12)
    assert info["cash"] == pytest.approx(cash, rel=1e-12)
    assert info["equity"] == pytest.approx(equity, rel=1e-12)
    assert reward == pytest.approx(np.log(equity / 1000.0), rel=1e-12)
    assert not info["stop_hit"] and not terminated and not truncated
    assert info["action"] == {"direction": "long", "leverage": 2.0, "risk": 0.05}

    # Holding the same action trades nothing and pays only financing.
    _, _, _, truncated, info = env.step(act(LONG, 1, 0))
    assert np.isnan(info["order_fill"]) and info["commission"] == 0 and info["slippage"] == 0
    financing2 = -cash * 0.10 / 100
    assert info["financing"] == pytest.approx(financing2, rel=1e-12)
    assert info["equity"] == pytest.approx(cash - financing2 + units * 104, rel=1e-12)
    assert truncated  # bar 3 is the last: no next open to fill on


def test_stop_inside_the_bar_fills_at_the_stop():
    env = make_env(
        [
            (100, 101, 99, 100),
            (100, 101, 99, 100),
            (100, 101, 99.5, 100),
            (99.9, 100, 96, 97),
            (97, 98, 96, 97),
        ]
    )
    env.step(act(LONG, 0, 0))  # 1x, risk 5%: stop 5% below the entry
    units = 1000.0 / 100
    fill = 100 * (1 + SLIPPAGE)
    cash = 1000.0 - units * fill * (1 + COMMISSION)
    assert cash < 0  # at 1x the entry costs are borrowed too, so financing is due on them
    cash -= -cash * 0.10 / 100
    stop = fill * (1 - 0.05)
    _, _, terminated, _, info = env.step(act(LONG, 0, 0))  # bar 3: low 96 above the stop
    assert not info["stop_hit"]
    assert stop == pytest.approx(95 * (1 + SLIPPAGE), rel=1e-12)
    env2 = make_env(
        [
            (100, 101, 99, 100),
            (100, 101, 99, 100),
            (100, 101, 99.5, 100),
            (99.9, 100, 94, 97),
            (97, 98, 96, 97),
        ]
    )
    env2.step(act(LONG, 0, 0))
    _, _, terminated, _, info = env2.step(act(LONG, 0, 0))  # bar 3: low 94 reaches the stop
    exit_fill = stop * (1 - SLIPPAGE)
    cash += units * exit_fill * (1 - COMMISSION)
    assert info["stop_hit"] and not terminated
    assert info["exit_fill"] == pytest.approx(exit_fill, rel=1e-12)
    assert info["position"] == 0
    assert info["equity"] == pytest.approx(cash, rel=1e-12)
    assert info["equity"] == pytest.approx(1000 * (1 - 0.05) - 2 * 1000 * 1e-3, rel=2e-3)


def test_gap_through_the_stop_fills_at_the_open():
    env = make_env(
        [
            (100, 101, 99, 100),
            (100, 101, 99, 100),
            (100, 101, 99.5, 100),
            (90, 92, 89, 91),
            (91, 92, 90, 91),
        ]
    )
    env.step(act(LONG, 0, 0))
    units = 1000.0 / 100
    cash = 1000.0 - units * 100 * (1 + SLIPPAGE) * (1 + COMMISSION)
    cash -= -cash * 0.10 / 100  # financing on the borrowed entry costs
    _, _, _, _, info = env.step(act(LONG, 0, 0))  # opens at 90, below the stop at ~95
    exit_fill = 90 * (1 - SLIPPAGE)
    assert info["stop_hit"]
    assert info["exit_fill"] == pytest.approx(exit_fill, rel=1e-12)
    assert info["equity"] == pytest.approx(cash + units * exit_fill * (1 - COMMISSION), rel=1e-12)


def test_short_pays_the_borrow_fee_and_gains_when_price_falls():
    env = make_env([(100, 101, 99, 100), (100, 101, 99, 100), (100, 101, 97, 98), (98, 99, 97, 98)])
    _, reward, _, _, info = env.step(act(SHORT, 0, 0))
    units = 1000.0 / 100
    fill = 100 * (1 - SLIPPAGE)  # selling fills lower
    cash = 1000.0 + units * fill - units * fill * COMMISSION
    borrow = units * 98 * 0.05 / 100
    equity = cash - borrow - units * 98
    assert info["position"] == pytest.approx(-units, rel=1e-12)
    assert info["borrow"] == pytest.approx(borrow, rel=1e-12)
    assert info["financing"] == 0
    assert info["equity"] == pytest.approx(equity, rel=1e-12)
    assert reward > 0


def test_changing_only_risk_moves_the_stop_without_trading():
    env = make_env(
        [
            (100, 101, 99, 100),
            (100, 101, 99, 100),
            (100, 101, 99.5, 100),
            (99, 100, 60, 70),
            (70, 71, 69, 70),
        ]
    )
    env.step(act(LONG, 0, 0))
    _, _, _, _, info = env.step(act(LONG, 0, 1))  # risk 100% at 1x: stop at 0, no trade
    assert np.isnan(info["order_fill"]) and info["commission"] == 0
    assert not info["stop_hit"]
    assert info["position"] == pytest.approx(10.0)


def test_liquidation_comes_before_a_far_stop_and_terminates():
    env = make_env(
        [
            (100, 101, 99, 100),
            (100, 101, 99, 100),
            (100, 101, 99.5, 100),
            (99, 100, 85, 90),
            (90, 91, 89, 90),
        ]
    )
    env.step(act(LONG, 2, 1))  # 5x with a 100% risk stop: stop 20% below, liquidation ~11% below
    units = 5 * 1000.0 / 100
    fill = 100 * (1 + SLIPPAGE)
    cash = 1000.0 - units * fill * (1 + COMMISSION)
    cash -= -cash * 0.10 / 100
    liquidation = -cash / (units * (1 - 0.1))
    assert 85 < liquidation < 99  # met inside the next bar, before the stop near 80
    _, reward, terminated, truncated, info = env.step(act(LONG, 2, 1))
    exit_fill = liquidation * (1 - SLIPPAGE)
    equity = cash + units * exit_fill * (1 - COMMISSION)
    assert info["liquidated"] and not info["stop_hit"]
    assert terminated and not truncated
    assert info["exit_fill"] == pytest.approx(exit_fill, rel=1e-12)
    assert info["equity"] == pytest.approx(equity, rel=1e-12)
    equity_before = cash + units * 100  # marked at bar 2's close
    assert reward == pytest.approx(np.log(equity / equity_before), rel=1e-12)
    assert "episode_trading" in info and info["episode_trading"]["liquidations"] == 1


def test_gap_past_liquidation_is_bankruptcy():
    env = make_env(
        [
            (100, 101, 99, 100),
            (100, 101, 99, 100),
            (100, 101, 99.5, 100),
            (150, 151, 149, 150),
            (150, 151, 149, 150),
        ]
    )
    env.step(act(SHORT, 2, 1))  # 5x short; the price opens 50% higher
    _, reward, terminated, _, info = env.step(act(SHORT, 2, 1))
    assert info["liquidated"] and info["bankrupt"] and terminated
    assert np.isfinite(reward) and reward < -10
    assert info["exit_fill"] == pytest.approx(150 * (1 + SLIPPAGE), rel=1e-12)
    assert info["equity"] < 0
    assert np.isfinite(reward) and reward < -10


def test_going_flat_closes_exactly():
    env = make_env(
        [
            (100, 101, 99, 100),
            (100, 101, 99, 100),
            (101, 102, 100, 101),
            (102, 103, 101, 102),
            (102, 103, 101, 102),
        ]
    )
    env.step(act(LONG, 1, 0))
    _, _, _, _, info = env.step(act(FLAT, 0, 0))
    assert info["position"] == 0.0
    assert info["equity"] == info["cash"]
    assert info["action"]["direction"] == "flat"


def test_outcome_names_follow_the_column_constants():
    columns = {name: getattr(ex, name.upper()) for name in ex.OUTCOME_NAMES}
    assert len(ex.OUTCOME_NAMES) == ex.N_OUT
    assert list(columns.values()) == list(range(ex.N_OUT))


def test_the_costs_column_is_the_total_of_the_four_charges():
    env = make_env([(100, 101, 99, 100)] * 2 + [(100, 103, 95, 102), (101, 102, 100, 101)] * 3)
    env.reset()
    charges = ("commission", "slippage", "financing", "borrow")
    for action in (act(LONG, 1, 1), act(SHORT, 0, 1), act(SHORT, 0, 1), act(FLAT, 0, 1)):
        _, _, _, _, info = env.step(action)
        assert info["costs"] == sum(info[name] for name in charges)
    assert info["costs"] > 0


def test_the_turnover_penalty_shapes_the_reward_and_leaves_equity_alone():
    bars = [(100, 101, 99, 100), (100, 102, 99, 101), (102, 104, 101, 103), (103, 105, 102, 104)]
    plain, shaped = make_env(bars), make_env(bars, turnover_penalty=0.01)
    _, reward, _, _, info = plain.step(act(LONG, 1, 0))
    _, shaped_reward, _, _, shaped_info = shaped.step(act(LONG, 1, 0))
    assert shaped_info["equity"] == info["equity"]  # the real costs only
    churn = 2.0  # the order: 2x of the equity at the open (the fill's slippage aside)
    assert shaped_reward == pytest.approx(reward - 0.01 * churn, rel=1e-12)
    _, held, _, _, _ = plain.step(act(LONG, 1, 0))  # the same action trades nothing
    _, shaped_held, _, _, _ = shaped.step(act(LONG, 1, 0))
    assert shaped_held == held


def test_the_resize_penalty_shapes_only_a_resize_of_the_held_side():
    bars = [(100, 101, 99, 100)] * 2 + [(100, 102, 99, 101), (102, 104, 101, 103)] * 2
    plain = make_env(bars, turnover_penalty=0.01)
    shaped = make_env(bars, turnover_penalty=0.01, resize_penalty=0.05)
    rewards = {}
    for step, action in enumerate((act(LONG, 0, 0), act(LONG, 1, 0), act(FLAT, 1, 0))):
        _, rewards["plain", step], _, _, info = plain.step(action)
        _, rewards["shaped", step], _, _, shaped_info = shaped.step(action)
        assert shaped_info["equity"] == info["equity"]  # the real costs only
        if step == 0:
            entered = info  # long 1x at 100: 10 units
    # The resize at 102: from 10 units to 2x of the equity at that open, the close's equity
    # moved by the 10 units' gap (cash is unchanged overnight).
    equity_open = entered["equity"] + 10 * (102 - 101)
    churn = 2.0 - 10 * 102 / equity_open
    assert rewards["shaped", 0] == rewards["plain", 0]  # an entry is no resize
    assert rewards["shaped", 1] == pytest.approx(rewards["plain", 1] - 0.05 * churn, rel=1e-12)
    assert rewards["shaped", 2] == rewards["plain", 2]  # nor is an exit


def test_a_new_leverage_within_the_resize_band_trades_nothing():
    bars = [(100, 101, 99, 100)] * 2 + [(100, 200, 99, 200)] + [(200, 201, 199, 200)] * 3
    no_band = dict(risk_levels=(0.9,), financing_rate_annual=0.0)
    plain, banded = make_env(bars, **no_band), make_env(bars, resize_band=0.4, **no_band)
    for env in (plain, banded):
        env.step(act(LONG, 1, 0))  # 2x at 100; the price doubles
        _, _, _, _, info = env.step(act(LONG, 1, 0))  # unchanged: the exposure drifts to 4/3
        assert info["exposure"] == pytest.approx(4 / 3, rel=0.01)
    _, _, _, _, resized = plain.step(act(LONG, 0, 0))  # 1x: the plain env resizes
    _, _, _, _, kept = banded.step(act(LONG, 0, 0))  # |1 - 4/3| <= 0.4 x 1: within the band
    assert not np.isnan(resized["order_fill"]) and resized["exposure"] == pytest.approx(1, 0.02)
    assert np.isnan(kept["order_fill"]) and kept["traded_notional"] == 0.0
    _, _, _, _, jumped = banded.step(act(LONG, 2, 0))  # 5x: |5 - 4/3| > 0.4 x 5: it trades
    assert not np.isnan(jumped["order_fill"]) and jumped["exposure"] == pytest.approx(5, 0.02)


def test_no_stop_is_a_risk_level_the_policy_sees_as_finite():
    env = make_env(
        [(100, 101, 99, 100), (100, 101, 99, 100), (100, 101, 60, 70), (70, 71, 69, 70)],
        risk_levels=(0.05, math.inf),
    )
    for direction in (LONG, SHORT):
        env.reset(seed=0)
        observation, _, _, _, info = env.step(act(direction, 0, 1))
        account = dict(zip(ex.ACCOUNT_FEATURES, observation["account"].tolist(), strict=True))
        assert account["risk"] == 1.0 and account["stop_distance"] == 1.0
        assert np.isfinite(observation["account"]).all()
        _, _, _, _, info = env.step(act(direction, 0, 1))  # a 40% drop: no stop to hit
        assert not info["stop_hit"]


def test_a_decision_interval_steps_to_the_next_decision_and_holds_in_between():
    """With `decision_interval=3` one step runs three bars: the order at the first open, then
    the account holds. Its reward and costs are the bars' sums, the same as three one-bar steps
    that repeat the action (which, while nothing is stopped, trade nothing)."""
    bars = [(100, 101, 99, 100)] * 2 + [(100, 102, 99, 101), (101, 103, 100, 102)] * 2
    bars += [(100, 102, 99, 101)]  # 7 bars: decisions on bars 1 and 4
    per_bar, every_3 = make_env(bars), make_env(bars, decision_interval=3)
    rewards, costs = [], []
    for _ in range(3):
        _, reward, _, _, info = per_bar.step(act(LONG, 1, 1))
        rewards.append(reward)
        costs.append(info["costs"])
    _, reward, terminated, truncated, held = every_3.step(act(LONG, 1, 1))
    assert held["bar"] == info["bar"] == 4 and not (terminated or truncated)
    assert held["equity"] == info["equity"] and held["position"] == info["position"]
    assert reward == rewards[0] + rewards[1] + rewards[2]
    assert held["costs"] == costs[0] + costs[1] + costs[2] > costs[0]  # financing on each bar
    assert held["order_fill"] == 100 * (1 + SLIPPAGE)  # the decision's fill at bar 2's open
    # The second step runs out of data after two bars (5 and 6): truncated early.
    _, _, _, truncated, last = every_3.step(act(LONG, 1, 1))
    assert truncated and last["bar"] == 6 and np.isnan(last["order_fill"])


def test_between_decisions_a_stopped_position_stays_flat():
    """A stop on the second bar of an interval closes the position, and the account stays flat
    to the next decision, where a one-bar step repeating the action enters again."""
    bars = [(100, 101, 99, 100)] * 2 + [(100, 101, 99.5, 100), (99.9, 100, 94, 97)]
    bars += [(97, 98, 96, 97)] * 3
    per_bar, every_3 = make_env(bars), make_env(bars, decision_interval=3)
    for _ in range(3):
        _, _, _, _, info = per_bar.step(act(LONG, 0, 0))
    assert info["position"] > 0  # re-entered at bar 4's open after the stop on bar 3
    _, _, _, _, held = every_3.step(act(LONG, 0, 0))
    assert held["stop_hit"] and held["position"] == 0 and held["bar"] == 4
    assert held["exit_fill"] == pytest.approx(95 * (1 + SLIPPAGE) * (1 - SLIPPAGE), rel=1e-12)
    assert held["order_fill"] == 100 * (1 + SLIPPAGE)  # the entry, the interval's only order
    _, _, _, _, again = every_3.step(act(LONG, 0, 0))  # the next decision enters again
    assert again["order_fill"] == 97 * (1 + SLIPPAGE)


def test_a_volatility_target_sizes_the_level_and_its_stop_by_the_decision_bar():
    """Bar 1 jumps 10%: vol_1 = sqrt(log(1.1)^2 / 2) (bar 0 moves nothing), 10x that a year at
    100 bars a year. A 2x long decided there holds 2 x target / that of the equity, and its 5%
    risk stop sits 5% / (the sized leverage) below the fill. The action still names 2x."""
    bars = [(100, 101, 99, 100), (100, 111, 99, 110), (110, 111, 109, 110), (110, 111, 109, 110)]
    annual = np.sqrt(np.log(1.1) ** 2 / 2) * 10.0
    target = 0.25 * annual  # a quarter of bar 1's volatility: 2x is sized to 0.5x
    env = make_env(bars, volatility_target=target)
    assert env.core.scale[1] == pytest.approx(0.25, rel=1e-12)
    obs, _, _, _, info = env.step(act(LONG, 1, 0))
    fill = 110 * (1 + SLIPPAGE)
    units = 0.5 * 1000.0 / 110
    assert info["position"] == pytest.approx(units, rel=1e-12)
    assert info["order_fill"] == pytest.approx(fill, rel=1e-12)
    stop = 110 * (1 - obs["account"][5])  # the stop distance from the close, float32
    assert stop == pytest.approx(fill * (1 - 0.05 / 0.5), rel=1e-6)
    assert info["action"]["leverage"] == 2.0 and info["financing"] == 0.0  # 0.5x borrows nothing


def test_under_a_volatility_target_a_held_action_resizes_only_outside_the_band():
    """The same 1x long, decided again each bar: within `resize_band` of the drifted exposure
    it trades nothing; when a jump sizes it down past the band, it sells down to the new size."""
    bars = [(100, 101, 99, 100), (100, 102, 99, 101), (101, 102, 100, 101),
            (101, 131, 100, 130), (130, 131, 129, 130), (130, 131, 129, 130)]  # fmt: skip
    env = make_env(bars, volatility_target=0.05, resize_band=0.25, financing_rate_annual=0.0)
    scale = env.core.scale
    assert abs(scale[2] / scale[1] - 1) < 0.25 and scale[3] < 0.5 * scale[2]  # the premise
    _, _, _, _, first = env.step(act(LONG, 0, 1))  # decided on bar 1
    assert first["position"] * 101 / 1000.0 == pytest.approx(scale[1], rel=1e-2)
    _, _, _, _, kept = env.step(act(LONG, 0, 1))  # bar 2: the scale barely moved
    assert np.isnan(kept["order_fill"]) and kept["traded_notional"] == 0.0
    _, _, _, _, resized = env.step(act(LONG, 0, 1))  # bar 3: the jump sizes it down
    assert resized["order_fill"] < 130 and resized["position"] < kept["position"]
    assert resized["exposure"] == pytest.approx(scale[3], rel=1e-2)  # bar 4 closes at its open


def test_without_a_volatility_target_the_scale_is_one_everywhere():
    env = make_env([(100, 101, 99, 100), (100, 111, 99, 110), (110, 111, 109, 110)])
    np.testing.assert_array_equal(env.core.scale, np.ones(3))
