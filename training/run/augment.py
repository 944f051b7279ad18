"""Training-time augmentation: new paths and noise that keep structure but break memorisation.

A window of a few dozen bars of one price history is a fingerprint: a policy can learn *where it
is* in the training series and trade the future it has seen there. Two remedies, both for
training only (validation and backtests always see the real bars and clean features):

- `resampled_path`: a new path made of blocks of consecutive real bars of a training range in a
  random order, either the range's own blocks shuffled (every bar once, so the path ends where
  the range ends) or blocks drawn with replacement (a moving-block bootstrap). What spans less
  than a block (a trend regime, a volatility spell, a stretched price reverting) survives; the
  order of the blocks, the path's fingerprint, is new with every copy.
- `FeatureNoise`: Gaussian noise on the market features of every training observation (a fresh
  draw each step), which blurs the fingerprint while what spans many bars survives.
"""

from __future__ import annotations

import typing

import numpy as np
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs, VecEnvStepReturn

from envs import MarketData
from envs.features import CLIP
from training.config import ResampleMethod


def block_order(n: int, block: int, method: ResampleMethod, rng: np.random.Generator) -> np.ndarray:
    """Source bars 1..n-1 of a range of `n` bars in a new order: [n - 1] indices, made of runs of
    consecutive bars (blocks of `block`).

    "permutation": bars 1..n-1 are cut into blocks at a random offset (the first block holds 1 to
    `block` bars, the last what is left) and the blocks are shuffled, so every bar appears exactly
    once. "bootstrap": blocks of `block` bars start anywhere in 1..n-1 and are drawn with
    replacement (a moving-block bootstrap), so a bar may appear several times or not at all.
    """
    if block < 1:
        raise ValueError(f"block must be >= 1 bar, got {block}")
    if n < 2:
        raise ValueError(f"a resampled path needs at least 2 bars, got {n}")
    block = min(block, n - 1)
    if method == "permutation":
        cuts = np.arange(1 + int(rng.integers(1, block + 1)), n, block)  # block starts after 1
        blocks = np.split(np.arange(1, n), cuts - 1)  # [1, cut_1), [cut_1, cut_2), ... [.., n)
        return np.concatenate([blocks[k] for k in rng.permutation(len(blocks))])
    if method == "bootstrap":
        starts = rng.integers(1, n - block + 1, size=-(-(n - 1) // block))
        return (starts[:, None] + np.arange(block)).ravel()[: n - 1]
    raise ValueError(f"method must be one of {typing.get_args(ResampleMethod)}, got {method!r}")


def resampled_path(
    market: MarketData,
    bars: range,
    block: int,
    rng: np.random.Generator,
    method: ResampleMethod,
    *,
    detrend: float = 0.0,
) -> MarketData:
    """A new path as long as `bars`, made of blocks of `block` consecutive bars of `bars` in the
    order `block_order` draws with `method`.

    Only bars inside `bars` are read, so a training range's copy holds nothing from after it.
    The first bar is the range's own first bar; every later bar keeps its gap from the previous
    close and its high, low and close relative to its open (so its wick and body are real), and
    is put after the new path's previous close. Each bar's four prices are scaled by one factor,
    so high >= max(open, close) and low <= min(open, close) hold exactly, as in the source bar.
    Volumes come along. Timestamps are the range's own: the copy trades on the same calendar.
    With "permutation" every bar of the range is used once, so the copy's last close is the
    range's own: the drift it shows is the range's.

    `detrend` (0 to 1) takes that share of the copy's drift out: bar k's four prices are also
    multiplied by ``exp(-detrend * g * k / (n - 1))``, g the copy's log growth first close to
    last, so with 1 the copy ends at its first close. Every bar keeps its shape and the gaps give
    the drift up. The drift one path happened to show then weighs less as the market's, while
    what a block holds (a trend spell against its neighbours, a stretch reverting) survives.
    """
    if not 0.0 <= detrend <= 1.0:
        raise ValueError(f"detrend must be a share of the drift, 0 to 1, got {detrend}")
    segment = market.slice(bars.start, bars.stop)
    n = len(segment)
    picked = block_order(n, block, method, rng)  # [n - 1] source bar of each new bar 1..n-1
    o, h, lo, c = segment.open, segment.high, segment.low, segment.close  # [n] each
    gap = np.log(o[1:] / c[:-1])  # [n - 1] bar i + 1's open against bar i's close
    gaps = gap[picked - 1]  # [n - 1] each new bar's gap from the previous close
    # Log close of each new bar: the previous close, the gap, then the source bar's body.
    log_close = np.log(c[0]) + np.concatenate(
        [[0.0], np.cumsum(gaps + np.log(c[picked] / o[picked]))]
    )  # [n]
    scale = np.exp(log_close[:-1] + gaps) / o[picked]  # [n - 1] each source bar's prices times this
    growth = log_close[-1] - log_close[0]  # the copy's drift, first close to last
    drift_out = np.exp(-detrend * growth * np.arange(n) / (n - 1))  # [n] bar k's prices times this
    return MarketData(
        source=f"{segment.source} (resampled)",
        ticker=segment.ticker,
        timestamps=segment.timestamps,
        open=np.concatenate([[o[0]], o[picked] * scale]) * drift_out,
        high=np.concatenate([[h[0]], h[picked] * scale]) * drift_out,
        low=np.concatenate([[lo[0]], lo[picked] * scale]) * drift_out,
        close=np.concatenate([[c[0]], c[picked] * scale]) * drift_out,
        volume=np.concatenate([[segment.volume[0]], segment.volume[picked]]),
    )


class FeatureNoise(VecEnvWrapper):
    """Adds N(0, `std`^2) noise to the "market" entry of every observation `venv` returns.

    The features are volatility-scaled (unit-sized), so `std` is in those units; the sum is
    clipped to the features' bound, `envs.features.CLIP`. Draws come from
    a generator seeded with `seed`. The terminal observations in `infos` are left clean: they
    only bootstrap the value of a truncated episode.
    """

    def __init__(self, venv: VecEnv, std: float, seed: int) -> None:
        if std < 0:
            raise ValueError(f"std must be >= 0, got {std}")
        super().__init__(venv)
        self.std = std
        self._rng = np.random.default_rng(seed)

    def _noisy(self, obs: VecEnvObs) -> VecEnvObs:
        assert isinstance(obs, dict)
        market = obs["market"]  # [N, W, F] float32, a fresh array of the env's
        noise = self._rng.standard_normal(market.shape, dtype=np.float32)  # [N, W, F]
        market += self.std * noise
        np.clip(market, -CLIP, CLIP, out=market)  # within the observation space, as features are
        return obs

    def reset(self) -> VecEnvObs:
        """Reset `venv`; noisy observations."""
        return self._noisy(self.venv.reset())

    def step_wait(self) -> VecEnvStepReturn:
        """Step `venv`; noisy observations, everything else as it is."""
        obs, rewards, dones, infos = self.venv.step_wait()
        return self._noisy(obs), rewards, dones, infos
