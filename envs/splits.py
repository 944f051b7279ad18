"""Chronological train / validation / test split of one or several instruments by calendar date.

The ranges partition each instrument's bars in time order and never shuffle. With several
instruments the split is by calendar date, the same dates for every instrument (`split_calendar`):
the boundaries come from the union of their bar dates, so no instrument's test period is another's
training period (a market-wide move cannot leak from one into the other), and an instrument with a
shorter history only takes part in the ranges where it has bars. An environment may still read
the bars before a range's first bar as observation history: that is past data, not leakage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from envs.market_data import DataError, MarketData, parse_time


@dataclass(frozen=True)
class Splits:
    """Contiguous, non-overlapping bar ranges in time order that together cover [0, T)."""

    train: range  # the oldest bars; never empty for a single instrument
    validation: range  # the bars after train; empty only when not asked for
    test: range  # the newest bars; empty only when not asked for


@dataclass(frozen=True)
class CalendarSplit:
    """Where the validation and test ranges start, and each instrument's ranges."""

    validation_start: np.datetime64 | None  # first validation date; None: no validation bars
    test_start: np.datetime64 | None  # first test date; None: no test bars
    splits: tuple[Splits, ...]  # per instrument, in the order given; any range may be empty


def chronological_split(
    market: MarketData,
    *,
    validation: float = 0.15,
    test: float = 0.15,
    validation_start: str | None = None,
    test_start: str | None = None,
) -> Splits:
    """Split one instrument's bars by fraction or by date, oldest to train and newest to test.

    `split_calendar` for a single instrument (its own dates are the calendar).
    """
    return split_calendar(
        [market],
        validation=validation,
        test=test,
        validation_start=validation_start,
        test_start=test_start,
    ).splits[0]


def split_calendar(
    markets: Sequence[MarketData],
    *,
    validation: float = 0.15,
    test: float = 0.15,
    validation_start: str | None = None,
    test_start: str | None = None,
) -> CalendarSplit:
    """Split instruments by calendar date, oldest first, with the same boundary dates for all.

    The calendar is the union of the instruments' bar dates; fractions are shares of its dates.

    Args:
        markets: the instruments to split (one or more).
        validation: share of the calendar for validation, in [0, 1), used unless
            ``validation_start`` is given.
        test: share of the calendar for testing, in [0, 1), used unless ``test_start`` is given;
            ``validation + test`` must be < 1.
        validation_start: a date; the first date on or after it starts the validation range.
        test_start: a date; the first date on or after it starts the test range.

    Raises:
        ValueError: a parameter is out of its range or not a date (the message names it).
        DataError: the calendar cannot give every asked-for range at least one date.
    """
    _check_fraction("validation", validation)
    _check_fraction("test", test)
    if validation + test >= 1:
        raise ValueError(f"validation + test must be < 1, got {validation} + {test}")
    if not markets:
        raise ValueError("split_calendar needs at least one instrument")
    dates = np.unique(np.concatenate([market.timestamps for market in markets]))  # [D] sorted
    where = markets[0].source if len(markets) == 1 else f"{len(markets)} instruments"
    n = len(dates)
    if test_start is None:
        test_begin = n - round(test * n)
    else:
        test_begin = _first_date_on_or_after(dates, where, "test_start", test_start)
    if validation_start is None:
        validation_begin = test_begin - round(validation * n)
    else:
        validation_begin = _first_date_on_or_after(
            dates, where, "validation_start", validation_start
        )
    if validation_begin > test_begin:
        raise DataError(
            f"{where}: validation_start={validation_start} falls after the start of the "
            f"test range ({pd.Timestamp(dates[test_begin])}); it must come before it"
        )
    if validation_begin <= 0:
        raise DataError(
            f"{where}: no training bars left of {n}; move validation_start or "
            f"test_start later, or lower validation={validation} and test={test}"
        )
    if validation_begin == test_begin and (validation > 0 or validation_start is not None):
        asked = f"validation={validation}" if validation_start is None else "validation_start"
        raise DataError(f"{where}: {asked} leaves no validation bars of {n}")
    if test_begin == n and test > 0:
        raise DataError(f"{where}: test={test} leaves no test bars of {n}")
    first_validation = dates[validation_begin] if validation_begin < test_begin else None
    first_test = dates[test_begin] if test_begin < n else None
    splits = []
    for market in markets:
        times = market.timestamps
        v, t = (int(np.searchsorted(times, dates[i])) if i < n else len(times)
                for i in (validation_begin, test_begin))  # fmt: skip
        splits.append(Splits(range(0, v), range(v, t), range(t, len(times))))
    return CalendarSplit(first_validation, first_test, tuple(splits))


def _check_fraction(name: str, value: float) -> None:
    if not 0 <= value < 1:
        raise ValueError(f"{name} must be a fraction in [0, 1), got {value}")


def _first_date_on_or_after(dates: np.ndarray, where: str, name: str, value: str) -> int:
    """Index of the first of `dates` at or after the date ``value``, which must lie inside them."""
    when = parse_time(value)
    if when is None:
        raise ValueError(f"{name} must be a date such as '2017-06-30', got {value!r}")
    first, last = dates[0], dates[-1]
    if not first <= when.to_datetime64() <= last:
        raise DataError(
            f"{where}: {name}={value} is outside the data "
            f"({pd.Timestamp(first)} .. {pd.Timestamp(last)})"
        )
    return int(np.searchsorted(dates, when.to_datetime64()))
