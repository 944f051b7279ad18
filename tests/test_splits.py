"""chronological_split and split_calendar: fractions, dates, the partition property, one calendar
for several instruments, and parameter errors."""

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from envs.market_data import DataError, load_market_data
from envs.splits import Splits, chronological_split, split_calendar


@pytest.fixture(scope="module")
def googl(data_dir):
    return load_market_data(data_dir / "gymanytrading_GOOGL_daily.csv")


def assert_partition(splits: Splits, n: int) -> None:
    assert splits.train.start == 0
    assert splits.train.stop == splits.validation.start
    assert splits.validation.stop == splits.test.start
    assert splits.test.stop == n
    assert all(part.step == 1 for part in (splits.train, splits.validation, splits.test))


def test_default_fractions(googl):
    splits = chronological_split(googl)
    assert splits == Splits(
        train=range(0, 1635), validation=range(1635, 1985), test=range(1985, 2335)
    )
    assert_partition(splits, len(googl))


def test_by_date_starts_at_the_first_bar_on_or_after(googl):
    splits = chronological_split(googl, validation_start="2016-01-02", test_start="2017-01-01")
    assert_partition(splits, len(googl))
    assert str(googl.timestamps[splits.validation.start])[:10] == "2016-01-04"  # Jan 2-3: weekend
    assert str(googl.timestamps[splits.validation.start - 1])[:10] == "2015-12-31"
    assert str(googl.timestamps[splits.test.start])[:10] == "2017-01-03"  # Jan 2: holiday


def test_dates_and_fractions_mix(googl):
    splits = chronological_split(googl, test_start="2017-01-03", validation=0.1)
    assert len(splits.validation) == round(0.1 * len(googl))
    assert str(googl.timestamps[splits.test.start])[:10] == "2017-01-03"


def test_zone_aware_dates_are_read_in_utc(googl):
    splits = chronological_split(googl, test_start="2017-01-03T01:00+02:00")  # Jan 2, 23:00 UTC
    assert str(googl.timestamps[splits.test.start])[:10] == "2017-01-03"


def test_empty_segments_when_not_asked_for(googl):
    splits = chronological_split(googl, validation=0.0, test=0.0)
    assert splits.train == range(0, len(googl))
    assert len(splits.validation) == 0 and len(splits.test) == 0


@given(
    n=st.integers(min_value=50, max_value=2335),
    validation=st.floats(min_value=0.0, max_value=0.45),
    test=st.floats(min_value=0.0, max_value=0.45),
)
def test_fractions_always_partition(googl, n, validation, test):
    assume(all(fraction == 0 or round(fraction * n) > 0 for fraction in (validation, test)))
    market = googl.slice(0, n)
    splits = chronological_split(market, validation=validation, test=test)
    assert_partition(splits, n)
    assert len(splits.test) == round(test * n)
    assert len(splits.validation) == round(validation * n)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"validation": -0.1}, ValueError, r"validation must be a fraction in \[0, 1\), got -0.1"),
        ({"test": 1.0}, ValueError, r"test must be a fraction in \[0, 1\), got 1.0"),
        ({"validation": 0.5, "test": 0.5}, ValueError, "validation \\+ test must be < 1"),
        ({"test_start": "soon"}, ValueError, "test_start must be a date"),
        ({"test_start": "2030-01-01"}, DataError, "test_start=2030-01-01 is outside the data"),
        ({"validation_start": "2001-01-01"}, DataError, "validation_start=2001-01-01 is outside"),
        (
            {"validation_start": "2018-01-02", "test_start": "2017-01-03"},
            DataError,
            "validation_start=2018-01-02 falls after the start of the test range",
        ),
        (
            {"validation_start": "2017-01-03", "test_start": "2017-01-02"},
            DataError,
            "validation_start leaves no validation bars",
        ),
        ({"validation_start": "2009-05-22"}, DataError, "no training bars left of 2335"),
    ],
)
def test_errors_name_the_parameter(googl, kwargs, error, message):
    with pytest.raises(error, match=message) as caught:
        chronological_split(googl, **kwargs)
    assert "\n" not in str(caught.value)


def test_too_few_bars_for_the_fractions(googl):
    with pytest.raises(DataError, match=r"test=0\.01 leaves no test bars of 10"):
        chronological_split(googl.slice(0, 10), validation=0.2, test=0.01)
    with pytest.raises(DataError, match=r"validation=0\.01 leaves no validation bars of 10"):
        chronological_split(googl.slice(0, 10), validation=0.01, test=0.2)


# --- several instruments: one calendar ----------------------------------------------------------


@pytest.fixture(scope="module")
def wiki(data_dir):
    path = data_dir / "wiki_AAPL_FB_GOOG_IBM_MSFT_daily.csv"
    return [load_market_data(path, ticker=t) for t in ("AAPL", "FB", "GOOG")]


def test_one_calendar_gives_every_instrument_the_same_boundary_dates(wiki, googl):
    markets = [*wiki, googl]  # AAPL 2000-2013, FB 2012-2013, GOOG 2004-2013, GOOGL 2009-2018
    split = split_calendar(markets)
    assert split.validation_start is not None and split.test_start is not None
    for market, splits in zip(markets, split.splits, strict=True):
        assert_partition(splits, len(market))
        times = market.timestamps
        # No instrument's test (or validation) dates fall inside any training range.
        assert all(times[i] < split.validation_start for i in splits.train)
        assert all(split.validation_start <= times[i] < split.test_start for i in splits.validation)
        assert all(times[i] >= split.test_start for i in splits.test)
    # The calendar is the union of dates, 2000-03-01 .. 2018-08-29: validation starts 2013-02-14
    # and test 2015-11-20, where only GOOGL has bars; the wiki tickers end on 2013-03-01.
    assert str(split.validation_start)[:10] == "2013-02-14"
    assert str(split.test_start)[:10] == "2015-11-20"
    assert [(len(s.train), len(s.validation), len(s.test)) for s in split.splits] == [
        (3259, 11, 0),
        (185, 11, 0),
        (2137, 11, 0),
        (939, 698, 698),
    ]


def test_a_short_history_takes_part_only_where_it_has_bars(wiki):
    aapl, fb, _ = wiki
    split = split_calendar([aapl, fb], validation_start="2012-06-01", test_start="2012-10-01")
    fb_splits = split.splits[1]
    assert len(fb_splits.train) == int(
        (fb.timestamps < np.datetime64("2012-06-01")).sum()
    )  # FB listed 2012-05-18: a few training bars only
    assert len(fb_splits.validation) > 0 and len(fb_splits.test) > 0


def test_one_instrument_splits_as_before(googl):
    assert split_calendar([googl]).splits[0] == chronological_split(googl)


def test_calendar_dates_outside_the_union_are_refused(wiki):
    with pytest.raises(DataError, match="3 instruments: test_start=1990-01-01 is outside the data"):
        split_calendar(wiki, test_start="1990-01-01")
