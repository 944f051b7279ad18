"""The backtest picture, `report.png`: equity and drawdown of every strategy, the agent's heads.

Five panels over time, sharing the time axis: equity of every strategy; drawdown of every
strategy; the agent's `direction` as -1 (short), 0 (flat), +1 (long); the `leverage` and `risk`
levels it chose while not flat (they have no effect when flat). Row k of a record is bar k's
close and its action is the one held during bar k, so actions are drawn as steps ending at k.

The leverage panel also draws the exposure the agent held at each close, |notional| / equity
(the record's `exposure`): an unchanged action trades nothing, so a long chosen at 5x drifts to
2x as the price rises, and a stop leaves it at 0 while the chosen level stays. The chosen level
says what was asked for, the held exposure the risk carried.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from envs.config import DIRECTION_SIDES

AGENT = "agent"
CHOSEN_LEVERAGE = "chosen leverage level"  # labels of the leverage panel's lines
HELD_EXPOSURE = "held exposure |notional| / equity"


def drawdown_pct(equity: pd.Series) -> np.ndarray:
    """Fall of equity from its running peak, % of that peak (0 at a new high)."""
    values = equity.to_numpy(dtype=float)
    peak = np.maximum.accumulate(values)
    return (values / peak - 1.0) * 100.0


def render_report(records: dict[str, pd.DataFrame], title: str) -> bytes:
    """The report as PNG bytes; `records` maps strategy names to records, `"agent"` among them."""
    buffer = io.BytesIO()
    report_figure(records, title).savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def report_figure(records: dict[str, pd.DataFrame], title: str) -> Figure:
    """The report's figure (module doc); `records` as for `render_report`."""
    agent = records[AGENT]
    time = pd.to_datetime(agent["timestamp"])
    # A bare `Figure` renders with Agg and leaves pyplot's global state (and any GUI) alone.
    fig = Figure(figsize=(12, 11), layout="constrained")
    axes = fig.subplots(5, 1, sharex=True, height_ratios=[3, 1.5, 1, 1, 1])
    equity_ax, drawdown_ax, direction_ax, leverage_ax, risk_ax = axes
    for name, record in records.items():  # each on its own bars: a liquidated agent stops early
        width = 1.6 if name == AGENT else 0.9
        own = pd.to_datetime(record["timestamp"])
        equity_ax.plot(own, record["equity"], label=name, linewidth=width)
        drawdown_ax.plot(own, drawdown_pct(record["equity"]), label=name, linewidth=width)
    equity_ax.set_ylabel("equity")
    equity_ax.legend(loc="upper left")
    equity_ax.set_title(title)
    drawdown_ax.set_ylabel("drawdown %")

    side = agent["direction"].map(DIRECTION_SIDES)  # NaN on row 0: no action yet
    in_position = side.fillna(0.0) != 0
    steps = dict(drawstyle="steps-pre", linewidth=1.0, color="tab:blue")
    direction_ax.plot(time, side, **steps)
    direction_ax.set_yticks([-1, 0, 1], ["short", "flat", "long"])
    direction_ax.set_ylabel("direction")
    leverage_ax.plot(time, agent["leverage"].where(in_position), label=CHOSEN_LEVERAGE, **steps)
    leverage_ax.plot(time, agent["exposure"].abs(), label=HELD_EXPOSURE, linewidth=1.0,
                     color="tab:orange")  # fmt: skip
    leverage_ax.set_ylabel("leverage (x)")
    leverage_ax.legend(loc="upper left")
    held_risk = agent["risk"].where(in_position)
    risk_ax.plot(time, held_risk * 100.0, **steps)  # inf: not drawn
    no_stop = bool(np.isinf(held_risk).any())
    risk_ax.set_ylabel("risk (%), gaps: no stop" if no_stop else "risk (%)")
    for ax in axes:
        ax.grid(alpha=0.3)
    return fig
