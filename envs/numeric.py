"""Numbers in the cells of a `Table`: decimal commas, thousands separators, volume units.

The number half of `envs.market_data.load_market_data`. The decimal mark is read from the file's
own numbers; prices must be finite and > 0, volumes >= 0 (a missing volume becomes 0).
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pandas as pd

from envs.table import Table

_VOLUME_UNITS = {"k": 1e3, "m": 1e6, "b": 1e9}  # 1.88M: volume in thousands, millions, billions


def plain_numbers(table: Table, columns: list[int]) -> Table:
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


def _decimal_mark(table: Table, text: dict[int, pd.Series], odd: dict[int, pd.Series]) -> str:
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


def _parse_numbers(table: Table, column: int) -> tuple[np.ndarray, np.ndarray]:
    """Float64 values (NaN where missing) and the missing mask; refuses any other non-number."""
    raw = table.frame[column]
    numbers = pd.to_numeric(raw, errors="coerce")
    values = numbers.to_numpy(dtype=np.float64, na_value=np.nan, copy=True)
    missing = raw.isna().to_numpy()
    wrong = ~np.isfinite(values) & ~missing
    if wrong.any():
        raise table.cell_error(wrong, column, "a finite number")
    return values, missing


def parse_prices(table: Table, column: int) -> np.ndarray:
    """Prices of `column`: finite numbers > 0, none missing."""
    values, missing = _parse_numbers(table, column)
    if missing.any():
        raise table.cell_error(missing, column, "a price")
    if (values <= 0).any():
        raise table.cell_error(values <= 0, column, "a price > 0")
    return values


def parse_volume(table: Table, positions: list[int] | None, notes: list[str]) -> np.ndarray:
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
