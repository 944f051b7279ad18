"""CSV loading: `load_market_data` against a hand-written pandas loader of the same file.

The reference knows each file's layout in advance: `pd.read_csv` with the date column parsed in
its known format, the ticker's rows selected, OHLCV taken as float arrays. That is the least a
loader must do. `load_market_data` also finds the header, recognises the columns and the date
format, checks every price and timestamp, and (for `--adjust`) scales by Adj Close. Both read the
same bars (checked). Prints the median time of each over `--repeats` runs and their ratio, for
the bundled files and the shared EURUSD hourly file when it is there.

Usage: python benchmarks/load_throughput.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from machine import cpu_model

from envs import MarketData, load_market_data

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Case:
    """One file, how our loader is called on it, and its known layout for the reference."""

    name: str
    path: Path
    date_column: str
    date_format: str
    ticker: str | None = None
    adjust: bool = False


CASES = (
    Case("GOOGL daily", REPO / "data" / "gymanytrading_GOOGL_daily.csv", "Date", "%Y-%m-%d"),
    Case(
        "wiki MSFT daily, adjusted",
        REPO / "data" / "wiki_AAPL_FB_GOOG_IBM_MSFT_daily.csv",
        "Date",
        "%Y-%m-%d",
        ticker="MSFT",
        adjust=True,
    ),
    Case(
        "EURUSD hourly",
        REPO.parent / "shared" / "data" / "gymanytrading_EURUSD_1h_ask.csv",
        "Time",
        "%d.%m.%Y %H:%M:%S.%f",
    ),
)


def reference_load(case: Case) -> np.ndarray:
    """OHLCV [T, 5] float64 of `case`, read the way its layout is known to be."""
    frame = pd.read_csv(case.path, parse_dates=[case.date_column], date_format=case.date_format)
    if case.ticker is not None:
        frame = frame[frame["Ticker"] == case.ticker]
    ohlcv = frame[["Open", "High", "Low", "Close", "Volume"]].to_numpy(np.float64)
    if case.adjust:
        factor = frame["Adj Close"].to_numpy() / frame["Close"].to_numpy()  # [T]
        ohlcv[:, :4] *= factor[:, None]  # prices scale with the split factor,
        ohlcv[:, 4] /= factor  # volume inversely
    return ohlcv


def our_load(case: Case) -> MarketData:
    """`case` through `load_market_data` (its notes, such as dropped rows, silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_market_data(case.path, ticker=case.ticker, adjust=case.adjust)


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    """Median wall time of `run()` over `repeats` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed runs of each loader")
    args = parser.parse_args()
    print(f"machine: {cpu_model()}; median of {args.repeats} runs each")
    print(f"{'file':<28} {'bars':>7} {'pandas, layout known':>21} {'load_market_data':>17} ratio")
    for case in CASES:
        if not case.path.is_file():
            print(f"{case.name:<28} skipped: {case.path} is not here")
            continue
        market = our_load(case)
        ours = np.column_stack([market.ohlc, market.volume])
        np.testing.assert_allclose(ours, reference_load(case), rtol=1e-12)  # the same bars
        reference = median_seconds(lambda case=case: reference_load(case), args.repeats)
        loader = median_seconds(lambda case=case: our_load(case), args.repeats)
        print(
            f"{case.name:<28} {len(market):>7,} {reference * 1e3:>18.1f} ms "
            f"{loader * 1e3:>14.1f} ms {loader / reference:5.2f}x"
        )


if __name__ == "__main__":
    main()
