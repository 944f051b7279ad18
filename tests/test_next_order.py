"""`training.evaluation.next_order.describe_order`: what the kernel does with an action."""

import itertools
import math

import numpy as np
import pytest
from test_execution import make_env  # an env over hand-written bars

from envs import execution as ex
from envs.core import Accounts
from training.evaluation.next_order import describe_order, held_position

PRICE = 100.0
LEVERAGES = (1.0, 2.0, 5.0)
RISKS = (0.02, 0.1)


def core_ending_flat(
    resize_band: float = 0.0,
    risks: tuple[float, ...] = RISKS,
    volatility_target: float | None = None,
):
    """Six moving bars, then three bars that open, trade and close at PRICE: a held position's
    stop is never reached there, and an order at the next open fills at the last close."""
    moving = [
        (95.0, 97.0, 94.0, 96.0),
        (96.0, 99.0, 95.0, 98.0),
        (98.0, 99.0, 96.0, 97.0),
        (97.0, 101.0, 96.0, 100.0),
        (100.0, 102.0, 99.0, 101.0),
        (101.0, 101.0, 99.0, 99.0),
    ]
    env = make_env(moving + [(PRICE,) * 4] * 3, slippage_bps=0.0, financing_rate_annual=0.0,
                   borrow_fee_annual=0.0, leverage_levels=LEVERAGES, risk_levels=risks,
                   resize_band=resize_band, volatility_target=volatility_target)  # fmt: skip
    return env.core


def account_holding(core, action) -> Accounts:
    """An account that took `action` on the third-last bar, now at the second-last bar."""
    accounts = Accounts.zeros(1)
    last = len(core.timestamps) - 1
    core.reset(accounts, np.zeros(1, dtype=np.int64), np.array([last - 2]))
    accounts.actions[0] = action
    core.step(accounts)
    return accounts


@pytest.mark.parametrize(
    ("resize_band", "risks", "volatility_target"),
    [(0.0, RISKS, None), (0.4, RISKS, None), (0.0, (0.02, math.inf), None), (0.4, RISKS, 0.05)],
)
def test_each_described_order_is_what_the_kernel_does_at_the_next_open(
    resize_band, risks, volatility_target
):
    """A risk level of inf is no stop: orders say so, and changing to or from it only moves the
    stop. A band narrower than the ladder's steps (`EnvConfig.max_resize_band`) lets every step
    trade from an undrifted position; the drifted case is the test below. With a volatility
    target every level is sized down, by a scale that differs between the two decisions."""
    core = core_ending_flat(resize_band, risks, volatility_target)
    if volatility_target is not None:
        last = len(core.timestamps) - 1
        assert core.scale[last - 2] < core.scale[last - 1] < 1.0  # the flat bars calm it
    sizes = core.config.action_sizes  # (short, flat, long), 3 leverages, 2 risks
    every_action = list(itertools.product(*(range(n) for n in sizes)))
    flat = (core.config.flat_direction_index, 0, 0)
    held_actions = [flat] + [a for a in every_action if a[0] != flat[0]]
    seen = set()
    for held_action, action in itertools.product(held_actions, every_action):
        accounts = account_holding(core, held_action)
        held = held_position(core, accounts)
        names = core.action_names(np.array(action))
        order = describe_order(core, held, names, PRICE, float(core.scale[accounts.bars[0]]))

        accounts.actions[0] = action
        core.step(accounts)
        fill = accounts.out[0, ex.ORDER_FILL]
        state = accounts.state[0]
        after = held_position(core, accounts)
        case = f"held {held_action}, action {action}: {order!r}"
        kind = order.split()[0]
        seen.add(kind)
        if kind == "none:":
            assert np.isnan(fill) and (after.units, after.stop) == (held.units, held.stop), case
        elif kind == "move":
            assert np.isnan(fill) and after.units == held.units and after.stop != held.stop, case
            assert f"to {after.stop:,.6g} (risk {names['risk']:.0%})" in order, case
        elif kind == "place":  # a stop on a position that had none
            assert np.isnan(fill) and after.units == held.units and math.isinf(held.risk), case
            assert f"a stop at {after.stop:,.6g} (risk {names['risk']:.0%})" in order, case
        elif kind == "remove":
            assert np.isnan(fill) and after.units == held.units and math.isinf(after.risk), case
        elif kind == "close":
            assert not np.isnan(fill) and after.units == 0.0 and held.units != 0.0, case
            assert f"close the {held.direction} position ({abs(held.units):,.6g} units)" in order
        else:
            assert not np.isnan(fill) and after.direction == names["direction"], case
            verb = {"flat": "open", after.direction: "resize to"}.get(held.direction, "reverse to")
            assert order.startswith(f"{verb} {after.direction} {names['leverage']:g}x"), case
            assert f"about {abs(after.units):,.6g} units" in order, case
            if math.isinf(names["risk"]):
                assert order.endswith("no stop"), case
            else:
                distance = abs(1.0 - state[ex.STOP] / state[ex.ENTRY])
                assert f"stop {distance:.2%}" in order, case
    changes = {"place", "remove"} if math.inf in risks else {"move"}
    assert seen == {"none:", "close", "open", "resize", "reverse"} | changes


def test_a_drifted_position_within_the_resize_band_stays_as_described():
    """2x long from 100, the price doubles: the exposure drifts to 4/3, within 0.4 x 1 of 1x, so
    asking for 1x keeps the position; 5x is outside 0.4 x 5 of 4/3 and resizes."""
    bars = [(100.0,) * 4] * 3 + [(100.0, 200.0, 100.0, 200.0)] + [(200.0,) * 4] * 3
    core = make_env(bars, leverage_levels=LEVERAGES, risk_levels=(0.9,), resize_band=0.4,
                    financing_rate_annual=0.0).core  # fmt: skip
    long = core.config.direction_names.index("long")
    for level, kind in [(0, "none:"), (2, "resize")]:  # 1x and 5x
        accounts = Accounts.zeros(1)
        core.reset(accounts, np.zeros(1, dtype=np.int64), np.array([2]))
        accounts.actions[0] = (long, 1, 0)  # 2x at the open of bar 3, marked at its close of 200
        core.step(accounts)
        held = held_position(core, accounts)
        assert held.units * 200.0 / held.equity == pytest.approx(4 / 3, rel=1e-2)
        action = (long, level, 0)
        names = core.action_names(np.array(action))
        order = describe_order(core, held, names, 200.0, float(core.scale[accounts.bars[0]]))
        accounts.actions[0] = action
        core.step(accounts)
        assert order.split()[0] == kind, order
        assert np.isnan(accounts.out[0, ex.ORDER_FILL]) == (kind == "none:"), order


def test_the_held_position_in_brief_is_its_side_and_sized_leverage():
    core = core_ending_flat(volatility_target=0.05)
    assert held_position(core, Accounts.zeros(1)).brief() == "flat"
    held = held_position(core, account_holding(core, np.array([2, 1, 0])))  # long at 2x
    assert held.direction == "long" and held.sized < held.leverage == 2.0
    assert held.brief() == f"long {held.sized:.3g}x"
