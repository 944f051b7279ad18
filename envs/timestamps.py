"""Timestamps: of a `Table`'s time column, of a user's date, and as labels for people.

The timestamp half of `envs.market_data.load_market_data`: ISO, day- or month-first (read from
the data itself), compact or unix times, zones converted to UTC and dropped, rows put in time
order. `parse_time` reads a user's date (`--start`, `data.test_start`, ...) the same way bars are
stored, and `time_labels` writes bar times back as text.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import replace
from datetime import date

import numpy as np
import pandas as pd
from pandas.tseries.api import guess_datetime_format

from envs.table import DataError, Table

_UNIX_UNITS = {"s": ("seconds", 1e8, 1e11), "ms": ("milliseconds", 1e11, 1e14)}  # 1973..5138
_NUMBER = re.compile(r"[+-]?\d+(\.\d*)?")
_COMPACT_DATE = re.compile(r"\d{8}")  # 20181231: YYYYMMDD (unix seconds have 9 to 11 digits)


def parse_time(text: str, *, whole_day: bool = False) -> pd.Timestamp | None:
    """A user's date or time as bars are stored: naive UTC (zones converted); None if unreadable.

    With `whole_day`, a date without a time of day stands for its last instant, so "up to
    2017-06-30" includes every bar of that day.
    """
    try:
        when = pd.Timestamp(text)
    except ValueError:
        return None
    if when.tzinfo is not None:
        when = when.tz_convert("UTC").tz_localize(None)
    if whole_day and ":" not in text and when == when.normalize():
        when += pd.Timedelta(days=1) - pd.Timedelta(1, "ns")
    return when


def time_labels(timestamps: np.ndarray, daily: bool | None = None) -> list[str]:
    """Timestamps as text: dates alone for daily bars, else date and time of day.

    `daily` None: daily when every one of `timestamps` is at midnight. Pass a whole file's
    `MarketData.daily` to label a few of its bars the way the file would label them all.
    """
    times = pd.DatetimeIndex(timestamps)
    if daily is None:
        daily = all_at_midnight(times)
    return list(times.strftime("%Y-%m-%d" if daily else "%Y-%m-%d %H:%M"))


def all_at_midnight(times: pd.DatetimeIndex) -> bool:
    """Whether every time is at midnight: dates alone label them."""
    return bool((times == times.normalize()).all())


def parse_timestamps(table: Table, columns: list[int], notes: list[str]) -> np.ndarray:
    """datetime64[ns] UTC-naive timestamps from one column, or a date and a time column."""
    if len(columns) == 2:  # separate date and time columns: parse "date time"
        date_text, time_text = (table.frame[c].astype(str).str.strip() for c in columns)
        joined = (date_text + " " + time_text).to_frame(0)
        table = replace(table, frame=joined, header=[_column_name(table, columns)])
        columns = [0]
    column = columns[0]
    values = table.frame[column]
    missing = values.isna().to_numpy()
    if missing.any():
        raise table.cell_error(missing, column, "a timestamp")
    first = values.iloc[0]
    if pd.api.types.is_datetime64_any_dtype(values) or isinstance(first, date | np.datetime64):
        parsed = pd.to_datetime(values, utc=True, errors="coerce")
        if parsed.isna().any():
            raise table.cell_error(parsed.isna().to_numpy(), column, "a timestamp")
    elif _COMPACT_DATE.fullmatch(str(first).strip()):
        parsed = _parse_text_times(table, column, notes)
    elif isinstance(first, int | float | np.number) or _NUMBER.fullmatch(str(first).strip()):
        parsed = _parse_unix(table, column)
    else:
        parsed = _parse_text_times(table, column, notes)
    years = parsed.dt.year.to_numpy()
    if ((years < 1678) | (years > 2261)).any():  # the range of datetime64[ns]
        raise table.cell_error((years < 1678) | (years > 2261), column, "a year in 1678..2261")
    return parsed.dt.tz_localize(None).to_numpy(dtype="datetime64[ns]")


def _column_name(table: Table, columns: list[int]) -> str:
    return "+".join(table.header[c] for c in columns)


def _parse_unix(table: Table, column: int) -> pd.Series:
    """Unix seconds or milliseconds, the unit read from the first value's magnitude."""
    numbers = pd.to_numeric(table.frame[column], errors="coerce")
    if numbers.isna().any():
        raise table.cell_error(numbers.isna().to_numpy(), column, "a unix time (a number)")
    first = numbers.iloc[0]
    unit = next((u for u, (_, lo, hi) in _UNIX_UNITS.items() if lo <= first < hi), None)
    if unit is None:
        raise table.cell_error(
            np.arange(len(numbers)) == 0,
            column,
            "unix seconds (9 to 11 digits) or milliseconds (12 to 14 digits)",
        )
    name, lo, hi = _UNIX_UNITS[unit]
    outside = ((numbers < lo) | (numbers >= hi)).to_numpy()
    if outside.any():
        raise table.cell_error(outside, column, f"unix {name} like {table.row(0)}")
    return pd.to_datetime(numbers, unit=unit, utc=True)


def _parse_text_times(table: Table, column: int, notes: list[str]) -> pd.Series:
    """Parse text timestamps with one format named from the first value.

    Where the first value fits both day-first and month-first, the preferred order is tried on
    the whole column first, and the other only if some rows fail.
    """
    text = table.frame[column].astype(str).str.strip()
    formats = _candidate_formats(text.iloc[0])
    if not formats:
        raise table.cell_error(
            np.arange(len(text)) == 0, column, "a date such as 2017-12-31, 31.12.2017 or 12/31/2017"
        )
    fmt, parsed = formats[0], pd.to_datetime(text, format=formats[0], utc=True, errors="coerce")
    if len(formats) == 2 and parsed.isna().any():
        other = pd.to_datetime(text, format=formats[1], utc=True, errors="coerce")
        if other.isna().sum() < parsed.isna().sum():
            fmt, parsed = formats[1], other
    elif len(formats) == 2 and (parsed.dt.day <= 12).all():  # the swapped order parses too
        notes.append(
            f"{table.name}: column '{table.header[column]}' read as {fmt}: no day above 12, "
            f"so day-first and month-first both fit"
        )
    bad = parsed.isna().to_numpy()
    if bad.any():
        raise table.cell_error(bad, column, f"a timestamp like '{text.iloc[0]}' ({fmt})")
    return parsed


def _candidate_formats(first: str) -> list[str]:
    """Formats that read ``first``: one, or [preferred, other] when day and month can swap.

    Dotted dates prefer day-first (``DD.MM.YYYY`` is the convention); others month-first. A
    format without a four-digit year (``1/4/99``, ``22:00``) is not offered.
    """
    with warnings.catch_warnings():  # pandas warns when a day above 12 forces day-first
        warnings.simplefilter("ignore")
        month_first = guess_datetime_format(first, dayfirst=False)
        day_first = guess_datetime_format(first, dayfirst=True)
    if month_first is not None and month_first.startswith("%Y"):  # year first: always Y-M-D
        return ["ISO8601" if month_first.startswith("%Y-%m-%d") else month_first]
    formats = [f for f in dict.fromkeys((month_first, day_first)) if f and "%Y" in f]
    if len(formats) == 2 and "%d.%m" in day_first:
        formats.reverse()
    return formats


def chronological_order(table: Table, timestamps: np.ndarray, columns: list[int]) -> np.ndarray:
    """Positions that sort the rows by time; refuses duplicate timestamps."""
    order = np.argsort(timestamps, kind="stable")
    ordered = timestamps[order]
    duplicate = np.flatnonzero(ordered[1:] == ordered[:-1])
    if len(duplicate):
        first, second = order[duplicate[0]], order[duplicate[0] + 1]
        more = f" ({len(duplicate)} duplicates)" if len(duplicate) > 1 else ""
        raise DataError(
            f"{table.name}: {table.row(first)} and {table.row(second)}, column "
            f"'{_column_name(table, columns)}': expected distinct timestamps, found "
            f"{pd.Timestamp(ordered[duplicate[0]])} twice{more}"
        )
    return order
