"""Order execution and accounting for N accounts at once: the one implementation of the rules.

Both `TradingEnv` (N = 1) and `BatchedTradingEnv` (N accounts) call `step_accounts`, so the
single and the batched environment cannot disagree. The kernel is compiled with numba: a plain
loop over accounts in machine code, no Python per account and no pandas.

Timeline of one step, for an order decided on bar t (the agent has seen bar t's close):

1. Open of bar t+1. The action's leverage level is sized by bar t's volatility scale s_t (1
   without `EnvConfig.volatility_target`; `envs.features.volatility_scale`): the position is
   sized to ``sized = leverage * s_t``. If the action differs from the held position in
   `direction`, or in its sized leverage while not flat, the position is traded to the target
   ``side * sized * equity_at_open / open`` units at the open, moved by slippage against the
   trader, plus commission on the traded notional. The entry price becomes that fill and the stop
   is placed at ``entry * (1 - side * risk / sized)``. A new sized leverage on the held side does
   not trade when the exposure the position has drifted to at the open is within
   ``resize_band * sized`` of it (a no-trade region against churn; 0, the default, always
   resizes). A change of `risk` alone (or with a leverage inside the band) moves the stop from the
   same entry without trading. An unchanged action (and, with a volatility target, an unchanged
   scale) trades nothing and pays nothing.
2. Inside bar t+1. A held position is closed at its stop, or liquidated when equity would fall below
   ``maintenance_margin * notional``: whichever level the price reaches first moving against the
   position from the open. If the open already gapped through it, the fill is the open.
   Exits pay slippage and commission like any trade.
3. Close of bar t+1. Financing is charged on borrowed cash (leveraged long) and a borrow fee on
   the notional of a short, per bar. Equity is marked at the close: ``equity = cash + qty * close``.

An episode terminates when the account is liquidated or bankrupt (equity <= 0).

With a decision interval k > 1 (`EnvConfig.decision_interval`) only every k-th bar of an episode
is a decision bar, its first included: step 1 runs there alone, and on the bars between the account
holds what the last decision left it (a stopped position stays flat until the next decision).
"""

from __future__ import annotations

import math

import numba
import numpy as np

# Account state columns (float64 [N, N_STATE]).
CASH = 0  # cash balance; negative when a long is financed by borrowing
QTY = 1  # signed position in units of the asset
ENTRY = 2  # fill price at which the current position was (re)sized; 0 when flat
STOP = 3  # protective stop price; 0 when flat
EQUITY = 4  # cash + qty * close, marked at the last close
PEAK = 5  # highest equity of the episode (for the drawdown)
START_EQUITY = 6  # equity at the start of the episode
SIDE = 7  # held side: -1 short, 0 flat, +1 long
LEVERAGE = 8  # held leverage level (0 when flat)
RISK = 9  # held risk level (0 when flat)
SHARPE_A = 10  # differential Sharpe: moving first moment of returns
SHARPE_B = 11  # differential Sharpe: moving second moment of returns
EP_STEPS = 12  # episode accumulators, from here on
EP_COSTS = 13  # commission + slippage + financing + borrow paid
EP_TURNOVER = 14  # sum of traded notional / equity before the trade
EP_STOPS = 15  # stops hit
EP_LIQUIDATIONS = 16  # liquidations
EP_RETURN_SUM = 17  # sum of simple per-bar returns
EP_RETURN_SQ = 18  # sum of squared simple per-bar returns
EP_MAX_DRAWDOWN = 19  # largest drawdown seen, as a fraction of the peak
EP_EXPOSURE = 20  # sum of |exposure| at each close
END_BAR = 21  # the last bar an order can fill on in this account's range: episodes end there
SIZED = 22  # the leverage the position was sized to: its level x the volatility scale (0 flat)
N_STATE = 23

# Per-step outcome columns (float64 [N, N_OUT]).
REWARD = 0
ORDER_FILL = 1  # fill price of the agent's order at the open; NaN when no order
EXIT_FILL = 2  # fill price of a stop or liquidation exit; NaN when none
TRADED_NOTIONAL = 3  # |units| * fill price, summed over the step's fills
COMMISSION = 4
SLIPPAGE = 5  # cost of slippage: |units| * reference price * slippage rate
FINANCING = 6  # interest on borrowed cash of a leveraged long
BORROW = 7  # fee on the notional of a short
COSTS = 8  # the step's charges in total: commission + slippage + financing + borrow
STOP_HIT = 9  # 1.0 when the stop closed the position in this bar
LIQUIDATED = 10  # 1.0 when the position was liquidated in this bar
BANKRUPT = 11  # 1.0 when equity is <= 0 at the close
TERMINATED = 12  # liquidated or bankrupt
TRUNCATED = 13  # not terminated, and the range ended or the episode reached its length
N_OUT = 14
OUTCOME_NAMES = (  # the outcome columns by name, in column order
    "reward",
    "order_fill",
    "exit_fill",
    "traded_notional",
    "commission",
    "slippage",
    "financing",
    "borrow",
    "costs",
    "stop_hit",
    "liquidated",
    "bankrupt",
    "terminated",
    "truncated",
)

# Parameter vector (float64 [N_PARAMS]).
P_COMMISSION = 0  # rate on traded notional
P_SLIPPAGE = 1  # rate by which fills move against the trader
P_FINANCING = 2  # per bar, on borrowed cash
P_BORROW = 3  # per bar, on short notional
P_MAINTENANCE = 4  # maintenance margin as a share of notional
P_REWARD = 5  # 0 log return, 1 differential Sharpe, 2 drawdown-penalised log return
P_SHARPE_ETA = 6
P_DRAWDOWN_PENALTY = 7
P_EPISODE_LENGTH = 8  # steps after which an episode is truncated
P_TURNOVER_PENALTY = 9  # reward only: subtracted per unit of the order's notional / equity
P_RESIZE_BAND = 10  # a new leverage on the held side trades only outside this relative band
P_RESIZE_PENALTY = 11  # reward only: more per unit of a resize's notional / equity (held side)
P_DECISION_INTERVAL = 12  # bars per decision: orders only on every k-th bar of an episode
N_PARAMS = 13

REWARD_CODES = {"log_return": 0.0, "differential_sharpe": 1.0, "drawdown_penalty": 2.0}

# Account observation columns (float32 [N, N_ACCOUNT]).
ACCOUNT_FEATURES = (
    "side",  # -1 short, 0 flat, +1 long
    "exposure",  # signed notional / equity at the close
    "unrealised_pnl",  # open profit since the position was (re)sized, / equity
    "equity_change",  # log(equity / episode start equity)
    "drawdown",  # 1 - equity / episode peak
    "stop_distance",  # distance from the close to the stop, / close (0 when flat), at most 1
    "leverage",  # held leverage level (0 when flat)
    "risk",  # held risk level (0 when flat), at most 1
)
# A risk level >= 1 (`inf` for none) lets the position lose all its equity: liquidation comes
# first, so it is no stop. The observation caps it and its stop distance at 1, which keeps the
# policy's input finite and loses nothing the account can act on.
_OBS_CAP = 1.0
N_ACCOUNT = len(ACCOUNT_FEATURES)

_EQUITY_FLOOR = 1e-12  # relative floor so a wiped-out account still has a finite log reward
_DSR_CLIP = 10.0  # differential Sharpe is clipped: it explodes when the moving variance is ~0
# The turnover penalty's churn is capped: closing a position of an account whose equity is nearly
# gone divides by ~0. No order of a solvent account comes near it (a reversal trades 2x its
# leverage); the cap keeps the reward finite, as the equity floor does the log return.
_CHURN_CAP = 100.0


@numba.njit(cache=True, inline="always")
def _trade(state, row, i, units, ref_price, params):
    """Trade `units` at `ref_price` moved by slippage; pay commission; return the fill price.

    Account i's fills and costs are added to its outcome row `row` [N_OUT]."""
    direction = 1.0 if units > 0.0 else -1.0
    fill = ref_price * (1.0 + direction * params[P_SLIPPAGE])
    notional = abs(units) * fill
    fee = notional * params[P_COMMISSION]
    state[i, CASH] -= units * fill + fee
    state[i, QTY] += units
    row[TRADED_NOTIONAL] += notional
    row[COMMISSION] += fee
    row[SLIPPAGE] += abs(units) * ref_price * params[P_SLIPPAGE]
    return fill


@numba.njit(cache=True)
def resizes(leverage: float, notional: float, equity: float, band: float) -> bool:
    """Whether a new `leverage` on the held side trades: its signed held `notional` / `equity`
    (the exposure it has drifted to) is more than ``band * leverage`` from it (any, at band 0)."""
    held = abs(notional) / equity if equity > 0.0 else 0.0
    return band <= 0.0 or abs(leverage - held) > band * leverage


@numba.njit(cache=True)
def liquidation_price(cash: float, qty: float, maintenance: float) -> float:
    """Price at which equity equals the maintenance margin; 0 (long) or inf (short) if none."""
    if qty > 0.0:
        return -cash / (qty * (1.0 - maintenance)) if cash < 0.0 else 0.0
    if qty < 0.0:
        return cash / (-qty * (1.0 + maintenance))
    return 0.0


@numba.njit(cache=True)
def _flatten(state, i):
    state[i, QTY] = 0.0
    state[i, ENTRY] = 0.0
    state[i, STOP] = 0.0
    state[i, SIDE] = 0.0
    state[i, LEVERAGE] = 0.0
    state[i, RISK] = 0.0
    state[i, SIZED] = 0.0


@numba.njit(cache=True)
def _reward(state, i, equity_prev, peak_prev, params):
    equity = state[i, EQUITY]
    log_return = math.log(max(equity, _EQUITY_FLOOR * state[i, START_EQUITY]) / equity_prev)
    kind = params[P_REWARD]
    if kind == 0.0:
        return log_return
    if kind == 1.0:
        # Differential Sharpe ratio (Moody & Saffell, 1998) on simple returns; clipped (see above).
        ret = equity / equity_prev - 1.0
        a = state[i, SHARPE_A]
        b = state[i, SHARPE_B]
        variance = b - a * a
        dsr = 0.0
        if variance > 1e-12:
            dsr = (b * (ret - a) - 0.5 * a * (ret * ret - b)) / variance**1.5
            dsr = min(max(dsr, -_DSR_CLIP), _DSR_CLIP)
        eta = params[P_SHARPE_ETA]
        state[i, SHARPE_A] = a + eta * (ret - a)
        state[i, SHARPE_B] = b + eta * (ret * ret - b)
        return dsr
    drawdown_prev = 1.0 - equity_prev / peak_prev
    drawdown = 1.0 - equity / state[i, PEAK]
    return log_return - params[P_DRAWDOWN_PENALTY] * max(0.0, drawdown - drawdown_prev)


@numba.njit(cache=True, inline="always")
def _observe(state, bars, ohlc, account_obs, i):
    close = ohlc[bars[i], 3]
    equity = max(state[i, EQUITY], _EQUITY_FLOOR * state[i, START_EQUITY])
    qty = state[i, QTY]
    side = state[i, SIDE]
    account_obs[i, 0] = side
    account_obs[i, 1] = qty * close / equity
    account_obs[i, 2] = qty * (close - state[i, ENTRY]) / equity if qty != 0.0 else 0.0
    account_obs[i, 3] = math.log(equity / state[i, START_EQUITY])
    account_obs[i, 4] = 1.0 - equity / state[i, PEAK]
    distance = side * (close - state[i, STOP]) / close if qty != 0.0 else 0.0
    account_obs[i, 5] = min(distance, _OBS_CAP)
    account_obs[i, 6] = state[i, LEVERAGE]
    account_obs[i, 7] = min(state[i, RISK], _OBS_CAP)


@numba.njit(cache=True)
def observe_accounts(state, bars, ohlc, account_obs):
    """Write each account's observation at its current bar's close into `account_obs` [N, 8]."""
    for i in range(state.shape[0]):
        _observe(state, bars, ohlc, account_obs, i)


@numba.njit(cache=True)
def step_accounts(
    state, bars, actions, ohlc, scale, sides, leverages, risks, params, out, account_obs,
    to_decision,
):  # fmt: skip
    """Advance every account by one bar, or with `to_decision` to its next decision bar.

    state [N, N_STATE] float64 and bars [N] int64 are updated in place; actions [N, 3] int64
    (direction, leverage, risk level indices); ohlc [T, 4] float64; scale [T] float64 the
    volatility scale of an order decided on each bar (module doc, step 1); sides, leverages,
    risks are the level tables; params [N_PARAMS]; out [N, N_OUT] and account_obs
    [N, N_ACCOUNT] are written.

    A bar is a decision bar when the episode's bars so far are a multiple of the decision
    interval k (`P_DECISION_INTERVAL`; every bar at k = 1): only there does the action place an
    order (step 1 of the module doc). On the k - 1 bars after it the account holds: no order, the
    stop where it is, and after a stop or liquidation it stays flat. One bar per call (what a
    per-bar backtest steps), or with `to_decision` the bars up to the next decision bar, or
    until the episode ends (what the envs step: one decision per step). Over several bars,
    `out` sums the reward and the costs, keeps the decision's order fill and the exit fill, and
    raises a flag when any bar raised it.
    """
    interval = params[P_DECISION_INTERVAL]
    scratch = np.empty(N_OUT)  # the outcome of the bars after the first, merged into `out`
    for i in range(state.shape[0]):
        direction, leverage, risk = actions[i, 0], actions[i, 1], actions[i, 2]
        decide = bars_to_decision(state[i, EP_STEPS], interval) == 0.0
        _step_bar(
            state, bars, i, direction, leverage, risk, decide, ohlc, scale, sides, leverages,
            risks, params, out[i],
        )  # fmt: skip
        while (
            to_decision
            and out[i, TERMINATED] == 0.0
            and out[i, TRUNCATED] == 0.0
            and bars_to_decision(state[i, EP_STEPS], interval) > 0.0
        ):  # the held bars up to the next decision bar
            _step_bar(
                state, bars, i, direction, leverage, risk, False, ohlc, scale, sides, leverages,
                risks, params, scratch,
            )  # fmt: skip
            _merge_outcome(out[i], scratch)
    observe_accounts(state, bars, ohlc, account_obs)


@numba.njit(cache=True, inline="always")
def bars_to_decision(steps: float, interval: float) -> float:
    """Bars until an account whose episode has run `steps` bars is on a decision bar (0: it is):
    one every `interval` bars, from the episode's first (`P_DECISION_INTERVAL`)."""
    return -steps % interval


_SUMMED = (REWARD, TRADED_NOTIONAL, COMMISSION, SLIPPAGE, FINANCING, BORROW, COSTS)
_FLAGS = (STOP_HIT, LIQUIDATED, BANKRUPT, TERMINATED, TRUNCATED)


@numba.njit(cache=True, inline="always")
def _merge_outcome(total, bar):
    """Add a later bar's outcome `bar` [N_OUT] to the decision's `total` [N_OUT] (in place)."""
    for k in _SUMMED:
        total[k] += bar[k]
    for k in _FLAGS:
        total[k] = max(total[k], bar[k])
    if not math.isnan(bar[EXIT_FILL]):  # a held position's stop or liquidation
        total[EXIT_FILL] = bar[EXIT_FILL]


@numba.njit(cache=True, inline="always")
def _step_bar(
    state, bars, i, direction, leverage_index, risk_index, decide, ohlc, scale, sides, leverages,
    risks, params, row,
):  # fmt: skip
    """Account i's next bar (the module doc's steps 1-3), its outcome written to `row` [N_OUT].

    The order of step 1 is placed only when `decide`; otherwise the account holds.
    """
    for k in range(N_OUT):
        row[k] = 0.0
    row[ORDER_FILL] = np.nan
    row[EXIT_FILL] = np.nan
    t = bars[i] + 1
    bars[i] = t
    open_, high, low, close = ohlc[t, 0], ohlc[t, 1], ohlc[t, 2], ohlc[t, 3]
    equity_prev = state[i, EQUITY]
    peak_prev = state[i, PEAK]
    side = float(sides[direction])
    leverage = leverages[leverage_index]
    sized = leverage * scale[t - 1]  # sized by the decision bar's volatility scale
    risk = risks[risk_index]

    # 1. The agent's order at the open (on a decision bar).
    churn = 0.0  # its traded notional / equity at the open
    held_side = state[i, SIDE]
    trade = decide and side != held_side
    resize = decide and not trade and side != 0.0  # a new sized leverage on the held side
    if resize and sized != state[i, SIZED]:
        equity_now = state[i, CASH] + state[i, QTY] * open_
        trade = resizes(sized, state[i, QTY] * open_, equity_now, params[P_RESIZE_BAND])
    if trade:
        equity_open = state[i, CASH] + state[i, QTY] * open_
        target = side * sized * max(equity_open, 0.0) / open_
        units = target - state[i, QTY]
        if side == 0.0:
            units = -state[i, QTY]  # close exactly to zero
        if units != 0.0:
            churn = abs(units) * open_ / max(equity_open, 1e-300)
            state[i, EP_TURNOVER] += churn
            churn = min(churn, _CHURN_CAP)
            row[ORDER_FILL] = _trade(state, row, i, units, open_, params)
        if side == 0.0 or target == 0.0:  # flat, or nothing left to trade with after a gap
            _flatten(state, i)
        elif units != 0.0:
            state[i, ENTRY] = row[ORDER_FILL]
            state[i, SIDE] = side
            state[i, LEVERAGE] = leverage
            state[i, SIZED] = sized
            state[i, RISK] = risk
            state[i, STOP] = state[i, ENTRY] * (1.0 - side * risk / sized)
    elif decide and held_side != 0.0 and risk != state[i, RISK]:
        state[i, RISK] = risk
        state[i, STOP] = state[i, ENTRY] * (1.0 - held_side * risk / state[i, SIZED])

    # 2. Stop or liquidation inside the bar: the level met first from the open wins.
    qty = state[i, QTY]
    if qty != 0.0:
        stop = state[i, STOP]
        liquidation = liquidation_price(state[i, CASH], qty, params[P_MAINTENANCE])
        if qty > 0.0:
            is_stop = stop >= liquidation
            level = stop if is_stop else liquidation
            hit = low <= level
            exit_ref = min(open_, level)
        else:
            is_stop = stop <= liquidation
            level = stop if is_stop else liquidation
            hit = high >= level
            exit_ref = max(open_, level)
        if hit:
            equity_before = state[i, CASH] + qty * exit_ref
            state[i, EP_TURNOVER] += abs(qty) * exit_ref / max(abs(equity_before), 1e-300)
            row[EXIT_FILL] = _trade(state, row, i, -qty, exit_ref, params)
            _flatten(state, i)
            if is_stop:
                row[STOP_HIT] = 1.0
                state[i, EP_STOPS] += 1.0
            else:
                row[LIQUIDATED] = 1.0
                state[i, EP_LIQUIDATIONS] += 1.0

    # 3. Carrying costs and the mark at the close.
    qty = state[i, QTY]
    if qty > 0.0 and state[i, CASH] < 0.0:
        row[FINANCING] = -state[i, CASH] * params[P_FINANCING]
    elif qty < 0.0:
        row[BORROW] = -qty * close * params[P_BORROW]
    state[i, CASH] -= row[FINANCING] + row[BORROW]
    row[COSTS] = row[COMMISSION] + row[SLIPPAGE] + row[FINANCING] + row[BORROW]
    equity = state[i, CASH] + qty * close
    state[i, EQUITY] = equity
    state[i, PEAK] = max(peak_prev, equity)
    if equity <= 0.0:
        row[BANKRUPT] = 1.0
    row[TERMINATED] = max(row[BANKRUPT], row[LIQUIDATED])
    # The shaping costs on the order's churn touch the reward only (a stop's or a
    # liquidation's exit is not charged; a resize pays the resize penalty on top); equity
    # pays the real costs alone.
    row[REWARD] = _reward(state, i, equity_prev, peak_prev, params)
    penalty = params[P_TURNOVER_PENALTY]
    if resize:
        penalty += params[P_RESIZE_PENALTY]
    row[REWARD] -= penalty * churn

    # Episode accumulators.
    ret = equity / equity_prev - 1.0
    state[i, EP_STEPS] += 1.0
    state[i, EP_COSTS] += row[COSTS]
    state[i, EP_RETURN_SUM] += ret
    state[i, EP_RETURN_SQ] += ret * ret
    state[i, EP_MAX_DRAWDOWN] = max(state[i, EP_MAX_DRAWDOWN], 1.0 - equity / state[i, PEAK])
    state[i, EP_EXPOSURE] += abs(qty * close) / max(equity, 1e-300)
    ended = t >= state[i, END_BAR] or state[i, EP_STEPS] >= params[P_EPISODE_LENGTH]
    row[TRUNCATED] = 1.0 if ended and row[TERMINATED] == 0.0 else 0.0


@numba.njit(cache=True)
def reset_accounts(state, bars, index, starts, ends, initial_equity, ohlc, account_obs):
    """Start fresh episodes for the accounts `index` at bars `starts`: flat, full equity.

    `ends[j]` is the last bar an order of account `index[j]` can fill on (the end of its data
    range): its episode is truncated there. Also writes those accounts' observations at their
    start bar into `account_obs`.
    """
    for j in range(index.shape[0]):
        i = index[j]
        state[i, :] = 0.0
        state[i, CASH] = initial_equity
        state[i, EQUITY] = initial_equity
        state[i, PEAK] = initial_equity
        state[i, START_EQUITY] = initial_equity
        state[i, END_BAR] = ends[j]
        bars[i] = starts[j]
        _observe(state, bars, ohlc, account_obs, i)
