"""Each attention head's weights over the market window on one date, for a trained agent.

The trunk's forward uses SDPA, which does not return the weights; `AttentionTrunk.attention_maps`
recomputes softmax(Q K^T / sqrt(d)) explicitly, for analysis only. The trunk reads the market
window alone (the account state enters after it), so the maps of a bar do not depend on the
account.

"From the pooled position" is the row of the token the trunk's pooling reads: the current bar
(`pooling: last`), the cls token (`cls`), or the mean of all rows (`mean`, whose pooled vector
is the mean of all tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from agent import MultiHeadPolicy
from envs.core import TradingCore
from envs.market_data import parse_time


class DateError(ValueError):
    """A date that is not readable or has no full market window in the data (one line)."""


@dataclass(frozen=True)
class AttentionSnapshot:
    """The attention of every head on the window that ends at one bar."""

    bar: int  # the decision bar: the window's last bar
    labels: list[str]  # [T] token names: the window's dates (and "cls" first with cls pooling)
    maps: list[np.ndarray]  # per block: [heads, T, T], query rows, key columns
    pooled: list[np.ndarray]  # per block: [heads, T], from the pooled position
    gates: np.ndarray  # [n_blocks, heads_per_block] the trunk's gates


def bar_at(core: TradingCore, date: str) -> int:
    """The last bar at or before `date` (a date without a time counts its whole day).

    Raises `DateError` when the date cannot be read or when that bar has no full window of
    `window` bars before it, naming the dates the data allows.
    """
    times = pd.DatetimeIndex(core.timestamps)
    first_allowed = core.config.window - 1
    span = f"{times[first_allowed].date()} .. {times[-1].date()}"
    when = parse_time(date, whole_day=True)  # a date: every bar of that day
    if when is None:
        raise DateError(f"--date: expected a date such as 2017-06-30, got {date!r}")
    bar = core.market.bar_position(when, end=True) - 1
    if bar < first_allowed:
        raise DateError(
            f"--date {date}: no full window of {core.config.window} bars ends there; "
            f"the data allows {span}"
        )
    if when > times[-1] + (times[-1] - times[-2]):
        raise DateError(f"--date {date}: after the data, which allows {span}")
    return bar


def pooled_rows(maps: torch.Tensor, pooling: str) -> torch.Tensor:
    """The attention row(s) the pooled vector reads: [B, nh, T, T] -> [B, nh, T]."""
    if pooling == "last":
        return maps[:, :, -1]
    if pooling == "cls":
        return maps[:, :, 0]
    return maps.mean(dim=2)


def attention_at(policy: MultiHeadPolicy, core: TradingCore, bar: int) -> AttentionSnapshot:
    """Every head's attention on the market window that ends at `bar`."""
    trunk = policy.trunk
    market = torch.as_tensor(core.market_window(bar)[None], device=policy.device)  # [1, W, F]
    maps = trunk.attention_maps(market)  # per block [1, nh, T, T]
    window = pd.DatetimeIndex(core.timestamps[bar - core.config.window + 1 : bar + 1])
    labels = [str(t.date()) if t == t.normalize() else str(t) for t in window]
    if trunk.config.pooling == "cls":
        labels = ["cls", *labels]
    return AttentionSnapshot(
        bar=bar,
        labels=labels,
        maps=[m[0].cpu().numpy() for m in maps],
        pooled=[pooled_rows(m, trunk.config.pooling)[0].cpu().numpy() for m in maps],
        gates=trunk.head_gates.cpu().numpy(),
    )
