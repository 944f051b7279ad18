"""Chronological train / validation / test split of a `MarketData` into bar-index ranges.

The ranges partition the bars in time order and never shuffle. An environment may still read the
bars before a range's first bar as observation history: that is past data, not leakage.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from envs.market_data import DataError, MarketData, parse_time


@dataclass(frozen=True)
class Splits:
    """Contiguous, non-overlapping bar ranges in time order that together cover [0, T)."""

    train: range  # the oldest bars; never empty
    validation: range  # the bars after train; empty only when not asked for
    test: range  # the newest bars; empty only when not asked for


def chronological_split(
    market: MarketData,
    *,
    validation: float = 0.15,
    test: float = 0.15,
    validation_start: str | None = None,
    test_start: str | None = None,
) -> Splits:
    """Split the bars by fraction or by date, oldest to train and newest to test.

    Args:
        market: the bars to split.
        validation: share of the bars for validation, in [0, 1), used unless
            ``validation_start`` is given.
        test: share of the bars for testing, in [0, 1), used unless ``test_start`` is given;
            ``validation + test`` must be < 1.
        validation_start: a date; the first bar on or after it starts the validation range.
        test_start: a date; the first bar on or after it starts the test range.

    Raises:
        ValueError: a parameter is out of its range or not a date (the message names it).
        DataError: the data cannot give every asked-for range at least one bar.
    """
    _check_fraction("validation", validation)
    _check_fraction("test", test)
    if validation + test >= 1:
        raise ValueError(f"validation + test must be < 1, got {validation} + {test}")
    n = len(market)
    if test_start is None:
        test_begin = n - round(test * n)
    else:
        test_begin = _first_bar_on_or_after(market, "test_start", test_start)
    if validation_start is None:
        validation_begin = test_begin - round(validation * n)
    else:
        validation_begin = _first_bar_on_or_after(market, "validation_start", validation_start)
    if validation_begin > test_begin:
        raise DataError(
            f"{market.source}: validation_start={validation_start} falls after the start of the "
            f"test range ({pd.Timestamp(market.timestamps[test_begin])}); it must come before it"
        )
    if validation_begin <= 0:
        raise DataError(
            f"{market.source}: no training bars left of {n}; move validation_start or "
            f"test_start later, or lower validation={validation} and test={test}"
        )
    if validation_begin == test_begin and (validation > 0 or validation_start is not None):
        asked = f"validation={validation}" if validation_start is None else "validation_start"
        raise DataError(f"{market.source}: {asked} leaves no validation bars of {n}")
    if test_begin == n and test > 0:
        raise DataError(f"{market.source}: test={test} leaves no test bars of {n}")
    return Splits(
        train=range(0, validation_begin),
        validation=range(validation_begin, test_begin),
        test=range(test_begin, n),
    )


def _check_fraction(name: str, value: float) -> None:
    if not 0 <= value < 1:
        raise ValueError(f"{name} must be a fraction in [0, 1), got {value}")


def _first_bar_on_or_after(market: MarketData, name: str, value: str) -> int:
    """Index of the first bar at or after the date ``value``, which must lie inside the data."""
    when = parse_time(value)
    if when is None:
        raise ValueError(f"{name} must be a date such as '2017-06-30', got {value!r}")
    first, last = market.timestamps[0], market.timestamps[-1]
    if not first <= when.to_datetime64() <= last:
        raise DataError(
            f"{market.source}: {name}={value} is outside the data "
            f"({pd.Timestamp(first)} .. {pd.Timestamp(last)})"
        )
    return market.bar_position(when)
