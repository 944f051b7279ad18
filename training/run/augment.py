"""Training-time augmentation of observations: noise that keeps structure but breaks memorisation.

A window of a few dozen bars of one price history is a fingerprint: a policy can learn *where it
is* in the training series and trade the future it has seen there. Gaussian noise on the market
features of every training observation (a fresh draw each step) blurs that fingerprint while a
trend, a volatility level or a stretched price, which span many bars, survive it. Evaluation
(validation, backtests) always sees the clean features.
"""

from __future__ import annotations

import numpy as np
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs, VecEnvStepReturn

from envs.features import CLIP


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
