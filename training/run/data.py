"""The market data of a run, loaded and split as its config says."""

from __future__ import annotations

from pathlib import Path

from envs import MarketData, load_market_data
from envs.splits import Splits, chronological_split
from training.config import DataConfig, RunConfig


def load_run_market(cfg: RunConfig, path: str | Path | None = None) -> MarketData:
    """The bars of `path` (default: the config's `data.path`) with the run's loader settings.

    At least one window plus one step of bars is required (`env.window + 1`).
    """
    return load_market_data(
        cfg.data.resolved_path() if path is None else path,
        ticker=cfg.data.ticker,
        adjust=cfg.data.adjust,
        min_rows=cfg.env.window + 1,
    )


def split_run_market(market: MarketData, data: DataConfig) -> Splits:
    """Chronological train / validation / test ranges of `market`, by fraction or by date."""
    return chronological_split(
        market,
        validation=data.validation,
        test=data.test,
        validation_start=data.validation_start,
        test_start=data.test_start,
    )
