"""Raw cells of a CSV file or a DataFrame, before any value is parsed, with row labels.

The reading half of `envs.market_data.load_market_data` (whose docstring lists what it
accepts): files plain or compressed, UTF-8 or UTF-16, the header line found below any banner,
the separator read from it, missing-value words as NaN. `Table.cell_error` words the one-line
`DataError` every refusal of a cell is.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import itertools
import lzma
import re
import warnings
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

_ALIASES: dict[str, tuple[str, ...]] = {
    "time": (
        "date",
        "time",
        "timestamp",
        "datetime",
        "gmttime",
        "utctime",
        "unix",
        "unixtime",
        "opentime",  # Binance's klines: the bar's opening time
    ),
    "open": ("open", "o"),
    "high": ("high", "h"),
    "low": ("low", "l"),
    "close": ("close", "c"),
    "adj_close": ("adjclose", "adjustedclose", "adjusted"),  # "adjusted": tidyquant, pytimetk
    "volume": ("volume", "vol", "v"),
    "ticker": ("ticker", "symbol", "name"),
}
FIELD_OF = {alias: name for name, aliases in _ALIASES.items() for alias in aliases}
_SEPARATORS = (",", ";", "\t")
_MAX_HEADER_LINE = 20  # banner lines allowed above the header, plus one
_MISSING_TEXT = ("", "nan", "na", "n/a", "#n/a", "null", "none")  # any case, read as missing
_NA_TOKENS = sorted({v for t in _MISSING_TEXT for v in (t, t.upper(), t.title())} | {"NaN"})
_PARSER_ERROR = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")
# By file suffix (and .zip); anything else is opened as it is.
_DECOMPRESS: dict[str, Callable[..., Any]] = {
    ".gz": gzip.open,
    ".bz2": bz2.open,
    ".xz": lzma.open,
}
_DECOMPRESS_ERRORS = (OSError, EOFError, zipfile.BadZipFile, lzma.LZMAError, zlib.error)
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")  # Excel's "Unicode text" export is UTF-16


class DataError(ValueError):
    """A user's data is unusable; str(err) is ONE line naming the file, the row and/or column,
    what was expected and what was found."""


@dataclass(frozen=True)
class Table:
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

    def take(self, rows: np.ndarray) -> Table:
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


def file_table(path: Path) -> Table:
    """Read a CSV file as text cells, after finding its header line and separator."""
    if path.is_dir():
        raise DataError(f"{path}: is a folder; expected a CSV file")
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        return _read_table(path)
    except _DECOMPRESS_ERRORS as err:
        raise DataError(f"{path.name}: cannot read the {path.suffix} file: {err}") from None


def file_header(path: Path) -> list[str]:
    """The header cells of the CSV file at `path`, read from its first lines only.

    The same header `file_table` finds (below any banner), with the same `DataError`s.
    """
    if path.is_dir():
        raise DataError(f"{path}: is a folder; expected a CSV file")
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        return _find_header(path)[2]
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


def _read_table(path: Path) -> Table:
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
    return Table(path.name, str(path), frame, header, labels, "line")


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
    return FIELD_OF.get(normalise(name)) == "ticker"


def _count_known(cells: list[str]) -> int:
    return sum(normalise(cell) in FIELD_OF for cell in cells)


def normalise(name: object) -> str:
    """``' Adj. Close '`` -> ``'adjclose'``."""
    return re.sub(r"[^0-9a-z]", "", str(name).lower())


def _describe_parser_error(err: pd.errors.ParserError, width: int) -> str:
    match = _PARSER_ERROR.search(str(err))
    if match is None:
        return "cannot be read as CSV: " + " ".join(str(err).split())
    line, saw = match.group(2), match.group(3)
    return f"line {line}: expected {width} fields as in the header, found {saw}"


def frame_table(df: pd.DataFrame) -> Table:
    """A DataFrame as a table; its index becomes the first column when it holds the times.

    Text cells that say "missing" become NaN, so that NaN is the only missing value after this.
    """
    header = [str(column) for column in df.columns]
    index_name = normalise(df.index.name or "")
    use_index = not any(FIELD_OF.get(normalise(c)) == "time" for c in header) and (
        isinstance(df.index, pd.DatetimeIndex) or FIELD_OF.get(index_name) == "time"
    )
    frame = df.reset_index(drop=not use_index)
    if use_index:
        header = [str(df.index.name or ""), *header]
    frame.columns = range(len(header))
    for i, name in enumerate(header):  # as in a file: missing-value words become NaN
        if frame[i].dtype == object or pd.api.types.is_string_dtype(frame[i]):
            frame[i] = frame[i].mask(_missing_text(frame[i], ("",) if _is_ticker(name) else None))
    labels = df.index.astype(str).to_numpy()
    return Table("<DataFrame>", "<DataFrame>", frame, header, labels, "row")


def _missing_text(values: pd.Series, words: tuple[str, ...] | None = None) -> pd.Series:
    """True where a text cell is blank or a missing-value word (`_MISSING_TEXT`, any case)."""
    words = _MISSING_TEXT if words is None else words
    return values.isna() | values.astype(str).str.strip().str.lower().isin(words)


def _quote(value: object) -> str:
    return "an empty value" if pd.isna(value) else f"'{value}'"
