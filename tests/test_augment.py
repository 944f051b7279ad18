"""Training-time augmentation: resampled paths made of real bars of the range only; fresh
noise on the market window, nothing else touched."""

import dataclasses

import numpy as np
import pytest

from envs import BatchedTradingEnv, EnvConfig, load_market_data
from envs.core import TradingCore
from training import train
from training.run import session
from training.run.augment import FeatureNoise, resampled_path


@pytest.fixture(scope="module")
def googl(data_dir):
    return load_market_data(data_dir / "gymanytrading_GOOGL_daily.csv")


def bar_shapes(market, start=1):
    """Per bar from `start`: gap from the previous close, high, low and close over the open."""
    o, h, lo, c = market.open, market.high, market.low, market.close
    return np.column_stack([o[start:] / c[start - 1 : -1], h[start:] / o[start:],
                            lo[start:] / o[start:], c[start:] / o[start:]])  # fmt: skip


def source_bars(path, market, bars):
    """Which bar of `bars` (1..len-1, as 0-based rows) each bar of `path` from 1 on is, found
    by its shape."""
    source = bar_shapes(market.slice(bars.start, bars.stop))  # [n - 1, 4]
    new = bar_shapes(path)  # [n - 1, 4]
    return np.array(
        [int(np.flatnonzero(np.all(np.isclose(source, row, rtol=1e-12), axis=1))[0]) for row in new]
    )


@pytest.mark.parametrize("method", ["permutation", "bootstrap"])
def test_a_resampled_path_is_made_of_blocks_of_the_ranges_own_bars(googl, method):
    bars = range(200, 1200)
    path = resampled_path(googl, bars, 50, np.random.default_rng(0), method)
    assert len(path) == len(bars)
    np.testing.assert_array_equal(path.timestamps, googl.timestamps[200:1200])
    where = source_bars(path, googl, bars)  # [999]; within a block, in order
    runs = np.flatnonzero(np.diff(where) != 1)  # where one block ends and the next begins
    assert len(bars) // 50 - 1 <= len(runs) <= len(bars) // 50  # 20 or 21 blocks, 999 bars
    assert not np.array_equal(where, np.arange(999))  # the order is new
    assert path.open[0] == googl.open[200] and path.close[0] == googl.close[200]
    assert np.all(path.high >= np.maximum(path.open, path.close))  # exactly: one scale a bar
    assert np.all(path.low <= np.minimum(path.open, path.close))


def test_a_permuted_path_uses_every_bar_once_and_ends_where_the_range_ends(googl):
    bars = range(200, 1200)
    paths = [
        resampled_path(googl, bars, 50, np.random.default_rng(s), "permutation") for s in (0, 1)
    ]
    for path in paths:
        np.testing.assert_array_equal(np.sort(source_bars(path, googl, bars)), np.arange(999))
        np.testing.assert_allclose(path.close[-1], googl.close[1199], rtol=1e-9)  # the same drift
    first, second = (np.flatnonzero(np.diff(source_bars(p, googl, bars)) != 1) for p in paths)
    assert not np.array_equal(first, second)  # the blocks are cut at a random offset


def test_a_bootstrap_path_draws_blocks_with_replacement(googl):
    bars = range(200, 1200)
    path = resampled_path(googl, bars, 50, np.random.default_rng(0), "bootstrap")
    assert len(np.unique(source_bars(path, googl, bars))) < 999  # some bars twice, some never


@pytest.mark.parametrize("method", ["permutation", "bootstrap"])
def test_a_resampled_path_reads_nothing_outside_its_range(googl, method):
    bars = range(300, 900)
    changed = dataclasses.replace(
        googl, close=np.where(np.arange(len(googl)) >= 900, 1.0, googl.close)
    )
    changed = dataclasses.replace(
        changed, open=np.where(np.arange(len(googl)) < 300, 1.0, googl.open)
    )
    one, two = (
        resampled_path(m, bars, 64, np.random.default_rng(3), method) for m in (googl, changed)
    )
    for name in ("open", "high", "low", "close", "volume"):
        np.testing.assert_array_equal(getattr(one, name), getattr(two, name))
    again = resampled_path(googl, bars, 64, np.random.default_rng(3), method)
    np.testing.assert_array_equal(one.close, again.close)  # seeded: the same path


@pytest.mark.parametrize("method", ["permutation", "bootstrap"])
def test_a_detrended_path_ends_at_its_start_and_keeps_every_bars_shape(googl, method):
    bars = range(200, 1200)  # GOOGL roughly doubled over these bars
    plain, half, flat = (
        resampled_path(googl, bars, 50, np.random.default_rng(4), method, detrend=d)
        for d in (0.0, 0.5, 1.0)
    )
    growth = np.log(plain.close[-1] / plain.close[0])  # the drift the plain copy shows
    assert abs(growth) > 0.3
    np.testing.assert_allclose(flat.close[-1], flat.close[0], rtol=1e-12)  # no drift left
    assert flat.open[0] == plain.open[0] and flat.close[0] == plain.close[0]
    # Each bar's high, low and close over its open are the plain copy's: shapes are kept...
    np.testing.assert_allclose(bar_shapes(flat)[:, 1:], bar_shapes(plain)[:, 1:], rtol=1e-12)
    # ...and each gap gives up the same share of the drift: g / (n - 1) a bar.
    gaps = np.log(bar_shapes(flat)[:, 0] / bar_shapes(plain)[:, 0])  # [n - 1]
    np.testing.assert_allclose(gaps, -growth / (len(bars) - 1), rtol=1e-9)
    np.testing.assert_array_equal(flat.volume, plain.volume)
    for path in (plain, half, flat):  # one factor scales a bar's four prices: wicks hold exactly
        assert np.all(path.high >= np.maximum(path.open, path.close))
        assert np.all(path.low <= np.minimum(path.open, path.close))
    # Half the share, half the drift: the copy ends halfway, in log price.
    np.testing.assert_allclose(np.log(half.close[-1] / half.close[0]), growth / 2, rtol=1e-9)
    with pytest.raises(ValueError, match=r"detrend must be a share of the drift, 0 to 1, got 1\.5"):
        resampled_path(googl, bars, 50, np.random.default_rng(4), method, detrend=1.5)


def test_noise_is_added_to_the_market_window_only(data_dir):
    path = data_dir / "gymanytrading_GOOGL_daily.csv"
    config = EnvConfig(window=16, episode_length=32)
    clean, noisy = (BatchedTradingEnv(path, config, n_envs=8) for _ in range(2))
    for env in (clean, noisy):
        env.seed(0)
    wrapped = FeatureNoise(noisy, std=0.5, seed=1)
    a, b = clean.reset(), wrapped.reset()
    actions = np.tile([2, 0, 3], (8, 1))
    for _ in range(40):
        difference = b["market"] - a["market"]
        assert 0.4 < difference.std() < 0.6 and abs(difference.mean()) < 0.05
        np.testing.assert_array_equal(a["account"], b["account"])
        a, ra, da, ia = clean.step(actions)
        b, rb, db, ib = wrapped.step(actions)
        np.testing.assert_array_equal(ra, rb)
        np.testing.assert_array_equal(da, db)
        for i in np.flatnonzero(da):  # terminal observations stay clean
            np.testing.assert_array_equal(
                ia[i]["terminal_observation"]["market"], ib[i]["terminal_observation"]["market"]
            )


def test_an_unknown_method_or_block_is_refused(googl):
    with pytest.raises(ValueError, match="method must be one of"):
        resampled_path(googl, range(0, 100), 10, np.random.default_rng(0), "shuffle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="block must be >= 1"):
        resampled_path(googl, range(0, 100), 0, np.random.default_rng(0), "permutation")


def test_training_adds_the_resampled_paths_and_says_so(tmp_path, capsys, monkeypatch):
    built = []
    stacked = TradingCore.stacked

    def spy(parts, config):
        built.append([market.source for market, _ in parts])
        return stacked(parts, config)

    monkeypatch.setattr(session.TradingCore, "stacked", spy)
    run = tmp_path / "run"
    args = ["--config", "configs/smoke.yaml", "--run-dir", str(run)]
    overrides = ["--set", "train.resampled_paths=2", "--set", "train.resample_method=permutation"]
    assert train.main([*args, *overrides]) == 0
    assert "and 2 resampled path(s) of each training range" in capsys.readouterr().out
    (sources,) = built  # the training core: the real range, then its two copies
    assert len(sources) == 3 and sources[1] == sources[2] == f"{sources[0]} (resampled)"


def test_training_detrends_its_copies_when_asked(tmp_path, capsys, monkeypatch):
    asked = []
    resample = session.resampled_path

    def spy(market, bars, block, rng, method, *, detrend=0.0):
        asked.append(detrend)
        return resample(market, bars, block, rng, method, detrend=detrend)

    monkeypatch.setattr(session, "resampled_path", spy)
    args = ["--config", "configs/smoke.yaml", "--run-dir", str(tmp_path / "run")]
    overrides = ["--set", "train.resampled_paths=2", "--set", "train.resample_detrend=0.5"]
    assert train.main([*args, *overrides]) == 0
    assert asked == [0.5, 0.5]
    assert "permutation, 50% of the drift taken out (" in capsys.readouterr().out
