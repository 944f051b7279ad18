"""Training on several instruments: a stacked `TradingCore` keeps every episode inside one range."""

from dataclasses import replace

import numpy as np
import pytest

from envs import BatchedTradingEnv, EnvConfig, TradingEnv
from envs import execution as ex
from envs.core import TradingCore
from envs.market_data import DataError, load_market_data

CONFIG = EnvConfig(window=16, episode_length=40)


@pytest.fixture(scope="module")
def parts(data_dir):
    wiki = data_dir / "wiki_AAPL_FB_GOOG_IBM_MSFT_daily.csv"
    aapl = load_market_data(wiki, ticker="AAPL")
    fb = load_market_data(wiki, ticker="FB")
    googl = load_market_data(data_dir / "gymanytrading_GOOGL_daily.csv")
    return [(aapl, range(0, 600)), (fb, range(0, 196)), (googl, range(1000, 1300))]


def test_episodes_stay_inside_their_instrument_range(parts):
    core = TradingCore.stacked(parts, CONFIG)
    env = BatchedTradingEnv(core, n_envs=32)
    env.seed(0)
    obs = env.reset()
    rng = np.random.default_rng(0)
    offsets = np.cumsum([0] + [len(market) for market, _ in parts])
    seen = np.zeros(len(parts), dtype=int)
    for _ in range(400):
        accounts = env._accounts
        ranges = np.searchsorted(offsets, accounts.bars, side="right") - 1  # [N]
        seen += np.bincount(ranges, minlength=len(parts))
        for i, k in enumerate(ranges):
            market, bars = parts[k]
            local = accounts.bars[i] - offsets[k]
            assert max(bars.start, CONFIG.window - 1) <= local < bars.stop - 1
            # The observed window is that instrument's own, as a single-range core gives it (with
            # the stacked core's common bars per year, which annualises `volatility`).
            single = TradingCore(market, replace(CONFIG, bars_per_year=core.bars_per_year), bars)
            np.testing.assert_array_equal(obs["market"][i], single.market_window(local))
            assert accounts.state[i, ex.END_BAR] == offsets[k] + bars.stop - 1
        obs, _, _, _ = env.step(rng.integers(0, [3, 4, 4], size=(32, 3)))
    assert (seen > 0).all()


def test_ranges_are_drawn_in_proportion_to_their_possible_starts(parts):
    core = TradingCore.stacked(parts, CONFIG)
    rng = np.random.default_rng(1)
    starts = np.array([core.draw_start(rng) for _ in range(6000)])
    counts = np.histogram(starts, bins=[*core.first_bars, len(core.ohlc)])[0]
    possible = np.array([600 - 16 - 40 + 1, 196 - 16 - 40 + 1, 300 - 40])  # per range
    np.testing.assert_allclose(counts / counts.sum(), possible / possible.sum(), atol=0.02)


def test_an_episode_of_a_short_range_ends_with_the_range(parts):
    market, _ = parts[1]
    core = TradingCore.stacked([(market, range(0, 30))], EnvConfig(window=16, episode_length=40))
    assert core.episode_length == 30 - 1 - 15  # the whole range: 14 steps
    env = BatchedTradingEnv(core, n_envs=1)
    env.reset()
    dones = [env.step(np.array([[2, 0, 3]]))[2][0] for _ in range(core.episode_length)]
    assert dones[-1] and not any(dones[:-1])


def test_one_range_stacked_equals_the_single_core(parts):
    market, bars = parts[2]
    single = BatchedTradingEnv(market, CONFIG, n_envs=4, bars=bars)
    stacked = BatchedTradingEnv(TradingCore.stacked([(market, bars)], CONFIG), n_envs=4)
    for env in (single, stacked):
        env.seed(3)
    a, b = single.reset(), stacked.reset()
    rng = np.random.default_rng(2)
    for _ in range(100):
        np.testing.assert_array_equal(a["market"], b["market"])
        np.testing.assert_array_equal(a["account"], b["account"])
        actions = rng.integers(0, [3, 4, 4], size=(4, 3))
        a, ra, da, _ = single.step(actions)
        b, rb, db, _ = stacked.step(actions)
        np.testing.assert_array_equal(ra, rb)
        np.testing.assert_array_equal(da, db)


def test_bars_of_different_frequencies_are_refused(data_dir, shared_data_dir):
    googl = load_market_data(data_dir / "gymanytrading_GOOGL_daily.csv")
    eurusd = load_market_data(shared_data_dir / "gymanytrading_EURUSD_1h_ask.csv")
    with pytest.raises(DataError, match="instruments trained together need bars of one frequency"):
        TradingCore.stacked([(googl, range(len(googl))), (eurusd, range(len(eurusd)))], CONFIG)


def test_a_stacked_core_has_no_single_range_attributes(parts):
    core = TradingCore.stacked(parts, CONFIG)
    with pytest.raises(AttributeError, match="a core over 3 ranges has no single market"):
        _ = core.market
    assert TradingEnv(parts[0][0], CONFIG).core.first_bar == 15
