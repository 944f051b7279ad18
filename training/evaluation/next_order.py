"""The agent's order for the bar after the data: what it decides on the backtest's last close.

A backtest's decisions stop one bar before its data does: the decision on bar t fills at bar
t+1's open, so the last bar is only marked. Its close is known, though, and the agent can decide
on it: that decision is the order for the next open, the one a user acting on the agent places.

`decide_next_order` takes the account where the backtest left it (`FastPolicy.final_accounts`),
builds the observation the env would return at that bar (`TradingCore.observation`) and takes
the policy's deterministic action, the most likely level of each head, as the backtest does. A
vote (`training.evaluation.vote`) decides as it trades: each member's deterministic action on
that observation, combined by `vote_action`.
`describe_order` says in one line what the execution rules (`envs.execution`, step 1) do with
that action at the next open; a test holds it to the kernel itself.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from envs import execution as ex
from envs.core import Accounts, TradingCore
from envs.market_data import time_labels
from training.evaluation.vote import Trained, Vote, members_of, vote_action


@dataclass(frozen=True)
class HeldPosition:
    """The account at the last close, as the backtest left it."""

    direction: str  # "short", "flat" or "long"
    units: float  # signed position in units of the asset
    leverage: float  # held leverage level (0 when flat)
    sized: float  # the leverage it was sized to: the level x the volatility scale (0 when flat)
    risk: float  # held risk level (0 when flat)
    entry: float  # fill price of the last (re)sizing (0 when flat)
    stop: float  # protective stop price (0 when flat)
    equity: float  # cash + units * close

    def brief(self) -> str:
        """The position in a few words: "flat", or its side and sized leverage, "long 0.91x"."""
        return "flat" if self.direction == "flat" else f"{self.direction} {self.sized:.3g}x"


@dataclass(frozen=True)
class NextOrder:
    """The agent's decision on the last bar and the order it makes at the next open."""

    decided_at: str  # the last bar's time, labelled as its data labels bars
    close: float  # the last bar's close
    held: HeldPosition
    action: dict[str, Any]  # each head's chosen level, as `info["action"]` names it
    # head -> probability of its chosen level (of a vote: the mean of its members')
    probability: dict[str, float]
    order: str  # what the action does at the next open, one line (`describe_order`)
    members: int = 1  # the policies that decided: a vote's members, or 1
    agreement: dict[str, int] | None = None  # of a vote: head -> members that chose its level

    def to_dict(self) -> dict[str, Any]:
        """Plain data for `next_order.json`."""
        return asdict(self)

    def format(self) -> str:
        """A few lines for the terminal: the held position, each head's choice, the order."""
        held, action = self.held, self.action
        holding = "flat"
        if held.direction != "flat":
            holding = (
                f"{held.direction} {abs(held.units):,.6g} units at {held.leverage:g}x"
                + ("" if held.sized == held.leverage else f" (sized to {held.sized:.3g}x)")
                + ", "
                f"{_risk_text(held.risk)}, entry {held.entry:,.6g}"
                + ("" if math.isinf(held.risk) else f", stop {held.stop:,.6g}")
            )
        shown = {
            "direction": action["direction"],
            "leverage": f"{action['leverage']:g}x",
            "risk": _risk_level(action["risk"]),
        }
        width = max(len(text) for text in shown.values())
        idle = " (no effect while flat)" if action["direction"] == "flat" else ""
        heads = [
            f"  {name:<9}  {text:<{width}}  p={self.probability[name]:.2f}"
            + (f", {self.agreement[name]}/{self.members} members" if self.agreement else "")
            + (idle if name != "direction" else "")
            for name, text in shown.items()
        ]
        by = f" by a vote of {self.members} policies" if self.members > 1 else ""
        return "\n".join(
            [
                f"next order, decided{by} on the close of {self.decided_at} ({self.close:,.6g}) "
                "for the next bar's open:",
                f"  holding    {holding}; equity {held.equity:,.2f}",
                *heads,
                f"  order      {self.order}",
            ]
        )


def decide_next_order(trained: Trained, core: TradingCore, accounts: Accounts) -> NextOrder:
    """The deterministic decision of `trained` (a policy, or a `Vote`) for account 0 of
    `accounts` at its current bar.

    `accounts` must not be terminated (`FastPolicy.final_accounts` is None then). With
    `env.decision_interval` k > 1, a close that is not a decision bar (the episode's bars so far
    are not a multiple of k) places no order: the action shown is what the heads would choose.
    """
    bar = int(accounts.bars[0])
    observation = core.observation(accounts, 0)
    members = members_of(trained)
    chosen, probabilities = [], []
    for policy in members:
        policy.set_training_mode(False)
        with torch.no_grad():
            distribution = policy.head_distributions(observation)
            chosen.append(distribution.mode()[0].numpy())  # [3]: the level index of each head
            probabilities.append({n: h.probs[0] for n, h in distribution.heads().items()})
    actions = np.stack(chosen)  # [M, 3]
    names = list(probabilities[0])
    levels, agreement = actions[0].tolist(), None
    if isinstance(trained, Vote):
        tables = (core.sides.tolist(), core.leverages.tolist(), core.risks.tolist())
        levels = vote_action(actions, *tables).tolist()
        agreement = {name: int(np.sum(actions[:, i] == levels[i])) for i, name in enumerate(names)}
    probability = {
        name: float(np.mean([p[name][level].item() for p in probabilities]))
        for name, level in zip(names, levels, strict=True)
    }
    action = core.action_names(np.array(levels))
    held = held_position(core, accounts)
    close = float(core.ohlc[bar, 3])
    interval = core.config.decision_interval
    waiting = int(ex.bars_to_decision(accounts.state[0, ex.EP_STEPS], interval))
    if waiting:
        order = (
            f"none: the agent decides every {interval} bars and this close is not a decision "
            f"bar; the account holds for {waiting} more bar(s), then decides again"
        )
    else:
        order = describe_order(core, held, action, close, float(core.scale[bar]))
    return NextOrder(
        decided_at=time_labels(core.timestamps[bar : bar + 1], daily=core.market.daily)[0],
        close=close,
        held=held,
        action=action,
        probability=probability,
        order=order,
        members=len(members),
        agreement=agreement,
    )


def held_position(core: TradingCore, accounts: Accounts) -> HeldPosition:
    """Account 0's position by name (`envs.execution` state columns)."""
    state = accounts.state[0]
    sides = core.config.direction_sides
    direction = core.config.direction_names[sides.index(int(state[ex.SIDE]))]
    return HeldPosition(
        direction=direction,
        units=float(state[ex.QTY]),
        leverage=float(state[ex.LEVERAGE]),
        sized=float(state[ex.SIZED]),
        risk=float(state[ex.RISK]),
        entry=float(state[ex.ENTRY]),
        stop=float(state[ex.STOP]),
        equity=float(state[ex.EQUITY]),
    )


def describe_order(
    core: TradingCore, held: HeldPosition, action: dict[str, Any], close: float, scale: float
) -> str:
    """What `action` does at the next open from `held`, by the rules of `envs.execution`, when
    decided on a bar whose volatility scale is `scale` (`TradingCore.scale`; 1 without
    `env.volatility_target`).

    A new direction, or a new sized leverage (``leverage * scale``) while in a position, trades
    to ``side * leverage * scale * equity`` at the open (estimated here at the last close),
    unless the new sized leverage is within `env.resize_band` of the exposure the position has
    drifted to; a new risk alone moves the stop from the same entry; anything else places no
    order.
    """
    names, sides = core.config.direction_names, core.config.direction_sides
    side = sides[names.index(action["direction"])]
    held_side = sides[names.index(held.direction)]
    leverage, risk = action["leverage"], action["risk"]
    sized = leverage * scale
    resize = side != 0 and side == held_side and sized != held.sized
    if resize:  # the kernel's own rule, with the exposure estimated at the last close
        resize = ex.resizes(sized, held.units * close, held.equity, core.config.resize_band)
    if side != held_side or resize:
        if side == 0:
            return f"close the {held.direction} position ({abs(held.units):,.6g} units) at the open"
        verb = "open" if held_side == 0 else "resize to" if side == held_side else "reverse to"
        units = sized * max(held.equity, 0.0) / close
        below = "below" if side > 0 else "above"
        stop = "no stop" if math.isinf(risk) else f"stop {risk / sized:.2%} {below} the fill"
        target = "" if scale == 1.0 else f" sized to {sized:.3g}x by the volatility target"
        return (
            f"{verb} {action['direction']} {leverage:g}x{target} at the open: about "
            f"{units:,.6g} units at the last close's price, {stop}"
        )
    if side != 0 and risk != held.risk:
        if math.isinf(risk):
            return f"remove the stop at {held.stop:,.6g}; no trade"
        stop = held.entry * (1.0 - side * risk / held.sized)
        verb = (
            "place a stop at"
            if math.isinf(held.risk)
            else f"move the stop from {held.stop:,.6g} to"
        )
        return f"{verb} {stop:,.6g} ({_risk_text(risk)}); no trade"
    return "none: keep the position" if side != 0 else "none: stay flat"


def _risk_level(risk: float) -> str:
    """A risk level as a head's choice reads: "5%", or "no stop" for `inf`."""
    return "no stop" if math.isinf(risk) else f"{risk:.0%}"


def _risk_text(risk: float) -> str:
    """A risk level in a sentence: "risk 5%", or "no stop" for `inf`."""
    return "no stop" if math.isinf(risk) else f"risk {_risk_level(risk)}"
