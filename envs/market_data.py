"""Load OHLCV bars from a CSV file or a DataFrame, validate them, and hold them as arrays.

One loader serves every file; nothing in it is specific to one file or vendor.

Recognised input
----------------
* Column names in any case, ignoring spaces, underscores and punctuation, with common aliases
  (`_ALIASES`): the timestamp from ``Date``, ``Time``, ``Timestamp``, ``Datetime``,
  ``Date Time``, ``Gmt time``, ``unix``, ``Open time`` (or separate ``Date`` and ``Time``
  columns, joined); ``Open``/``o``, ``High``/``h``, ``Low``/``l``, ``Close``/``c`` (or, without
  one, ``Price`` or ``Last``); ``Adj Close``/``adj_close``/``adjusted close``/``adjusted``;
  ``Volume``/``Vol``/``v`` (or, without one, the first column named ``Volume ...``, such as
  ``Volume BTC``); ``Ticker``/``Symbol``/``Name``. Without a timestamp name, an unnamed first
  column is the timestamp; for a DataFrame, so is a `DatetimeIndex` or an index named like a
  timestamp column. Of several timestamp columns (``unix`` and ``date``) the first is read.
  Other columns are ignored.
* Timestamps: ISO 8601 with or without a time and a zone (``2019-10-17T09:00:00+02:00``,
  ``2019-10-17 09:00:00-05:00``, ``...Z``; every row with a zone or none); day-first
  (``31.12.2018 22:00:00.000``, ``31/12/2018``); month-first (``12/31/2018``); a 12-hour clock
  after any of these (``10/17/2019 09:00:00 AM``, ``2019-10-17 09-AM`` as CryptoDataDownload
  writes hours, ``pm`` in any case); a zone name (``2019-10-17 09:00:00 UTC``); other shapes
  pandas can name one format for (``Jan 4, 1999``), always with a four-digit year; compact
  ``20181231`` (eight digits are a date, never a unix time); unix seconds (9 to 11 digits),
  milliseconds (12 to 14), microseconds (15 to 17) or nanoseconds (18 or 19). A zone is
  converted to UTC and dropped. The whole column is parsed with one format, named from its
  first value.
* Day-first or month-first is read from the data: the order under which every row parses wins.
  When both do (no day above 12 anywhere), dotted dates (``DD.MM.YYYY``) are read day-first by
  convention and others month-first, with a warning that says so.
* Files plain or compressed, by suffix: ``.gz``, ``.bz2``, ``.xz``, or a ``.zip`` of one file;
  UTF-8 (with or without a byte-order mark) or UTF-16 with one (Excel's "Unicode text").
* Numbers with a decimal point or a decimal comma, with or without thousands separators
  (``1,234.5``, ``1.234,5``, ``12,5``): the decimal mark is read from the file's numbers
  (`_decimal_mark`). A file whose only commas sit in cells like ``1,234`` is refused: it does
  not say which the comma is.
* Separators ``,`` ``;`` and tab, found from the header line. Banner lines above the header are
  skipped: the header is the first of the first 20 lines that names at least two known columns.
* Rows in any time order: they are sorted by timestamp (files are often newest first).
* Long files with a ticker column: with more than one ticker, ``ticker=`` picks one, or
  `load_instruments` reads them all at once. A file without a ticker column takes ``ticker``
  as its label.

Repaired, each with one warning that counts the rows
----------------------------------------------------
* A missing volume value (or ``-``) is set to 0 (a file without a volume column gets zero
  volume, silently). Volumes may end in K, M or B (``1.88M``).
* A row with every field missing (a blank line, or separators only) is dropped.
* A row with a timestamp but none of open, high, low and close (Yahoo's ``null`` rows) is
  dropped; a row missing only some of them is refused.

Refused with a `DataError` (one line: the file, the row and the column, expected and found)
--------------------------------------------------------------------------------------------
A missing file, a folder, binary content (such as an Excel workbook), a damaged compressed file
or a zip of several files, an empty file, no header line, missing required columns, two columns
with the same meaning, rows with more fields than the header, a missing or non-numeric or
non-finite value in open/high/low/close (or adjusted close with ``adjust=True``), a price <= 0,
high below max(open, close), low above min(open, close), a non-numeric or negative volume, a
missing or unparseable timestamp, duplicate timestamps, fewer than ``min_rows`` rows, and a
missing or unknown ticker. "Missing" means empty, whitespace, or one of ``nan na n/a #n/a null
none`` in any case (a ticker column keeps such words: ``NA`` can be a ticker).

Row numbers in messages are the line numbers an editor shows (the header is line 1 when there is
no banner); for a DataFrame they are its index labels.

This module holds the public face (`load_market_data`, `load_instruments`,
`has_adjusted_close`, `MarketData`, `DataError`, and the date helpers `parse_time` and
`time_labels`) and the checks of rows and columns; reading the cells, parsing numbers and
parsing timestamps are `envs.table`, `envs.numeric` and `envs.timestamps`.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, DTypeLike

from envs.numeric import parse_prices, parse_volume, plain_numbers
from envs.table import (
    FIELD_OF,
    DataError,
    Table,
    file_header,
    file_table,
    frame_table,
    normalise,
)
from envs.timestamps import (
    all_at_midnight,
    chronological_order,
    parse_time,
    parse_timestamps,
    time_labels,
)

__all__ = [
    "DataError",
    "MarketData",
    "has_adjusted_close",
    "load_instruments",
    "load_market_data",
    "parse_time",
    "time_labels",
]

PRICE_FIELDS = ("open", "high", "low", "close")
_ARRAY_FIELDS = ("timestamps", *PRICE_FIELDS, "volume")
_CLOSE_FALLBACKS = ("price", "last")  # the close when no column is named like one (investing.com)
_VOLUME_PREFIX = "volume"  # without a volume column, the first "Volume BTC" (CryptoDataDownload)
_REQUIRED_NAMES = {
    "time": "timestamp (Date, Time, Timestamp, unix ...)",
    "adj_close": "Adj Close (adjust=True needs it)",
}
_UNNAMED = ("", "unnamed0")  # an empty header cell; pandas calls it "Unnamed: 0"


@dataclass(frozen=True, eq=False, repr=False)
class MarketData:
    """Validated OHLCV bars of one instrument, oldest first, as read-only float64 arrays.

    Built by `load_market_data`; the constructor only checks shapes and converts dtypes, so
    values passed to it directly are trusted.
    """

    source: str  # file path, or "<DataFrame>"
    ticker: str | None  # the instrument, when the data names it
    timestamps: np.ndarray  # [T] datetime64[ns], strictly increasing
    open: np.ndarray  # [T] float64
    high: np.ndarray  # [T] float64
    low: np.ndarray  # [T] float64
    close: np.ndarray  # [T] float64
    volume: np.ndarray  # [T] float64, zeros when the data has no volume

    def __post_init__(self) -> None:
        n = len(self.timestamps)
        object.__setattr__(self, "timestamps", _read_only(self.timestamps, "datetime64[ns]"))
        for name in ("open", "high", "low", "close", "volume"):
            values = _read_only(getattr(self, name), np.float64)
            if values.shape != (n,):
                raise ValueError(f"MarketData.{name} has shape {values.shape}, expected ({n},)")
            object.__setattr__(self, name, values)

    def __len__(self) -> int:
        return len(self.timestamps)

    def __repr__(self) -> str:
        times = pd.DatetimeIndex(self.timestamps[[0, -1]]) if len(self) else None
        span = f"{times[0]} .. {times[1]}" if times is not None else "empty"
        return f"MarketData({self.source!r}, ticker={self.ticker!r}, {len(self)} bars, {span})"

    @functools.cached_property
    def ohlc(self) -> np.ndarray:
        """[T, 4] float64, C-contiguous, read-only: open, high, low, close."""
        return _read_only(np.column_stack([self.open, self.high, self.low, self.close]))

    def slice(self, start: int, stop: int) -> MarketData:
        """Bars ``start`` to ``stop - 1`` (views, no copy); needs 0 <= start < stop <= len."""
        if not 0 <= start < stop <= len(self):
            raise ValueError(f"slice({start}, {stop}) needs 0 <= start < stop <= {len(self)}")
        part = {name: getattr(self, name)[start:stop] for name in _ARRAY_FIELDS}
        return MarketData(source=self.source, ticker=self.ticker, **part)

    @functools.cached_property
    def daily(self) -> bool:
        """Whether every bar is stamped at midnight: daily (or longer) bars, labelled by date."""
        return all_at_midnight(pd.DatetimeIndex(self.timestamps))

    def bars_per_year(self) -> float:
        """Observed bars per year, (T - 1) / span in years of 365.25 days.

        Closures count as they occur: daily stocks give about 252, hourly FX about 6,200.
        """
        span_ns = (self.timestamps[-1] - self.timestamps[0]).astype(np.int64) if len(self) else 0
        if len(self) < 2 or span_ns <= 0:
            raise ValueError(f"{self.source}: bars_per_year needs two bars at different times")
        return (len(self) - 1) / (span_ns / (365.25 * 86_400e9))

    def bar_position(self, when: pd.Timestamp, *, end: bool = False) -> int:
        """Where time `when` (naive UTC, as `parse_time` reads a user's date) falls in the bars.

        The position of the first bar at or after `when`, from 0 to len(self) (none is); with
        `end`, one past the last bar at or before it, so `range(start, end)` holds the bars
        between two times. The one date-to-bar lookup of the code base.
        """
        side: Literal["left", "right"] = "right" if end else "left"
        return int(np.searchsorted(self.timestamps, when.to_datetime64(), side=side))


def load_market_data(
    source: str | os.PathLike | pd.DataFrame | MarketData,
    *,
    ticker: str | None = None,
    adjust: bool = False,
    min_rows: int = 2,
) -> MarketData:
    """Read, validate and sort OHLCV bars from a CSV path, a DataFrame or a `MarketData`.

    Args:
        source: a CSV file, a DataFrame (columns as in a file; the index may hold the
            timestamps), or a `MarketData`, returned as it is.
        ticker: the instrument to select from a file with several (required there); a label
            for data without a ticker column.
        adjust: scale open/high/low/close by adjusted close / close and divide volume by that
            factor, which removes split and dividend jumps; needs an adjusted-close column.
        min_rows: fewer bars than this is a `DataError` (an environment needs window + 1).

    Raises:
        DataError: the data is unusable; the message is one line naming file, row and column.
    """
    _check_min_rows_argument(min_rows)
    if isinstance(source, MarketData):
        market = _label_market(source, ticker)
        _check_row_count(market.source, len(market), min_rows)
        return market
    table, columns, notes = _read(source, adjust)
    table, ticker = _select_ticker(table, columns.get("ticker"), ticker)
    market = _validated(table, columns, ticker, adjust, min_rows, notes)
    for note in notes:
        warnings.warn(note, stacklevel=2)
    return market


def load_instruments(
    source: str | os.PathLike | pd.DataFrame | MarketData,
    *,
    tickers: Sequence[str] | None = None,
    adjust: bool = False,
    min_rows: int = 2,
) -> list[MarketData]:
    """Every instrument of a CSV path or a DataFrame, read once, each a validated `MarketData`.

    A long file with a ticker column gives one `MarketData` per ticker, labelled with it, in the
    order of each ticker's first row. Each one equals ``load_market_data(source, ticker=name,
    adjust=adjust, min_rows=min_rows)``: the same checks, repairs and warnings, and errors that
    name the file and the line. Data without a ticker column, or a `MarketData`, is one
    instrument: a list of one (labelled as ``ticker=`` would label it).

    Args:
        source: as for `load_market_data`.
        tickers: the instruments to return, in this order, matched ignoring case; None: all.
            For data without a ticker column, at most one name, the label.
        adjust: as for `load_market_data`, for every instrument.
        min_rows: as for `load_market_data`, for every instrument.

    Raises:
        DataError: any instrument is unusable (one line naming file, row and column); a name in
            `tickers` is not in the file ("ticker 'X' not found; tickers present: ...") or two
            names pick one ticker; with `tickers` None, a row has no ticker.
        TypeError: `tickers` is a string rather than a sequence of names.
        ValueError: `tickers` is empty, or `min_rows` < 1.
    """
    _check_min_rows_argument(min_rows)
    if isinstance(tickers, str):
        raise TypeError(f"tickers= takes a sequence of names, such as [{tickers!r}]; got a string")
    if tickers is not None and len(tickers) == 0:
        raise ValueError("tickers= names no instrument; pass None for every one")
    if isinstance(source, MarketData):
        return [
            load_market_data(source, ticker=_only_label(source.source, tickers), min_rows=min_rows)
        ]
    table, columns, notes = _read(source, adjust)
    parts: list[tuple[Table, str | None]]
    if "ticker" in columns:
        parts = list(_split_tickers(table, columns["ticker"][0], tickers))
    else:
        parts = [(table, _only_label(table.name, tickers))]
    markets = [_validated(part, columns, name, adjust, min_rows, notes) for part, name in parts]
    for note in notes:
        warnings.warn(note, stacklevel=2)
    return markets


def has_adjusted_close(source: str | os.PathLike | pd.DataFrame) -> bool:
    """Whether a CSV file (its header line alone is read) or a DataFrame has a column named
    like an adjusted close (``Adj Close``, ``adjusted``, ...), which ``adjust=True`` needs.

    Raises:
        DataError: the file cannot be read, or has no header line.
    """
    if isinstance(source, pd.DataFrame):
        header = [str(column) for column in source.columns]
    else:
        header = file_header(Path(source))
    return any(FIELD_OF.get(normalise(name)) == "adj_close" for name in header)


def _read(
    source: str | os.PathLike | pd.DataFrame, adjust: bool
) -> tuple[Table, dict[str, list[int]], list[str]]:
    """The table of a file or DataFrame without its empty rows, its columns, and the notes."""
    is_frame = isinstance(source, pd.DataFrame)
    table = frame_table(source) if is_frame else file_table(Path(source))
    notes: list[str] = []
    columns = _map_columns(table, adjust)
    table = _drop_empty_rows(table, notes)
    return table, columns, notes


def _validated(
    table: Table,
    columns: dict[str, list[int]],
    ticker: str | None,
    adjust: bool,
    min_rows: int,
    notes: list[str],
) -> MarketData:
    """One instrument's rows (`table`) parsed, checked and sorted; repairs are added to notes."""
    table = _drop_rows_without_prices(table, columns, notes)
    _check_row_count(table.name, len(table), min_rows)
    numeric = [
        columns[name][0] for name in (*PRICE_FIELDS, "adj_close", "volume") if name in columns
    ]
    table = plain_numbers(table, numeric)
    timestamps = parse_timestamps(table, columns["time"], notes)
    open_, high, low, close = (parse_prices(table, columns[name][0]) for name in PRICE_FIELDS)
    _check_bars(table, columns, open_, high, low, close)
    volume = parse_volume(table, columns.get("volume"), notes)
    if adjust:
        factor = parse_prices(table, columns["adj_close"][0]) / close
        open_, high, low, close, volume = (
            open_ * factor,
            high * factor,
            low * factor,
            close * factor,
            volume / factor,
        )
    order = chronological_order(table, timestamps, columns["time"])
    return MarketData(
        source=table.source,
        ticker=ticker,
        timestamps=timestamps[order],
        open=open_[order],
        high=high[order],
        low=low[order],
        close=close[order],
        volume=volume[order],
    )


def _map_columns(table: Table, adjust: bool) -> dict[str, list[int]]:
    """Field -> column positions.

    "time" is one column, or a date and a time column to be joined; of other timestamp columns
    the first in the file is used. Two columns for any other field are an error.
    """
    columns: dict[str, list[int]] = {}
    for position, name in enumerate(table.header):
        field = FIELD_OF.get(normalise(name))
        if field is not None:
            columns.setdefault(field, []).append(position)
    if "time" not in columns and table.header and normalise(table.header[0]) in _UNNAMED:
        columns["time"] = [0]
    names = [normalise(name) for name in table.header]
    if "close" not in columns:  # no Close column: a Price or Last column is the close
        fallback = next((names.index(name) for name in _CLOSE_FALLBACKS if name in names), None)
        if fallback is not None:
            columns["close"] = [fallback]
    if "volume" not in columns:  # "Volume BTC,Volume USDT": the first, the base asset's
        prefixed = [p for p, name in enumerate(names) if name.startswith(_VOLUME_PREFIX)]
        if prefixed:
            columns["volume"] = prefixed[:1]
    required = ["time", *PRICE_FIELDS, *(["adj_close"] if adjust else [])]
    missing = [_REQUIRED_NAMES.get(field, field) for field in required if field not in columns]
    if missing:
        found = ", ".join(table.header) or "none"
        plural = "s" if len(missing) > 1 else ""
        raise DataError(
            f"{table.name}: missing column{plural} {', '.join(missing)}; found: {found}"
        )
    for field, positions in columns.items():
        if len(positions) > 1 and field != "time":
            listed = " and ".join(f"'{table.header[p]}'" for p in positions)
            raise DataError(f"{table.name}: columns {listed} all mean {field}; keep one")
    by_name = {normalise(table.header[p]): p for p in reversed(columns["time"])}
    both = [by_name[name] for name in ("date", "time") if name in by_name]
    columns["time"] = both if len(both) == 2 else columns["time"][:1]
    return columns


def _drop_empty_rows(table: Table, notes: list[str]) -> Table:
    """Drop rows whose every cell is missing, noting how many."""
    empty = np.zeros(len(table), dtype=bool)
    candidates = np.flatnonzero(table.frame[0].isna())  # only these can be empty
    empty[candidates] = table.frame.iloc[candidates].isna().all(axis=1).to_numpy()
    return _drop_rows(table, empty, "empty row", notes)


def _drop_rows_without_prices(
    table: Table, columns: dict[str, list[int]], notes: list[str]
) -> Table:
    """Drop rows with none of open, high, low and close (Yahoo's "null" days), noting how many.

    A row with only some of the four missing is left for `parse_prices` to refuse.
    """
    missing = [table.frame[columns[name][0]].isna().to_numpy() for name in PRICE_FIELDS]
    return _drop_rows(table, np.logical_and.reduce(missing), "row without prices", notes)


def _drop_rows(table: Table, rows: np.ndarray, what: str, notes: list[str]) -> Table:
    """The table without `rows` (a boolean mask); a note counts them and names the first.

    `what` names one such row ("empty row"); the note makes it plural as needed.
    """
    n = int(rows.sum())
    if n == 0:
        return table
    first = table.row(int(np.flatnonzero(rows)[0]))
    label = what if n == 1 else what.replace("row", "rows", 1)
    notes.append(f"{table.name}: {n} {label} dropped (first: {first})")
    return table.take(~rows)


def _select_ticker(
    table: Table, positions: list[int] | None, ticker: str | None
) -> tuple[Table, str | None]:
    """Keep the rows of one ticker; returns the table and the ticker's name."""
    if positions is None:
        return table, ticker
    names = _ticker_names(table, positions[0])
    present = sorted(names.unique())
    if ticker is None and len(present) == 1:
        return table, present[0]
    if ticker is None:
        raise DataError(
            f"{table.name}: several tickers in column '{table.header[positions[0]]}'; pass "
            f"ticker= one of: {', '.join(present)}"
        )
    chosen = _find_ticker(table, present, ticker)
    return table.take((names == chosen).to_numpy()), chosen


def _split_tickers(
    table: Table, position: int, tickers: Sequence[str] | None
) -> list[tuple[Table, str]]:
    """The rows of each ticker (of `tickers`, else of all in order of first appearance)."""
    names = _ticker_names(table, position)
    codes, uniques = pd.factorize(names)  # uniques in order of first appearance
    present = [str(name) for name in uniques]
    if tickers is None:
        if "" in present:
            raise table.cell_error((names == "").to_numpy(), position, "a ticker")
        chosen = present
    else:
        chosen = [_find_ticker(table, sorted(present), ticker) for ticker in tickers]
        twice = next((name for i, name in enumerate(chosen) if name in chosen[:i]), None)
        if twice is not None:
            raise DataError(f"{table.name}: tickers= names ticker '{twice}' twice")
    return [(table.take(codes == present.index(name)), name) for name in chosen]


def _ticker_names(table: Table, position: int) -> pd.Series:
    """The ticker column as stripped text; a missing ticker is ""."""
    return table.frame[position].fillna("").astype(str).str.strip()


def _find_ticker(table: Table, present: list[str], ticker: str) -> str:
    """The name in `present` (sorted) that `ticker` means, ignoring case and spaces."""
    wanted = ticker.strip().upper()
    chosen = next((name for name in present if name.upper() == wanted), None)
    if chosen is None:
        raise DataError(
            f"{table.name}: ticker '{ticker}' not found; tickers present: {', '.join(present)}"
        )
    return chosen


def _only_label(name: str, tickers: Sequence[str] | None) -> str | None:
    """The one name `tickers` may give data without a ticker column (None: no label)."""
    if tickers is not None and len(tickers) > 1:
        raise DataError(
            f"{name}: no ticker column, so one instrument; tickers= names {len(tickers)}: "
            f"{', '.join(tickers)}"
        )
    return tickers[0] if tickers else None


def _label_market(market: MarketData, ticker: str | None) -> MarketData:
    """A `MarketData` as it is, or labelled with ``ticker``; a different ticker is an error."""
    if ticker is None or (market.ticker or "").upper() == ticker.strip().upper():
        return market
    if market.ticker is None:
        return replace(market, ticker=ticker)
    raise DataError(f"{market.source}: ticker '{ticker}' not found; the data holds {market.ticker}")


def _check_min_rows_argument(min_rows: int) -> None:
    if min_rows < 1:
        raise ValueError(f"min_rows must be >= 1, got {min_rows}")


def _check_row_count(name: str, n: int, min_rows: int) -> None:
    if n < min_rows:
        raise DataError(
            f"{name}: {n} data rows, expected at least {min_rows} (one observation window "
            "plus one step)"
        )


def _check_bars(
    table: Table,
    columns: dict[str, list[int]],
    open_: np.ndarray,
    high: np.ndarray,
    low: np.ndarray,
    close: np.ndarray,
) -> None:
    """High must bracket open and close from above and low from below (so high >= low)."""
    top, bottom = np.maximum(open_, close), np.minimum(open_, close)
    if (high < top).any():
        raise table.cell_error(high < top, columns["high"][0], "high >= max(open, close)")
    if (low > bottom).any():
        raise table.cell_error(low > bottom, columns["low"][0], "low <= min(open, close)")


def _read_only(values: ArrayLike, dtype: DTypeLike | None = None) -> np.ndarray:
    """A C-contiguous read-only view (the caller's own array stays writable)."""
    view = np.ascontiguousarray(values, dtype=dtype).view()
    view.flags.writeable = False
    return view
