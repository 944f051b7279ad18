"""Reference rules on synthetic series: the oracle and the fair ceiling, as action arrays.

Both trade like a growth-optimal trader deciding at each bar t's close for the next open:

1. A forecast of the next bar (`envs.synthetic.forecasts`): the **oracle** knows the hidden
   state at t (not the next bar's state, not future noise); the **fair ceiling** knows only the
   generator's parameters and uses the causal filter's belief at t.
2. The expected log growth of every option (side, leverage level, risk level) under it: Kelly's
   growth after financing and borrow, the cost of noise touching the stop, and a crash's loss
   (capped by a stop for an intraday slide, not for an overnight gap).
3. The position (side, leverage) of highest expected growth, with a no-trade band: the held
   position changes only when the growth gained over `Knobs.horizon` bars exceeds the cost of
   the trade. The risk level is the best one for the chosen position (moving a stop is free).

A rule follows its own account as the engine would (fills at the next open with slippage, the
stop anchored at the entry, stop-outs), so it values a held position with the stop where it
really is: a stop anchored far below a risen price no longer protects, and only a trade
(a new side or leverage) re-anchors it. Actions from bar `start` on assume the account is flat
at `start`, as `run_actions` starts it.

Each rule tunes its two `Knobs` (a Kelly fraction and the band's horizon) by grid search on a
training range through the engine, never on the held-out tail (`tune_knobs`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from envs.config import EnvConfig
from envs.synthetic.forecasts import Rule, crash_log_change, forecast, kelly_growth, stop_growth
from envs.synthetic.generators import SyntheticSeries
from envs.synthetic.runs import run_actions

_DISTANCE_STEP = 0.0025  # grid of stop distances on which a held stop's crash value is looked up
_DISTANCE_MAX = 0.5
_TIE_BREAK = 1e-12  # growth per bar: among equal options, the widest stop


@dataclass(frozen=True)
class Knobs:
    """A reference rule's tuning knobs."""

    kelly_scale: float = 1.0  # fraction of Kelly: the variance penalty is divided by it
    horizon: float = 20.0  # bars a position change must repay its cost in (inf: no band)


KNOB_GRID: tuple[Knobs, ...] = tuple(
    Knobs(scale, horizon) for scale in (0.5, 1.0) for horizon in (math.inf, 50.0, 20.0, 5.0)
)


def oracle_actions(
    series: SyntheticSeries,
    config: EnvConfig,
    *,
    knobs: Knobs | None = None,
    train: range | None = None,
    start: int = 0,
) -> np.ndarray:
    """[T, 3] actions of the oracle, who knows ``series.state[t]`` when deciding on bar t.

    `knobs` fixes the tuning; else they are tuned on the `train` bars (`tune_knobs`); else the
    defaults of `Knobs`. `start`: the first decision bar of the run the actions are for (the
    account is flat there).
    """
    return _reference_actions(series, config, "oracle", knobs, train, start)


def ceiling_actions(
    series: SyntheticSeries,
    config: EnvConfig,
    *,
    knobs: Knobs | None = None,
    train: range | None = None,
    start: int = 0,
) -> np.ndarray:
    """[T, 3] actions of the fair ceiling: the parameters are known, the state is inferred from
    bars 0..t by the causal filter. Arguments as in `oracle_actions`."""
    return _reference_actions(series, config, "ceiling", knobs, train, start)


def rule_actions(
    series: SyntheticSeries, config: EnvConfig, rule: Rule, knobs: Knobs, start: int = 0
) -> np.ndarray:
    """[T, 3] actions of `rule` ("oracle" or "ceiling") with the given knobs, no tuning."""
    return _Plan(series, config, rule).actions(knobs, start)


def tune_knobs(
    series: SyntheticSeries,
    config: EnvConfig,
    rule: Rule,
    train: range,
    grid: Sequence[Knobs] = KNOB_GRID,
) -> Knobs:
    """The knobs of `grid` under which `rule` grows most over the `train` bars (engine run).

    Knobs that give the same actions on `train` are run once; ties go to the earlier knobs.
    """
    return _tune(_Plan(series, config, rule), train, grid)


@dataclass(frozen=True)
class _Options:
    """The positions a rule can hold (flat first, then each side x leverage level)."""

    side: np.ndarray  # [P] -1, 0, +1
    leverage: np.ndarray  # [P] leverage level (0 for flat)
    direction_index: np.ndarray  # [P] action index of the side
    leverage_index: np.ndarray  # [P] action index of the leverage (0 for flat)
    risk: np.ndarray  # [R] risk levels

    @classmethod
    def of(cls, config: EnvConfig) -> _Options:
        """The options `config`'s action space offers."""
        rows = [(0.0, 0.0, config.flat_direction_index, 0)]
        for d, sign in enumerate(config.direction_sides):
            if sign != 0:
                rows += [(float(sign), lev, d, j) for j, lev in enumerate(config.leverage_levels)]
        side, leverage, direction, lev_index = (np.asarray(col) for col in zip(*rows, strict=True))
        return cls(side, leverage, direction, lev_index, np.asarray(config.risk_levels))


class _Plan:
    """What a rule's decisions on one series need, computed once for any knobs."""

    def __init__(self, series: SyntheticSeries, config: EnvConfig, rule: Rule) -> None:
        self.series, self.config, self.rule = series, config, rule
        self.options = opt = _Options.of(config)
        self.fc = forecast(series, rule)
        bars_per_year = config.bars_per_year or series.market.bars_per_year()
        self.rates = (
            config.financing_rate_annual / bars_per_year,
            config.borrow_fee_annual / bars_per_year,
        )
        self.cost = (config.commission_bps + config.slippage_bps) * 1e-4
        lev = np.maximum(opt.leverage, 1e-12)  # [P], no 0 for flat
        fresh_distance = opt.risk[None, :] / lev[:, None]  # [P, R] a new stop: risk / leverage
        self.fresh_stop = stop_growth(
            self.fc, slice(None), opt.side, lev, fresh_distance, self.cost
        )
        # Ties (stops too far for noise or crashes to matter) go to the wider stop.
        # By rank, not size: `inf` (no stop) is a risk level.
        rank = np.argsort(np.argsort(opt.risk))  # [R] 0 for the tightest stop
        self.prefer_wide = (_TIE_BREAK * rank / max(len(rank) - 1, 1)).tolist()  # [R]
        # A held stop sits at any distance: tabulate a crash's value over distances [P, D].
        grid = np.arange(0.0, _DISTANCE_MAX + _DISTANCE_STEP / 2, _DISTANCE_STEP)  # [D]
        distances = np.broadcast_to(grid, (len(lev), len(grid)))  # [P, D]
        self.crash_table = crash_log_change(self.fc, opt.side, lev, distances).tolist()  # [P][D]
        self.vols = np.sqrt(self.fc.var).tolist()  # [T|1][K]
        self.weights = self.fc.weights.tolist()  # [T][K]
        self.crash_prob = self.fc.crash_prob.tolist()  # [T]
        market = series.market
        self.bars = (market.open.tolist(), market.high.tolist(), market.low.tolist())
        self.close = market.close.tolist()

    def actions(self, knobs: Knobs, start: int = 0) -> np.ndarray:
        """[T, 3] the rule's actions under `knobs`, its account flat at bar `start`."""
        opt = self.options
        base = kelly_growth(self.fc, opt.side, opt.leverage, self.rates, knobs.kelly_scale)
        fresh = base[:, :, None] + self.fresh_stop + np.asarray(self.prefer_wide)  # [T, P, R]
        fresh[:, opt.side == 0, :] = 0.0
        positions = self._decide(
            base.tolist(), fresh.max(axis=2).tolist(), fresh.argmax(axis=2).tolist(), knobs, start
        )  # [T, 2] position and risk index
        actions = np.empty((len(positions), 3), dtype=np.int64)  # [T, 3]
        actions[:, 0] = opt.direction_index[positions[:, 0]]
        actions[:, 1] = opt.leverage_index[positions[:, 0]]
        actions[:, 2] = np.where(positions[:, 0] == 0, np.argmax(opt.risk), positions[:, 1])
        return actions

    def _decide(
        self,
        base: list[list[float]],
        fresh_best: list[list[float]],
        fresh_risk: list[list[int]],
        knobs: Knobs,
        start: int,
    ) -> np.ndarray:
        """[T, 2] (position, risk index) per bar: the no-trade band over the rule's own account."""
        opt = self.options
        side, leverage, risk = opt.side.tolist(), opt.leverage.tolist(), opt.risk.tolist()
        exposure = [s * lev for s, lev in zip(side, leverage, strict=True)]
        slippage = self.config.slippage_bps * 1e-4
        open_, high, low = self.bars
        widest = int(np.argmax(opt.risk))
        n_bars = len(base)
        chosen = np.zeros((n_bars, 2), dtype=np.int64)
        current, entry = 0, 0.0  # the account: position held (0 flat) and its entry price
        for t in range(n_bars):
            if t == start:
                current = 0
            values = list(fresh_best[t])
            keep_risk = widest
            if current:
                keep = self._held_growth(t, current, entry, base[t][current])  # [R]
                keep_risk = max(range(len(keep)), key=keep.__getitem__)
                values[current] = keep[keep_risk]
            best = max(range(len(values)), key=values.__getitem__)
            gain = values[best] - values[current]
            switch_cost = self.cost * abs(exposure[best] - exposure[current])
            if best != current and (
                gain > 0 if knobs.horizon == math.inf else gain * knobs.horizon > switch_cost
            ):
                new, new_risk = best, fresh_risk[t][best]
            else:
                new, new_risk = current, keep_risk
            chosen[t] = new, new_risk
            if t + 1 == n_bars or new == 0:
                current = 0
                continue
            # The next bar as the engine runs it: a fill at the open, then the stop.
            s, lev = side[new], leverage[new]
            if new != current:
                entry = open_[t + 1] * (1.0 + s * slippage)
            stop = entry * (1.0 - s * risk[new_risk] / lev)
            stopped = low[t + 1] <= stop if s > 0 else high[t + 1] >= stop
            current = 0 if stopped else new
        return chosen

    def _held_growth(self, t: int, position: int, entry: float, base: float) -> list[float]:
        """[R] growth of keeping `position` entered at `entry`, with each risk level's stop."""
        opt = self.options
        s, lev = float(opt.side[position]), float(opt.leverage[position])
        close = self.close[t]
        weights, vols = self.weights[t], self.vols[t if len(self.vols) > 1 else 0]
        crash_prob, table = self.crash_prob[t], self.crash_table[position]
        out = []
        for r, prefer_wide in zip(opt.risk.tolist(), self.prefer_wide, strict=True):
            stop = entry * (1.0 - s * r / lev)
            distance = max(s * (close - stop) / close, 0.0)
            touch = sum(
                w * min(math.erfc(distance / (v * math.sqrt(2.0))), 1.0)
                for w, v in zip(weights, vols, strict=True)
            )
            value = base - touch * 2.0 * self.cost * lev + prefer_wide
            if crash_prob > 0:
                value += crash_prob * _lookup(table, distance)
            out.append(value)
        return out


def _lookup(table: list[float], distance: float) -> float:
    """Linear interpolation of `table` (on the distance grid) at `distance`, clamped."""
    x = min(distance, _DISTANCE_MAX) / _DISTANCE_STEP
    i = min(int(x), len(table) - 2)
    return table[i] + (x - i) * (table[i + 1] - table[i])


def _tune(plan: _Plan, train: range, grid: Sequence[Knobs]) -> Knobs:
    first = max(train.start, plan.config.window - 1)
    best, best_growth, seen = grid[0], -math.inf, set()
    for knobs in grid:
        actions = plan.actions(knobs, start=first)
        key = actions[train.start : train.stop].tobytes()
        if key in seen:
            continue
        seen.add(key)
        growth = run_actions(plan.series, plan.config, actions, train).log_growth
        if growth > best_growth:
            best, best_growth = knobs, growth
    return best


def _reference_actions(
    series: SyntheticSeries,
    config: EnvConfig,
    rule: Rule,
    knobs: Knobs | None,
    train: range | None,
    start: int,
) -> np.ndarray:
    plan = _Plan(series, config, rule)
    if knobs is None:
        knobs = _tune(plan, train, KNOB_GRID) if train is not None else Knobs()
    return plan.actions(knobs, start)
