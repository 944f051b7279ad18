"""A run's instruments: files and globs, every ticker, picked tickers, one calendar split."""

import warnings

import numpy as np
import pytest

from envs.market_data import DataError
from training.config import DEFAULT_CONFIG_PATH, load_config
from training.run.data import (
    RunData,
    data_files,
    instrument_name,
    load_run_market,
    load_run_markets,
)

WIKI = "data/wiki_AAPL_FB_GOOG_IBM_MSFT_daily.csv"
GOOGL = "data/gymanytrading_GOOGL_daily.csv"


def test_the_default_config_trains_on_every_bundled_instrument():
    cfg = load_config(DEFAULT_CONFIG_PATH)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        markets = load_run_markets(cfg)
    names = [instrument_name(m) for m in markets]
    assert len(names) == len(set(names)) == 12
    assert {"AAPL", "FB", "GOOG", "IBM", "MSFT", "AMZN", "NFLX", "NVDA"} <= set(names)
    # KO's file has no adjusted close: used as it is, and one warning says so
    assert any("no adjusted close in zipline_KO_daily.csv" in str(w.message) for w in caught)
    wiki_aapl = next(m for m in markets if m.ticker == "AAPL")
    split_day = int(np.searchsorted(wiki_aapl.timestamps, np.datetime64("2000-06-21")))
    assert wiki_aapl.close[split_day] / wiki_aapl.close[split_day - 1] > 0.8  # split adjusted


def test_one_file_of_an_adjusted_run_is_adjusted_where_it_can_be():
    # A model of the default run (data.adjust: true) meets KO's file, which has no adjusted
    # close, in a backtest: used as it is, with the warning the run gave; WIKI's is adjusted.
    cfg = load_config(DEFAULT_CONFIG_PATH)
    with pytest.warns(UserWarning, match=r"no adjusted close in zipline_KO_daily\.csv"):
        ko = load_run_market(cfg, "data/zipline_KO_daily.csv")
    assert len(ko.close) == 754  # 2012-2014
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        aapl = load_run_market(cfg, WIKI, ticker="AAPL")
    split_day = int(np.searchsorted(aapl.timestamps, np.datetime64("2000-06-21")))
    assert aapl.close[split_day] / aapl.close[split_day - 1] > 0.8  # split adjusted
    with pytest.raises(DataError, match=r"missing column Adj Close \(adjust=True needs it\)"):
        load_run_market(cfg, "data/zipline_KO_daily.csv", adjust=True)  # asked for explicitly
    single = load_config(None, ["data.path=data/zipline_KO_daily.csv", "data.adjust=true"])
    with pytest.raises(DataError, match=r"missing column Adj Close"):
        load_run_markets(single)  # a run of one file asks it of that file


def test_tickers_are_picked_across_files_in_the_order_given():
    cfg = load_config(None, [f"data.path=[{GOOGL}, {WIKI}]", "data.ticker=[ibm, AAPL]"])
    assert [m.ticker for m in load_run_markets(cfg)] == ["IBM", "AAPL"]
    missing = load_config(None, [f"data.path=[{GOOGL}, {WIKI}]", "data.ticker=[XYZ]"])
    with pytest.raises(DataError, match=r"data\.ticker: XYZ not found; tickers present: AAPL, FB"):
        load_run_markets(missing)


def test_a_glob_matching_nothing_is_one_line():
    cfg = load_config(None, ["data.path=data/nothing*.csv"])
    with pytest.raises(DataError, match=r"data\.path: data/nothing\*\.csv matches no file"):
        data_files(cfg.data)


def test_phases_take_the_instruments_with_enough_decisions():
    cfg = load_config(None, [f"data.path={WIKI}"])  # all five tickers, 2000-2013
    data = RunData.load(cfg)
    test = dict((instrument_name(m), len(bars)) for m, bars in data.ranges("test", 20, 16))
    assert set(test) == {"AAPL", "FB", "GOOG", "IBM", "MSFT"}  # one calendar: all end in 2013
    assert test.pop("FB") == 196  # listed 2012-05-18, inside the test dates: all its bars test
    assert len(set(test.values())) == 1  # the same dates for every other instrument
    assert data.ranges("test", 10_000, 16) == []
    recorded = data.to_dict()
    assert recorded["test_start"] < "2013" and len(recorded["instruments"]) == 5
