"""Load OHLCV bars from a CSV file or a DataFrame, validate them, and hold them as arrays.

One loader serves every file; nothing in it is specific to one file or vendor.

Recognised input
----------------
* Column names in any case, ignoring spaces, underscores and punctuation, with common aliases
  (`_ALIASES`): the timestamp from ``Date``, ``Time``, ``Timestamp``, ``Datetime``,
  ``Date Time``, ``Gmt time``, ``unix`` (or separate ``Date`` and ``Time`` columns, joined);
  ``Open``/``o``, ``High``/``h``, ``Low``/``l``, ``Close``/``c`` (or, without one, ``Price`` or
  ``Last``); ``Adj Close``/``adj_close``/``adjusted close``; ``Volume``/``Vol``/``v``;
  ``Ticker``/``Symbol``/``Name``. Without a timestamp name, an unnamed first column is the
  timestamp; for a DataFrame, so is a `DatetimeIndex` or an index named like a timestamp column.
  Other columns are ignored.
* Timestamps: ISO 8601 with or without a time and a zone; day-first (``31.12.2018 22:00:00.000``,
  ``31/12/2018``); month-first (``12/31/2018``); other shapes pandas can name one format for
  (``Jan 4, 1999``), always with a four-digit year; compact ``20181231`` (eight digits are a date,
  never a unix time); unix seconds (9 to 11 digits) or milliseconds (12 to 14 digits). A zone
  is converted to UTC and dropped. The whole column is parsed with one format, named from its
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
* Long files with a ticker column: with more than one ticker, ``ticker=`` picks one. A file
  without a ticker column takes ``ticker`` as its label.

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
"""

from __future__ import annotations

import bz2
import csv
import functools
import gzip
import io
import itertools
import lzma
import os
import re
import warnings
import zipfile
import zlib
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.tseries.api import guess_datetime_format

PRICE_FIELDS = ("open", "high", "low", "close")
_ARRAY_FIELDS = ("timestamps", *PRICE_FIELDS, "volume")

# Normalised column name (lower case, letters and digits only) -> field.
_ALIASES: dict[str, tuple[str, ...]] = {
    "time": ("date", "time", "timestamp", "datetime", "gmttime", "utctime", "unix", "unixtime"),
    "open": ("open", "o"),
    "high": ("high", "h"),
    "low": ("low", "l"),
    "close": ("close", "c"),
    "adj_close": ("adjclose", "adjustedclose"),
    "volume": ("volume", "vol", "v"),
    "ticker": ("ticker", "symbol", "name"),
}
_FIELD_OF = {alias: name for name, aliases in _ALIASES.items() for alias in aliases}
_CLOSE_FALLBACKS = ("price", "last")  # the close when no column is named like one (investing.com)
_VOLUME_UNITS = {"k": 1e3, "m": 1e6, "b": 1e9}  # 1.88M: volume in thousands, millions, billions
_REQUIRED_NAMES = {
    "time": "timestamp (Date, Time, Timestamp, unix ...)",
    "adj_close": "Adj Close (adjust=True needs it)",
}
_UNNAMED = ("", "unnamed0")  # an empty header cell; pandas calls it "Unnamed: 0"
_SEPARATORS = (",", ";", "\t")
_MAX_HEADER_LINE = 20  # banner lines allowed above the header, plus one
_MISSING_TEXT = ("", "nan", "na", "n/a", "#n/a", "null", "none")  # any case, read as missing
_NA_TOKENS = sorted({v for t in _MISSING_TEXT for v in (t, t.upper(), t.title())} | {"NaN"})
_UNIX_UNITS = {"s": ("seconds", 1e8, 1e11), "ms": ("milliseconds", 1e11, 1e14)}  # 1973..5138
_NUMBER = re.compile(r"[+-]?\d+(\.\d*)?")
_COMPACT_DATE = re.compile(r"\d{8}")  # 20181231: YYYYMMDD (unix seconds have 9 to 11 digits)
_PARSER_ERROR = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")
_DECOMPRESS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}  # by file suffix; and .zip
_DECOMPRESS_ERRORS = (OSError, EOFError, zipfile.BadZipFile, lzma.LZMAError, zlib.error)
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")  # Excel's "Unicode text" export is UTF-16


class DataError(ValueError):
    """A user's data is unusable; str(err) is ONE line naming the file, the row and/or column,
    what was expected and what was found."""


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
        return _all_at_midnight(pd.DatetimeIndex(self.timestamps))

    def bars_per_year(self) -> float:
        """Observed bars per year, (T - 1) / span in years of 365.25 days.

        Closures count as they occur: daily stocks give about 252, hourly FX about 6,200.
        """
        span_ns = (self.timestamps[-1] - self.timestamps[0]).astype(np.int64) if len(self) else 0
        if len(self) < 2 or span_ns <= 0:
            raise ValueError(f"{self.source}: bars_per_year needs two bars at different times")
        return (len(self) - 1) / (span_ns / (365.25 * 86_400e9))


def time_labels(timestamps: np.ndarray, daily: bool | None = None) -> list[str]:
    """Timestamps as text: dates alone for daily bars, else date and time of day.

    `daily` None: daily when every one of `timestamps` is at midnight. Pass a whole file's
    `MarketData.daily` to label a few of its bars the way the file would label them all.
    """
    times = pd.DatetimeIndex(timestamps)
    if daily is None:
        daily = _all_at_midnight(times)
    return list(times.strftime("%Y-%m-%d" if daily else "%Y-%m-%d %H:%M"))


def _all_at_midnight(times: pd.DatetimeIndex) -> bool:
    return bool((times == times.normalize()).all())


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
    if min_rows < 1:
        raise ValueError(f"min_rows must be >= 1, got {min_rows}")
    if isinstance(source, MarketData):
        market = _label_market(source, ticker)
        _check_row_count(market.source, len(market), min_rows)
        return market
    is_frame = isinstance(source, pd.DataFrame)
    table = _frame_table(source) if is_frame else _file_table(Path(source))
    notes: list[str] = []
    columns = _map_columns(table, adjust)
    table = _drop_empty_rows(table, notes)
    table, ticker = _select_ticker(table, columns.get("ticker"), ticker)
    table = _drop_rows_without_prices(table, columns, notes)
    _check_row_count(table.name, len(table), min_rows)
    numeric = [
        columns[name][0] for name in (*PRICE_FIELDS, "adj_close", "volume") if name in columns
    ]
    table = _plain_numbers(table, numeric)
    timestamps = _parse_timestamps(table, columns["time"], notes)
    open_, high, low, close = (_parse_prices(table, columns[name][0]) for name in PRICE_FIELDS)
    _check_bars(table, columns, open_, high, low, close)
    volume = _parse_volume(table, columns.get("volume"), notes)
    if adjust:
        factor = _parse_prices(table, columns["adj_close"][0]) / close
        open_, high, low, close, volume = (
            open_ * factor,
            high * factor,
            low * factor,
            close * factor,
            volume / factor,
        )
    order = _chronological_order(table, timestamps, columns["time"])
    market = MarketData(
        source=table.source,
        ticker=ticker,
        timestamps=timestamps[order],
        open=open_[order],
        high=high[order],
        low=low[order],
        close=close[order],
        volume=volume[order],
    )
    for note in notes:
        warnings.warn(note, stacklevel=2)
    return market


# --- reading -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Table:
    """Raw cells of a file or DataFrame, before any parsing, with row labels for messages."""

    name: str  # file name or "<DataFrame>", the first word of every message
    source: str  # MarketData.source
    frame: pd.DataFrame  # cells; columns are positions 0..len(header)-1
    header: list[str]  # column names as the user wrote them
    labels: np.ndarray  # line numbers in the file, or the DataFrame's index labels
    row_word: str  # "line" or "row"

    def __len__(self) -> int:
        return len(self.frame)

    def row(self, i: int) -> str:
        """How the user finds row ``i``: ``line 7`` or ``row 2021-01-03 00:00:00``."""
        return f"{self.row_word} {self.labels[i]}"

    def take(self, rows: np.ndarray) -> _Table:
        """The table restricted to ``rows`` (a boolean mask or positions)."""
        frame = self.frame.iloc[rows].reset_index(drop=True)
        return replace(self, frame=frame, labels=self.labels[rows])

    def cell_error(self, mask: np.ndarray, column: int, expected: str) -> DataError:
        """The error for the first True row of ``mask`` in ``column``; counts the others."""
        bad = np.flatnonzero(mask)
        i = bad[0]
        more = f" ({len(bad)} rows like this)" if len(bad) > 1 else ""
        found = _quote(self.frame.iat[i, column])
        return DataError(
            f"{self.name}: {self.row(i)}, column '{self.header[column]}': "
            f"expected {expected}, found {found}{more}"
        )


def _file_table(path: Path) -> _Table:
    """Read a CSV file as text cells, after finding its header line and separator."""
    if path.is_dir():
        raise DataError(f"{path}: is a folder; expected a CSV file")
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        return _read_table(path)
    except _DECOMPRESS_ERRORS as err:
        raise DataError(f"{path.name}: cannot read the {path.suffix} file: {err}") from None


def _open_text(path: Path) -> io.TextIOWrapper:
    """The file as text, decompressed by its suffix (.gz, .bz2, .xz, or a .zip of one file).

    UTF-8 (a byte-order mark is dropped) or, after a UTF-16 byte-order mark, UTF-16; bytes
    that do not decode become U+FFFD rather than an error.
    """
    suffix = path.suffix.lower()
    if suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            members = [name for name in archive.namelist() if not name.endswith("/")]
            if len(members) != 1:
                raise DataError(f"{path.name}: expected one file in the zip, found {len(members)}")
            binary = archive.open(members[0])  # stays readable after the archive is closed
    else:
        binary = _DECOMPRESS.get(suffix, open)(path, "rb")
    try:
        bom = binary.read(2)
        binary.seek(0)
    except BaseException:
        binary.close()
        raise
    encoding = "utf-16" if bom in _UTF16_BOMS else "utf-8-sig"
    return io.TextIOWrapper(binary, encoding=encoding, errors="replace", newline="")


def _read_table(path: Path) -> _Table:
    """The cells of the CSV at `path` (plain or compressed), with their line numbers."""
    header_index, sep, header = _find_header(path)
    first_line = header_index + 2  # 1-based line number of the first data row
    width = len(header)
    # Missing-value words become NaN, except in a ticker column (where "NA" may be a ticker).
    na_values = {i: [""] if _is_ticker(name) else _NA_TOKENS for i, name in enumerate(header)}
    na_values[width] = [""]
    try:
        with warnings.catch_warnings():  # pandas only warns where it drops a long first row's end
            warnings.simplefilter("error", pd.errors.ParserWarning)
            with _open_text(path) as text:
                frame = pd.read_csv(
                    text,
                    sep=sep,
                    skiprows=header_index + 1,
                    header=None,
                    names=range(width + 1),  # one spare column catches a field past the header
                    index_col=False,
                    dtype=str,
                    na_values=na_values,
                    keep_default_na=False,
                    skipinitialspace=True,
                    skip_blank_lines=False,  # keeps line numbers right; blank rows go later
                )
    except pd.errors.ParserWarning:
        raise DataError(
            f"{path.name}: line {first_line}: expected {width} fields as in the header, found more"
        ) from None
    except pd.errors.ParserError as err:
        raise DataError(f"{path.name}: {_describe_parser_error(err, width)}") from None
    labels = np.arange(first_line, first_line + len(frame))
    extra = frame.pop(width).notna().to_numpy()  # a trailing separator leaves it empty
    if extra.any():
        raise DataError(
            f"{path.name}: line {labels[extra.argmax()]}: expected {width} fields as in the "
            f"header, found more"
        )
    return _Table(path.name, str(path), frame, header, labels, "line")


def _find_header(path: Path) -> tuple[int, str, list[str]]:
    """The header's 0-based line index, the separator, and the header cells."""
    with _open_text(path) as file:
        head = [line.rstrip("\r\n") for line in itertools.islice(file, _MAX_HEADER_LINE)]
    if not any(line.strip() for line in head):
        raise DataError(f"{path.name}: the file is empty")
    if any("\x00" in line for line in head):
        raise DataError(
            f"{path.name}: binary data, not a text CSV (an Excel workbook must be saved as CSV "
            f"first; compressed files are read by their suffix: .gz, .bz2, .xz, .zip)"
        )
    for index, line in enumerate(head):
        splits = {sep: _split_line(line, sep) for sep in _SEPARATORS}
        sep = max(_SEPARATORS, key=lambda s: _count_known(splits[s]))
        if _count_known(splits[sep]) >= 2:
            return index, sep, splits[sep]
    first = next(line for line in head if line.strip())
    raise DataError(
        f"{path.name}: no header line with column names such as Date, Open, High, Low, Close "
        f"in the first {len(head)} lines; the first line is {first.strip()[:80]!r}"
    )


def _split_line(line: str, sep: str) -> list[str]:
    """Cells of one CSV line, quotes removed and whitespace stripped."""
    return [cell.strip() for cell in next(csv.reader([line], delimiter=sep), [])]


def _is_ticker(name: str) -> bool:
    return _FIELD_OF.get(_normalise(name)) == "ticker"


def _count_known(cells: list[str]) -> int:
    return sum(_normalise(cell) in _FIELD_OF for cell in cells)


def _normalise(name: object) -> str:
    """``' Adj. Close '`` -> ``'adjclose'``."""
    return re.sub(r"[^0-9a-z]", "", str(name).lower())


def _describe_parser_error(err: pd.errors.ParserError, width: int) -> str:
    match = _PARSER_ERROR.search(str(err))
    if match is None:
        return "cannot be read as CSV: " + " ".join(str(err).split())
    line, saw = match.group(2), match.group(3)
    return f"line {line}: expected {width} fields as in the header, found {saw}"


def _frame_table(df: pd.DataFrame) -> _Table:
    """A DataFrame as a table; its index becomes the first column when it holds the times.

    Text cells that say "missing" become NaN, so that NaN is the only missing value after this.
    """
    header = [str(column) for column in df.columns]
    index_name = _normalise(df.index.name or "")
    use_index = not any(_FIELD_OF.get(_normalise(c)) == "time" for c in header) and (
        isinstance(df.index, pd.DatetimeIndex) or _FIELD_OF.get(index_name) == "time"
    )
    frame = df.reset_index(drop=not use_index)
    if use_index:
        header = [str(df.index.name or ""), *header]
    frame.columns = range(len(header))
    for i, name in enumerate(header):  # as in a file: missing-value words become NaN
        if frame[i].dtype == object or pd.api.types.is_string_dtype(frame[i]):
            frame[i] = frame[i].mask(_missing_text(frame[i], ("",) if _is_ticker(name) else None))
    labels = df.index.astype(str).to_numpy()
    return _Table("<DataFrame>", "<DataFrame>", frame, header, labels, "row")


# --- columns and rows ----------------------------------------------------------------------------


def _map_columns(table: _Table, adjust: bool) -> dict[str, list[int]]:
    """Field -> column positions.

    "time" is one column, or a date and a time column to be joined; of other timestamp columns
    the first in the file is used. Two columns for any other field are an error.
    """
    columns: dict[str, list[int]] = {}
    for position, name in enumerate(table.header):
        field = _FIELD_OF.get(_normalise(name))
        if field is not None:
            columns.setdefault(field, []).append(position)
    if "time" not in columns and table.header and _normalise(table.header[0]) in _UNNAMED:
        columns["time"] = [0]
    if "close" not in columns:  # no Close column: a Price or Last column is the close
        names = [_normalise(name) for name in table.header]
        fallback = next((names.index(name) for name in _CLOSE_FALLBACKS if name in names), None)
        if fallback is not None:
            columns["close"] = [fallback]
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
    by_name = {_normalise(table.header[p]): p for p in reversed(columns["time"])}
    both = [by_name[name] for name in ("date", "time") if name in by_name]
    columns["time"] = both if len(both) == 2 else columns["time"][:1]
    return columns


def _drop_empty_rows(table: _Table, notes: list[str]) -> _Table:
    """Drop rows whose every cell is missing, noting how many."""
    empty = np.zeros(len(table), dtype=bool)
    candidates = np.flatnonzero(table.frame[0].isna())  # only these can be empty
    empty[candidates] = table.frame.iloc[candidates].isna().all(axis=1).to_numpy()
    return _drop_rows(table, empty, "empty row", notes)


def _drop_rows_without_prices(
    table: _Table, columns: dict[str, list[int]], notes: list[str]
) -> _Table:
    """Drop rows with none of open, high, low and close (Yahoo's "null" days), noting how many.

    A row with only some of the four missing is left for `_parse_prices` to refuse.
    """
    missing = [table.frame[columns[name][0]].isna().to_numpy() for name in PRICE_FIELDS]
    return _drop_rows(table, np.logical_and.reduce(missing), "row without prices", notes)


def _drop_rows(table: _Table, rows: np.ndarray, what: str, notes: list[str]) -> _Table:
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
    table: _Table, positions: list[int] | None, ticker: str | None
) -> tuple[_Table, str | None]:
    """Keep the rows of one ticker; returns the table and the ticker's name."""
    if positions is None:
        return table, ticker
    names = table.frame[positions[0]].fillna("").astype(str).str.strip()
    present = sorted(names.unique())
    if ticker is None and len(present) == 1:
        return table, present[0]
    if ticker is None:
        raise DataError(
            f"{table.name}: several tickers in column '{table.header[positions[0]]}'; pass "
            f"ticker= one of: {', '.join(present)}"
        )
    chosen = next((name for name in present if name.upper() == ticker.strip().upper()), None)
    if chosen is None:
        raise DataError(
            f"{table.name}: ticker '{ticker}' not found; tickers present: {', '.join(present)}"
        )
    return table.take((names == chosen).to_numpy()), chosen


def _label_market(market: MarketData, ticker: str | None) -> MarketData:
    """A `MarketData` as it is, or labelled with ``ticker``; a different ticker is an error."""
    if ticker is None or (market.ticker or "").upper() == ticker.strip().upper():
        return market
    if market.ticker is None:
        return replace(market, ticker=ticker)
    raise DataError(f"{market.source}: ticker '{ticker}' not found; the data holds {market.ticker}")


def _check_row_count(name: str, n: int, min_rows: int) -> None:
    if n < min_rows:
        raise DataError(
            f"{name}: {n} data rows, expected at least {min_rows} (one observation window "
            "plus one step)"
        )


# --- values --------------------------------------------------------------------------------------


def _missing_text(values: pd.Series, words: tuple[str, ...] | None = None) -> pd.Series:
    """True where a text cell is blank or a missing-value word (`_MISSING_TEXT`, any case)."""
    words = _MISSING_TEXT if words is None else words
    return values.isna() | values.astype(str).str.strip().str.lower().isin(words)


def _quote(value: object) -> str:
    return "an empty value" if pd.isna(value) else f"'{value}'"


def _plain_numbers(table: _Table, columns: list[int]) -> _Table:
    """Numbers written with a decimal comma or thousands separators, rewritten as plain ones.

    The decimal mark is read from the file's numbers (`_decimal_mark`); the other of ',' and '.'
    is then the thousands separator. Only text cells of that shape change (``1.234,5``,
    ``12,5``, ``1,234.5``); any other cell is left for `_parse_numbers` to refuse as it is.
    """
    if not any(_has_comma(table.frame[c]) for c in columns):  # plain numbers: the usual case
        return table
    text = {c: table.frame[c].astype(str).str.strip() for c in columns}
    odd = {c: t.str.contains(",", regex=False) & table.frame[c].notna() for c, t in text.items()}
    decimal = _decimal_mark(table, text, odd)
    thousands = "." if decimal == "," else ","
    t, d = re.escape(thousands), re.escape(decimal)
    shape = rf"[+-]?(\d{{1,3}}({t}\d{{3}})+|\d+)({d}\d*)?"
    frame = table.frame.copy()
    for c, cells in text.items():
        fits = cells.str.fullmatch(shape) & table.frame[c].notna()
        plain = cells.str.replace(thousands, "", regex=False).str.replace(decimal, ".", regex=False)
        frame[c] = table.frame[c].where(~fits, plain)
    return replace(table, frame=frame)


def _has_comma(cells: pd.Series) -> bool:
    """Whether any text cell holds a comma: one join in C instead of a test per cell."""
    if not (cells.dtype == object or pd.api.types.is_string_dtype(cells)):
        return False  # numbers from a DataFrame
    return "," in "\n".join(cells.dropna().astype(str).to_numpy())


def _decimal_mark(table: _Table, text: dict[int, pd.Series], odd: dict[int, pd.Series]) -> str:
    """',' or '.', from the cells holding a comma (`odd`), of the text of the number columns.

    A cell with both marks shows it: the later one (``1.234,5``, ``1,234.5``). Otherwise a comma
    not followed by exactly three digits is a decimal comma (``12,5``), and several commas in
    one number are thousands separators (``1,234,567``). With only cells like ``1,234`` the
    file does not say, and that is a `DataError`.
    """
    commas = pd.concat([text[c][mask] for c, mask in odd.items()])
    both = commas[commas.str.contains(".", regex=False)]
    if len(both):
        first = both.iloc[0]
        return "." if first.rfind(".") > first.rfind(",") else ","
    if not commas.str.fullmatch(r"[+-]?\d{1,3}(,\d{3})+").all():
        return ","
    if (commas.str.count(",") > 1).any():
        return "."
    column = next(c for c, mask in odd.items() if mask.any())
    raise table.cell_error(
        odd[column].to_numpy(),
        column,
        "a number whose ',' the file makes clear: a thousands separator (1,234.5 or 1,234,567 "
        "elsewhere) or a decimal comma (12,5 elsewhere)",
    )


def _parse_numbers(table: _Table, column: int) -> tuple[np.ndarray, np.ndarray]:
    """Float64 values (NaN where missing) and the missing mask; refuses any other non-number."""
    raw = table.frame[column]
    numbers = pd.to_numeric(raw, errors="coerce")
    values = numbers.to_numpy(dtype=np.float64, na_value=np.nan, copy=True)
    missing = raw.isna().to_numpy()
    wrong = ~np.isfinite(values) & ~missing
    if wrong.any():
        raise table.cell_error(wrong, column, "a finite number")
    return values, missing


def _parse_prices(table: _Table, column: int) -> np.ndarray:
    values, missing = _parse_numbers(table, column)
    if missing.any():
        raise table.cell_error(missing, column, "a price")
    if (values <= 0).any():
        raise table.cell_error(values <= 0, column, "a price > 0")
    return values


def _parse_volume(table: _Table, positions: list[int] | None, notes: list[str]) -> np.ndarray:
    """Volume, zeros without a column; missing values (and "-") become 0 with a note.

    A value may end in K, M or B (thousands, millions, billions: ``1.88M``).
    """
    if positions is None:
        return np.zeros(len(table))
    raw = table.frame[positions[0]]
    odd = raw[pd.to_numeric(raw, errors="coerce").isna() & raw.notna()].astype(str).str.strip()
    if len(odd):  # only these can carry a unit or be "-"
        parts = odd.str.extract(r"^([+-]?\d+(?:\.\d*)?)([kKmMbB])$")  # number, unit
        scaled = pd.to_numeric(parts[0]) * parts[1].str.lower().map(_VOLUME_UNITS)
        frame = table.frame.copy()
        frame.loc[scaled.index, positions[0]] = odd.where(scaled.isna(), scaled.astype(str))
        frame.loc[odd.index[odd == "-"], positions[0]] = np.nan
        table = replace(table, frame=frame)
    values, missing = _parse_numbers(table, positions[0])
    if missing.any():
        n = int(missing.sum())
        notes.append(
            f"{table.name}: {n} {'row' if n == 1 else 'rows'} with missing volume set to 0 "
            f"(first: {table.row(np.flatnonzero(missing)[0])})"
        )
        values[missing] = 0.0
    if (values < 0).any():
        raise table.cell_error(values < 0, positions[0], "a volume >= 0")
    return values


def _check_bars(
    table: _Table,
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


def _chronological_order(table: _Table, timestamps: np.ndarray, columns: list[int]) -> np.ndarray:
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


# --- timestamps ----------------------------------------------------------------------------------


def _column_name(table: _Table, columns: list[int]) -> str:
    return "+".join(table.header[c] for c in columns)


def _parse_timestamps(table: _Table, columns: list[int], notes: list[str]) -> np.ndarray:
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


def _parse_unix(table: _Table, column: int) -> pd.Series:
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


def _parse_text_times(table: _Table, column: int, notes: list[str]) -> pd.Series:
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


def _read_only(values: object, dtype: object = None) -> np.ndarray:
    """A C-contiguous read-only view (the caller's own array stays writable)."""
    view = np.ascontiguousarray(values, dtype=dtype).view()
    view.flags.writeable = False
    return view
