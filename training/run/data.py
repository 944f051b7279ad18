"""The market data of a run: its instruments, loaded and split by calendar date as its config says.

A run trains on one or several instruments: `data.path` names CSV files or globs, and every ticker
of a multi-ticker file takes part unless `data.ticker` picks some. All of them split on one
calendar (`envs.splits.split_calendar`): the same validation and test dates for every instrument.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from envs import MarketData, load_market_data
from envs.market_data import DataError, has_adjusted_close, load_instruments
from envs.splits import CalendarSplit, Splits, chronological_split, split_calendar
from training.config import REPO_ROOT, DataConfig, RunConfig

_GLOB_CHARACTERS = "*?["


def data_files(data: DataConfig) -> list[Path]:
    """The CSV files `data.path` names, in order: each glob expanded (sorted), duplicates dropped.

    Relative paths are taken from the repository root. A glob that matches nothing is a
    `DataError` naming it; a missing plain path is left for the loader to report.
    """
    files: list[Path] = []
    for entry in data.paths:
        path = Path(entry).expanduser()
        path = path if path.is_absolute() else REPO_ROOT / path
        if any(char in entry for char in _GLOB_CHARACTERS):
            matches = sorted(Path(p) for p in glob.glob(str(path)) if Path(p).is_file())
            if not matches:
                raise DataError(f"data.path: {entry} matches no file")
            files.extend(matches)
        else:
            files.append(path)
    return list(dict.fromkeys(files))


def instrument_name(market: MarketData) -> str:
    """How reports name an instrument: its ticker, or its file's stem when the file has none."""
    return market.ticker or Path(market.source).stem


def load_run_markets(cfg: RunConfig) -> list[MarketData]:
    """Every instrument of the run, in file order (a multi-ticker file in its tickers' order).

    `data.ticker` None takes every ticker; a name or a list takes those (each must be in some
    file; files without a ticker column then take no part). With several files, `data.adjust`
    applies to the files that have an adjusted close and the others are used as they are (one
    warning names them). At least `env.window + 1` bars per instrument. Raises `DataError` (one
    line) for unusable data or duplicate names.
    """
    files = data_files(cfg.data)
    wanted = cfg.data.tickers
    markets: list[MarketData] = []
    unadjusted: list[str] = []
    for path in files:
        # one file: data.adjust is asked of that file, and a missing adjusted close is an error
        adjust = cfg.data.adjust and (len(files) == 1 or _has_adjusted_close(path, unadjusted))
        tickers = wanted if len(files) == 1 else None  # several files: picked below
        markets.extend(
            load_instruments(path, tickers=tickers, adjust=adjust, min_rows=cfg.env.window + 1)
        )
    _warn_unadjusted(unadjusted)
    if wanted is not None and len(files) > 1:
        markets = _pick(markets, wanted)
    _check_names(markets)
    return markets


def _pick(markets: list[MarketData], wanted: Sequence[str]) -> list[MarketData]:
    """The instruments named in `wanted` (tickers, matched ignoring case), in `wanted`'s order."""
    by_ticker = {(m.ticker or "").upper(): m for m in markets if m.ticker}
    missing = [name for name in wanted if name.strip().upper() not in by_ticker]
    if missing:
        raise DataError(
            f"data.ticker: {', '.join(missing)} not found; tickers present: "
            f"{', '.join(sorted(m.ticker for m in by_ticker.values() if m.ticker))}"
        )
    return [by_ticker[name.strip().upper()] for name in wanted]


def _check_names(markets: Sequence[MarketData]) -> None:
    seen: dict[str, str] = {}
    for market in markets:
        name = instrument_name(market)
        if name in seen:
            raise DataError(
                f"{market.source}: instrument {name} is also in {seen[name]}; pick one with "
                "data.ticker or data.path"
            )
        seen[name] = market.source


def load_run_market(
    cfg: RunConfig,
    path: str | Path | None = None,
    *,
    ticker: str | None = None,
    adjust: bool | None = None,
) -> MarketData:
    """One instrument with the run's loader settings: of `path`, or the run's first instrument.

    With `path`, its instrument `ticker`; None takes the run's `data.ticker` when that names one
    ticker (else the file must hold one). `adjust` None applies the run's `data.adjust` as a run
    of several files does: to a file with an adjusted close, while a file without one is used as
    it is, with a warning (a model trained on the bundled universe, KO's file among them, then
    backtests on any of its files); True or False is the caller's explicit choice, and True on a
    file without an adjusted close is a `DataError`. At least `env.window + 1` bars.
    """
    if path is None:
        return load_run_markets(cfg)[0]
    if ticker is None and isinstance(cfg.data.ticker, str):
        ticker = cfg.data.ticker
    if adjust is None:
        unadjusted: list[str] = []
        adjust = cfg.data.adjust and _has_adjusted_close(Path(path), unadjusted)
        _warn_unadjusted(unadjusted)
    return load_market_data(path, ticker=ticker, adjust=adjust, min_rows=cfg.env.window + 1)


def _has_adjusted_close(path: Path, unadjusted: list[str]) -> bool:
    """Whether `path` has an adjusted close; if not, its name is appended to `unadjusted`."""
    if path.is_file() and not has_adjusted_close(path):
        unadjusted.append(path.name)
        return False
    return True  # a missing file is left for the loader to report


def _warn_unadjusted(names: Sequence[str]) -> None:
    """One warning naming the files `data.adjust` could not adjust (none: no warning)."""
    if names:
        warnings.warn(
            f"data.adjust: no adjusted close in {', '.join(names)}; used as they are",
            stacklevel=3,
        )


def split_run_market(market: MarketData, data: DataConfig) -> Splits:
    """Chronological train / validation / test ranges of one `market`, by fraction or by date."""
    return chronological_split(
        market,
        validation=data.validation,
        test=data.test,
        validation_start=data.validation_start,
        test_start=data.test_start,
    )


def recorded_splits(
    splits_json: Path, market: MarketData, data: DataConfig | None = None
) -> Splits:
    """`market`'s train / validation / test ranges by a run's calendar split dates.

    The dates come from the run's `splits.json` (written when it trained); without one, the run
    split `market` alone as its `data` config says (`split_run_market`). For any instrument, the
    run's own or another, the ranges are then the bars before, between and after the run's dates.
    """
    if not splits_json.is_file():
        if data is None:
            raise ValueError(f"{splits_json} is missing and no data config was given")
        return split_run_market(market, data)
    recorded = json.loads(splits_json.read_text())

    def position(key: str) -> int:
        date = recorded[key]
        return len(market) if date is None else market.bar_position(pd.Timestamp(date))

    validation, test = position("validation_start"), position("test_start")
    return Splits(range(0, validation), range(validation, test), range(test, len(market)))


def split_run(markets: Sequence[MarketData], data: DataConfig) -> CalendarSplit:
    """The run's calendar split of its instruments: the same dates for all (`split_calendar`)."""
    return split_calendar(
        markets,
        validation=data.validation,
        test=data.test,
        validation_start=data.validation_start,
        test_start=data.test_start,
    )


def decisions_in(bars: range, window: int) -> int:
    """How many decisions a run takes on `bars` of a market: from the first bar a window of
    history fits before (bars before the range serve as history) to the one before the last,
    whose next bar fills the last order."""
    return bars.stop - 1 - max(bars.start, window - 1)


@dataclass(frozen=True)
class RunData:
    """A run's instruments and their calendar split, with the ranges each phase uses."""

    markets: tuple[MarketData, ...]
    split: CalendarSplit

    @classmethod
    def load(cls, cfg: RunConfig) -> RunData:
        """Load and split the run's instruments."""
        markets = load_run_markets(cfg)
        return cls(tuple(markets), split_run(markets, cfg.data))

    def ranges(self, phase: str, min_steps: int, window: int) -> list[tuple[MarketData, range]]:
        """(market, bars) of every instrument with at least `min_steps` decisions in `phase`.

        `phase` is "train", "validation" or "test". A range's decisions start once a window of
        history fits (bars before the range serve as history), so an instrument whose range
        starts with its listing loses its first `window - 1` bars.
        """
        found = []
        for market, splits in zip(self.markets, self.split.splits, strict=True):
            bars: range = getattr(splits, phase)
            if decisions_in(bars, window) >= min_steps:
                found.append((market, bars))
        return found

    def bars_per_year(self, window: int) -> float:
        """The observed bars per year of the training ranges: the median over the instruments of
        (bars - 1) / their span in years. What a run fixes `env.bars_per_year` to
        (`with_bars_per_year`): the training bars alone say it, and every env of the run then
        annualises costs and the volatility feature alike."""
        observed = [
            market.slice(bars.start, bars.stop).bars_per_year()
            for market, bars in self.ranges("train", 1, window)
            if len(bars) >= 2
        ]
        if not observed:
            raise DataError("no instrument has two training bars to tell the bars per year")
        return float(np.median(observed))

    def to_dict(self) -> dict[str, Any]:
        """What `splits.json` records: the split dates and each instrument's source and ticker."""

        def date(value: np.datetime64 | None) -> str | None:
            return None if value is None else str(pd.Timestamp(value))

        return {
            "validation_start": date(self.split.validation_start),
            "test_start": date(self.split.test_start),
            "instruments": [{"source": m.source, "ticker": m.ticker} for m in self.markets],
        }

    def describe(self) -> str:
        """One line per phase: its dates and its instruments' bar counts, for the terminal."""
        lines = []
        for phase in ("train", "validation", "test"):
            counts = [
                (instrument_name(m), len(getattr(s, phase)))
                for m, s in zip(self.markets, self.split.splits, strict=True)
            ]
            used = [f"{name} {n:,}" for name, n in counts if n]
            total = sum(n for _, n in counts)
            lines.append(f"  {phase:<10} {total:>7,} bars: {', '.join(used) or 'none'}")
        return "\n".join(lines)


def with_bars_per_year(cfg: RunConfig, data: RunData) -> RunConfig:
    """`cfg` with `env.bars_per_year` fixed from `data`'s training bars when it is null.

    A run resolves it once, before its config is saved, so that training, validation, the test
    backtest and any later backtest of the run annualise alike (financing and borrow per bar,
    the `volatility` feature, the metrics), whatever data they trade.
    """
    if cfg.env.bars_per_year is not None:
        return cfg
    env = dataclasses.replace(cfg.env, bars_per_year=data.bars_per_year(cfg.env.window))
    return dataclasses.replace(cfg, env=env)
