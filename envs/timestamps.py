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

# unit: (name, lowest, highest value): 9 to 11 digits are seconds, 12 to 14 milliseconds, 15 to
# 17 microseconds (Binance's spot files since 2025), 18 or 19 nanoseconds; each from 1973 on.
_UNIX_UNITS = {
    "s": ("seconds", 1e8, 1e11),
    "ms": ("milliseconds", 1e11, 1e14),
    "us": ("microseconds", 1e14, 1e17),
    "ns": ("nanoseconds", 1e17, 9.2e18),  # int64 nanoseconds end in 2262
}
_NUMBER = re.compile(r"[+-]?\d+(\.\d*)?")
_COMPACT_DATE = re.compile(r"\d{8}")  # 20181231: YYYYMMDD (unix seconds have 9 to 11 digits)
# A 12-hour clock: the time, then AM or PM in any case, after a space, a hyphen or nothing
# (``10/17/2019 09:00:00 PM``, ``2019-10-17 09-AM`` as CryptoDataDownload writes hours).
_TWELVE_HOUR = re.compile(r"(?P<time>.*\d)(?P<sep>\s*|-)[AaPp][Mm]")
# Year-first formats that pandas' ISO 8601 parser reads, which also takes rows that differ in
# their precision ("09:00" beside "09:00:00.5") or their zone ("Z" beside "+02:00").
_ISO_FORMAT = re.compile(r"%Y-%m-%d(?:[T ]%H(?::%M(?::%S(?:\.%f)?)?)?)?(?:\s?%z)?")
# A zone at the end of an ISO time: Z, +02, +0200 or +02:00 (after hours and minutes).
_ISO_ZONE = re.compile(r"\d:\d\d(?::\d\d(?:\.\d*)?)?\s?(?:Z|[+-]\d\d(?::?\d\d)?)$", re.IGNORECASE)


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
    """Unix seconds, milliseconds, microseconds or nanoseconds, the unit read from the first
    value's magnitude (`_UNIX_UNITS`); every row must have that unit."""
    numbers = pd.to_numeric(table.frame[column], errors="coerce")
    if numbers.isna().any():
        raise table.cell_error(numbers.isna().to_numpy(), column, "a unix time (a number)")
    first = numbers.iloc[0]
    unit = next((u for u, (_, lo, hi) in _UNIX_UNITS.items() if lo <= first < hi), None)
    if unit is None:
        raise table.cell_error(
            np.arange(len(numbers)) == 0,
            column,
            "unix seconds (9 to 11 digits), milliseconds (12 to 14), microseconds (15 to 17) "
            "or nanoseconds (18 or 19)",
        )
    name, lo, hi = _UNIX_UNITS[unit]
    outside = ((numbers < lo) | (numbers >= hi)).to_numpy()
    if outside.any():
        raise table.cell_error(outside, column, f"unix {name} like {table.row(0)}")
    return pd.to_datetime(numbers, unit=unit, utc=True)


def _parse_text_times(table: Table, column: int, notes: list[str]) -> pd.Series:
    """Parse text timestamps with one format named from the first value.

    Where the first value fits both day-first and month-first, the preferred order is tried on
    the whole column first, and the other only if some rows fail. Under ISO 8601, every row
    must have a zone if the first has one, and none if it has none: a time without a zone
    beside times with one says nothing about its own.
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
    if fmt == "ISO8601":
        zoned = text.str.contains(_ISO_ZONE).to_numpy()
        if zoned.any() and not zoned.all():
            which = "with" if zoned[0] else "without"
            expected = f"a timestamp {which} a zone, as {table.row(0)} ('{text.iloc[0]}')"
            raise table.cell_error(zoned != zoned[0], column, expected)
    return parsed


def _candidate_formats(first: str) -> list[str]:
    """Formats that read ``first``: one, or [preferred, other] when day and month can swap.

    Dotted dates prefer day-first (``DD.MM.YYYY`` is the convention); others month-first. A
    format without a four-digit year (``1/4/99``, ``22:00``) is not offered. Year-first
    values that pandas' ISO 8601 parser reads get it (`_ISO_FORMAT`); others (a 12-hour clock,
    a zone name such as ``UTC``) get the format guessed from ``first``.
    """
    month_first, day_first = _guess_format(first, False), _guess_format(first, True)
    if month_first is not None and month_first.startswith("%Y"):  # year first: always Y-M-D
        return ["ISO8601" if _ISO_FORMAT.fullmatch(month_first) else month_first]
    formats = [f for f in dict.fromkeys((month_first, day_first)) if f and "%Y" in f]
    if len(formats) == 2 and day_first is not None and "%d.%m" in day_first:
        formats.reverse()
    return formats


def _guess_format(first: str, dayfirst: bool) -> str | None:
    """pandas' guess of the strptime format of ``first``, also for any 12-hour clock.

    pandas names none for some 12-hour times (``10/17/2019 01:00:00 PM``, a lower-case ``pm``,
    CryptoDataDownload's ``2019-10-17 09-AM``): those get the format of the time without its
    AM/PM, with the hour read as ``%I`` and ``%p`` after the same separator.
    """
    with warnings.catch_warnings():  # pandas warns when a day above 12 forces day-first
        warnings.simplefilter("ignore")
        guessed = guess_datetime_format(first, dayfirst=dayfirst)
        twelve = _TWELVE_HOUR.fullmatch(first)
        if twelve is None or (guessed is not None and "%p" in guessed):
            return guessed
        clock = guess_datetime_format(twelve["time"], dayfirst=dayfirst)
    if clock is None or "%H" not in clock:
        return None
    return clock.replace("%H", "%I") + twelve["sep"] + "%p"


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
