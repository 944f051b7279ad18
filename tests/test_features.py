"""compute_features: shapes, hand-computed values, no NaN/inf, and no look-ahead."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.features import (
    CLIP,
    FEATURE_NAMES,
    compute_features,
    feature_names,
    volatility_scale,
)
from envs.market_data import MarketData, load_market_data

REAL = [
    "arch_SP500_index_daily.csv",
    "gymanytrading_EURUSD_1h_ask.csv",
    "gymanytrading_GOOGL_daily.csv",
]


def market_of(open_, high, low, close, volume=None) -> MarketData:
    n = len(close)
    return MarketData(
        source="<test>",
        ticker=None,
        timestamps=np.datetime64("2021-01-04", "ns") + np.arange(n) * np.timedelta64(1, "h"),
        open=open_,
        high=high,
        low=low,
        close=close,
        volume=np.zeros(n) if volume is None else volume,
    )


def market_from_closes(close: np.ndarray, volume: np.ndarray | None = None) -> MarketData:
    """Bars that open at the previous close and range 1% around open and close."""
    close = np.asarray(close, dtype=np.float64)
    open_ = np.concatenate([close[:1], close[:-1]])
    high = np.maximum(open_, close) * 1.01
    low = np.minimum(open_, close) * 0.99
    return market_of(open_, high, low, close, volume)


@pytest.mark.parametrize("name", REAL)
def test_real_files(shared_data_dir, name):
    features = compute_features(load_market_data(shared_data_dir / name), norm_window=64)
    assert features.dtype == np.float32 and features.flags.c_contiguous
    assert features.shape[1] == len(FEATURE_NAMES) == 7
    assert np.isfinite(features).all() and (np.abs(features) <= CLIP).all()
    close_return = features[64:, 0]
    assert 0.7 < close_return.std() < 1.3  # scaled by its own causal volatility
    assert abs(features[64:, 4].mean()) < 0.5  # a rolling z-score
    annual = np.exp(np.median(features[64:, 5]))  # the annualised volatility level
    assert 0.04 < annual < 0.4  # stocks, an index and EUR/USD: 5% to 35% a year
    assert abs(np.median(features[256:, 6])) < 0.3  # recent vol against 4x as long a past


def test_wiki_split_days_stand_out(data_dir):
    market = load_market_data(data_dir / "wiki_AAPL_FB_GOOG_IBM_MSFT_daily.csv", ticker="AAPL")
    features = compute_features(market)
    assert np.isfinite(features).all()
    split_day = int(np.searchsorted(market.timestamps, np.datetime64("2000-06-21")))
    assert features[split_day, 0] < -6  # the unadjusted 2:1 split


def test_hand_computed_values():
    market = market_of(
        open_=[100.0, 101.0, 99.0],
        high=[102.0, 103.0, 100.0],
        low=[99.0, 100.0, 97.0],
        close=[101.0, 102.0, 98.0],
        volume=[0.0, 10.0, 100.0],
    )
    features = compute_features(market, norm_window=2)
    raw = np.log(
        [
            [101 / 100, 100 / 100, 102 / 100, 99 / 100],  # bar 0: previous close := open
            [102 / 101, 101 / 101, 103 / 101, 100 / 101],
            [98 / 102, 99 / 102, 100 / 102, 97 / 102],
        ]
    )
    squares = raw[:, 0] ** 2
    volatility = np.sqrt([squares[0], squares[:2].mean(), squares[1:].mean()])  # window 2
    np.testing.assert_allclose(features[:, :4], raw / volatility[:, None], rtol=1e-6)
    zscores = [0.0, 1.0, 1.0]  # of two values, the larger is +1 standard deviation (ddof=0)
    np.testing.assert_allclose(features[:, 4], zscores, rtol=1e-6)
    bars_per_year = 2 / (2 / (365.25 * 24))  # 3 hourly bars: 2 steps over 2 hours
    np.testing.assert_allclose(
        features[:, 5], np.log(volatility * np.sqrt(bars_per_year)), rtol=1e-6
    )
    long_volatility = np.sqrt(np.cumsum(squares) / np.arange(1, 4))  # window 8: every bar so far
    np.testing.assert_allclose(features[:, 6], np.log(volatility / long_volatility), atol=1e-6)
    assert features[0, 1] == 0.0  # the first bar opens at its own "previous close"


def test_the_volatility_scale_sizes_by_the_volatility_over_its_window():
    """min(1, target / annualised vol_t), vol_t by hand: over the same window, the `volatility`
    feature's level."""
    closes = [100.0, 101.0, 99.0, 120.0, 121.0]
    market = market_from_closes(np.array(closes))
    bars_per_year = 252.0
    squares = np.log(np.array(closes) / np.array(closes[:1] + closes[:-1])) ** 2
    mean_squares = [squares[0], squares[:2].mean(), *(squares[i : i + 2].mean() for i in (1, 2, 3))]
    volatility = np.maximum(np.sqrt(mean_squares), 1e-4)  # bar 0: c_{-1} := o_0, the floor
    annual = volatility * np.sqrt(bars_per_year)
    scale = volatility_scale(market, 2, bars_per_year, 0.1)
    np.testing.assert_allclose(scale, np.minimum(1.0, 0.1 / annual), rtol=1e-12)
    assert scale[0] == 1.0 and scale[3] < scale[1] < 1.0  # the jump to 120 sizes down most
    level = np.exp(compute_features(market, 2, bars_per_year)[:, 5])  # float32 feature
    np.testing.assert_allclose(scale[1:], 0.1 / level[1:], rtol=1e-6)
    np.testing.assert_array_equal(volatility_scale(market, 2, bars_per_year, None), np.ones(5))


def test_momentum_hand_computed():
    """momentum_h = log(c_t / c_{t-h}) / (vol_t sqrt(n)), n = bars covered (c_{-1} := o_0)."""
    market = market_of(
        open_=[100.0, 101.0, 99.0, 98.0],
        high=[102.0, 103.0, 100.0, 99.0],
        low=[99.0, 100.0, 97.0, 96.0],
        close=[101.0, 102.0, 98.0, 97.0],
    )
    features = compute_features(market, norm_window=2, momentum_horizons=(1, 2, 8))
    assert features.shape == (4, len(FEATURE_NAMES) + 3)
    close = np.array([100.0, 101.0, 102.0, 98.0, 97.0])  # c_{-1} := o_0, then the closes
    squares = np.log(close[1:] / close[:-1]) ** 2
    volatility = np.sqrt([squares[0], *(squares[i - 1 : i + 1].mean() for i in (1, 2, 3))])
    t = np.arange(4)
    for column, h in enumerate((1, 2, 8), start=len(FEATURE_NAMES)):
        n = np.minimum(h, t + 1)
        expected = np.log(close[t + 1] / close[t + 1 - n]) / (volatility * np.sqrt(n))
        np.testing.assert_allclose(features[:, column], expected, rtol=1e-6)
    # A one-bar momentum is the close return itself.
    np.testing.assert_allclose(features[:, len(FEATURE_NAMES)], features[:, 0], rtol=1e-6)


def test_momentum_reads_a_trend_the_window_cannot_hold():
    """A drift of ~3 noise-sds per 256 bars: momentum_256 finds it, one bar's return does not."""
    rng = np.random.default_rng(1)
    up = 100 * np.exp(np.cumsum(rng.normal(0.002, 0.01, 1500)))
    down = 100 * np.exp(np.cumsum(rng.normal(-0.002, 0.01, 1500)))
    up_features, down_features = (
        compute_features(market_from_closes(c), momentum_horizons=(256,))[400:] for c in (up, down)
    )
    assert np.median(up_features[:, -1]) > 2 > -2 > np.median(down_features[:, -1])  # ~ +-3.2
    assert abs(np.median(up_features[:, 0]) - np.median(down_features[:, 0])) < 0.5


def test_feature_names_follow_the_momentum_horizons():
    assert feature_names() == FEATURE_NAMES
    assert feature_names((5, 20)) == (*FEATURE_NAMES, "momentum_5", "momentum_20")
    with pytest.raises(ValueError, match="momentum horizons must be >= 1"):
        compute_features(market_from_closes(np.ones(5)), momentum_horizons=(0,))


def test_flat_prices_and_zero_volume_give_zeros():
    features = compute_features(market_of(*[np.full(50, 7.0)] * 4), norm_window=10)
    np.testing.assert_array_equal(features[:, :5], np.zeros((50, 5), dtype=np.float32))
    floor = np.log(np.float32(1e-4 * np.sqrt(365.25 * 24)))  # the volatility floor, annualised
    np.testing.assert_allclose(features[:, 5], floor, rtol=1e-6)
    np.testing.assert_array_equal(features[:, 6], 0.0)


def test_the_volatility_level_tells_calm_from_turbulent_spells():
    """The scaled returns look alike in both spells; the level differs by the vol ratio."""
    rng = np.random.default_rng(0)
    returns = np.concatenate([rng.normal(0, 0.01, 300), rng.normal(0, 0.03, 300)])
    features = compute_features(market_from_closes(100 * np.exp(np.cumsum(returns))))
    calm, turbulent = features[200:300], features[500:600]
    assert abs(calm[:, 0].std() - turbulent[:, 0].std()) < 0.2  # scaled returns: alike
    level_gap = np.median(turbulent[:, 5]) - np.median(calm[:, 5])
    assert 0.8 < level_gap < 1.4  # log(3%) - log(1%) = 1.10, give or take sampling noise
    assert features[340:380, 6].mean() > 0.4  # vol rising against the longer past


def test_constant_volume_gives_zero_zscore():
    market = market_from_closes(np.linspace(10, 20, 100), volume=np.full(100, 12345.0))
    np.testing.assert_allclose(compute_features(market, norm_window=16)[:, 4], 0.0, atol=1e-6)


def test_a_jump_is_bounded_by_the_window_it_sits_in():
    """The volatility window includes the bar, so |close_return| <= sqrt(norm_window)."""
    close = np.concatenate([100 * 1.0001 ** np.arange(30), [1000.0, 1000.5]])
    features = compute_features(market_from_closes(close), norm_window=8)
    assert np.sqrt(8) * 0.999 < features[30, 0] <= np.sqrt(8)


def test_wicks_are_clipped():
    close = 100 * 1.001 ** np.arange(40)
    market = market_from_closes(close)
    high = market.high.copy()
    high[35] = 1000.0
    features = compute_features(market_of(market.open, high, market.low, close), norm_window=8)
    assert features[35, 2] == CLIP and np.isfinite(features).all()


def test_norm_window_must_be_at_least_two():
    with pytest.raises(ValueError, match="norm_window must be >= 2, got 1"):
        compute_features(market_from_closes(np.ones(5)), norm_window=1)


prices = st.floats(min_value=0.01, max_value=1e4, allow_nan=False, allow_infinity=False)
volumes = st.floats(min_value=0.0, max_value=1e9, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(
    closes=st.lists(prices, min_size=2, max_size=60),
    volume=st.lists(volumes, min_size=60, max_size=60),
    changed=st.lists(prices, min_size=60, max_size=60),
    cut=st.integers(min_value=0, max_value=58),
    norm_window=st.integers(min_value=2, max_value=20),
    horizons=st.lists(st.integers(min_value=1, max_value=70), max_size=3, unique=True),
)
def test_no_look_ahead(closes, volume, changed, cut, norm_window, horizons):
    """Changing every bar after ``cut`` changes no feature row <= ``cut``."""
    n = len(closes)
    cut = min(cut, n - 2)
    base = market_from_closes(np.array(closes), np.array(volume[:n]))
    new_closes = np.array(closes[: cut + 1] + changed[: n - cut - 1])
    new_volume = np.concatenate([volume[: cut + 1], np.array(changed[: n - cut - 1]) * 7])
    other = market_from_closes(new_closes, new_volume)
    before = compute_features(base, norm_window, momentum_horizons=tuple(horizons))
    after = compute_features(other, norm_window, momentum_horizons=tuple(horizons))
    np.testing.assert_array_equal(before[: cut + 1], after[: cut + 1])
    assert np.isfinite(before).all() and np.isfinite(after).all()
    scales = [volatility_scale(market, norm_window, 252.0, 0.2) for market in (base, other)]
    np.testing.assert_array_equal(scales[0][: cut + 1], scales[1][: cut + 1])
