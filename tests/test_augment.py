"""Training-time feature noise: fresh noise on the market window, nothing else touched."""

import numpy as np

from envs import BatchedTradingEnv, EnvConfig
from training.run.augment import FeatureNoise


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
