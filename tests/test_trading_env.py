"""TradingEnv and BatchedTradingEnv: API checks, determinism, no look-ahead, batched == single."""

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import envs  # noqa: F401  (registers MultiHeadTrading-v0)
from envs import BatchedTradingEnv, DataError, EnvConfig, TradingEnv, load_market_data
from envs.splits import chronological_split

GOOGL = "data/gymanytrading_GOOGL_daily.csv"
SMALL = dict(window=16, episode_length=50)


def random_walk_frame(n: int, seed: int) -> pd.DataFrame:
    """A valid OHLCV frame from a random walk (bars are real-looking, not real)."""
    rng = np.random.default_rng(seed)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.02, n)))
    open_ = np.concatenate([[100.0], close[:-1]]) * np.exp(rng.normal(0, 0.005, n))
    high = np.maximum(open_, close) * np.exp(np.abs(rng.normal(0, 0.01, n)))
    low = np.minimum(open_, close) * np.exp(-np.abs(rng.normal(0, 0.01, n)))
    return pd.DataFrame(
        {
            "Open": open_,
            "High": high,
            "Low": low,
            "Close": close,
            "Volume": rng.integers(1_000, 10_000, n).astype(float),
        },
        index=pd.date_range("2021-01-01", periods=n, freq="D", name="Date"),
    )


def rollout(env: TradingEnv, actions: np.ndarray, seed: int) -> list:
    obs, _ = env.reset(seed=seed)
    steps = [(obs, 0.0, env.equity)]
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        steps.append((obs, reward, info["equity"], info["bar"]))
        if terminated or truncated:
            break
    return steps


@pytest.mark.filterwarnings("ignore:.*infinity:UserWarning")  # account values are unbounded
@pytest.mark.filterwarnings("ignore:.*unconventional shape:UserWarning")  # our policy reads [W, F]
def test_gymnasium_and_sb3_checkers_pass():
    gym_check_env(TradingEnv(GOOGL, **SMALL), skip_render_check=True)
    sb3_check_env(TradingEnv(GOOGL, **SMALL))


@pytest.mark.parametrize("source", ["path", "frame", "market"])
def test_make_accepts_a_path_a_frame_or_loaded_data(source):
    data = {"path": GOOGL, "frame": pd.read_csv(GOOGL), "market": load_market_data(GOOGL)}[source]
    env = gym.make("MultiHeadTrading-v0", data=data, window=32, leverage_levels=(1, 2))
    obs, _ = env.reset(seed=1)
    assert obs["market"].shape == (32, 7) and obs["account"].shape == (8,)
    assert env.action_space.nvec.tolist() == [3, 2, 4]
    assert env.observation_space.contains(obs)


def test_momentum_horizons_add_one_feature_each():
    env = TradingEnv(GOOGL, momentum_horizons=(16, 256), **SMALL)
    obs, _ = env.reset(seed=0)
    assert obs["market"].shape == (SMALL["window"], 9) and env.observation_space.contains(obs)
    assert env.config.feature_names[-2:] == ("momentum_16", "momentum_256")


def test_long_only_drops_short():
    env = TradingEnv(GOOGL, long_only=True, **SMALL)
    assert env.action_space.nvec.tolist() == [2, 4, 4]
    env.reset(seed=0)
    _, _, _, _, info = env.step(np.array([1, 0, 0]))
    assert info["action"]["direction"] == "long" and info["position"] > 0


def test_seeded_rollouts_are_identical():
    actions = np.random.default_rng(3).integers(0, [3, 4, 4], size=(60, 3))
    first = rollout(TradingEnv(GOOGL, **SMALL), actions, seed=7)
    second = rollout(TradingEnv(GOOGL, **SMALL), actions, seed=7)
    assert len(first) == len(second)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a[0]["market"], b[0]["market"])
        np.testing.assert_array_equal(a[0]["account"], b[0]["account"])
        assert a[1:] == b[1:]


def test_training_episodes_start_at_random_bars_and_last_episode_length():
    env = TradingEnv(GOOGL, **SMALL)
    starts = {env.reset(seed=s)[1]["bar"] for s in range(10)}
    assert len(starts) > 5
    env.reset(seed=0)
    n = 0
    while True:
        n += 1
        _, _, terminated, truncated, _ = env.step(np.array([1, 0, 0]))
        if terminated or truncated:
            break
    assert truncated and n == 50


def test_evaluation_runs_the_whole_range_and_truncates_at_its_end():
    market = load_market_data(GOOGL)
    splits = chronological_split(market)
    env = TradingEnv(
        market, bars=splits.validation, random_start=False, episode_length=None, window=16
    )
    _, info = env.reset()
    assert info["bar"] == splits.validation.start
    n = 0
    while True:
        n += 1
        _, _, terminated, truncated, info = env.step(np.array([1, 0, 0]))
        if terminated or truncated:
            break
    assert truncated and info["bar"] == splits.validation.stop - 1
    assert n == len(splits.validation) - 1
    with pytest.raises(RuntimeError, match=r"needs reset\(\) first"):
        env.step(np.array([1, 0, 0]))  # no next bar to fill on
    env.reset()
    env.step(np.array([1, 0, 0]))


def test_step_before_the_first_reset_is_a_clear_error():
    with pytest.raises(RuntimeError, match=r"needs reset\(\) first"):
        TradingEnv(GOOGL, window=8).step(np.array([1, 0, 0]))


def test_equity_is_cash_plus_position_value_and_costs_only_reduce_it():
    frame = random_walk_frame(400, seed=5)
    actions = np.random.default_rng(8).integers(0, [3, 2, 1], size=(300, 3))
    common = dict(
        window=8,
        episode_length=None,
        random_start=False,
        leverage_levels=(1.0, 2.0),
        risk_levels=(1.0,),
        maintenance_margin=0.0,
    )
    costly = TradingEnv(frame, **common)
    free = TradingEnv(
        frame,
        commission_bps=0.0,
        slippage_bps=0.0,
        financing_rate_annual=0.0,
        borrow_fee_annual=0.0,
        **common,
    )
    costly.reset(seed=0)
    free.reset(seed=0)
    for action in actions:
        *_, term_c, trunc_c, info_c = costly.step(action)
        *_, term_f, trunc_f, info_f = free.step(action)
        assert info_c["equity"] == info_c["cash"] + info_c["position"] * info_c["price"]
        assert info_c["costs"] >= 0 and info_f["costs"] == 0
        assert info_c["equity"] <= info_f["equity"] * (1 + 1e-12)
        if term_c or trunc_c or term_f or trunc_f:
            break


bar_changes = st.lists(st.floats(0.5, 2.0), min_size=1, max_size=200)


@settings(max_examples=25, deadline=None)
@given(
    cut=st.integers(20, 150),
    scale=bar_changes,
    seed=st.integers(0, 10_000),
    reward=st.sampled_from(["log_return", "differential_sharpe", "drawdown_penalty"]),
)
def test_changing_prices_after_bar_t_changes_nothing_at_or_before_t(cut, scale, seed, reward):
    frame = random_walk_frame(200, seed)
    future = frame.copy()
    factors = np.resize(np.asarray(scale), len(frame) - cut - 1)
    future.iloc[cut + 1 :, :4] = future.iloc[cut + 1 :, :4].to_numpy() * factors[:, None]
    future.iloc[cut + 1 :, 4] = future.iloc[cut + 1 :, 4].to_numpy()[::-1]
    actions = np.random.default_rng(seed).integers(0, [3, 4, 4], size=(200, 3))
    config = dict(window=8, episode_length=None, random_start=False, reward=reward)
    original = rollout(TradingEnv(frame, **config), actions, seed=0)
    changed = rollout(TradingEnv(future, **config), actions, seed=0)
    checked = 0
    for a, b in zip(original, changed, strict=False):
        if len(a) == 4 and a[3] > cut:
            break
        np.testing.assert_array_equal(a[0]["market"], b[0]["market"])
        np.testing.assert_array_equal(a[0]["account"], b[0]["account"])
        assert a[1:] == b[1:]
        checked += 1
    assert checked >= min(cut - 7, len(original))


@pytest.mark.parametrize("reward", ["log_return", "differential_sharpe", "drawdown_penalty"])
def test_batched_accounts_equal_single_envs_with_the_same_seeds(reward):
    n, seed = 5, 11
    config = EnvConfig(window=16, episode_length=40, reward=reward)
    batched = BatchedTradingEnv(GOOGL, config, n_envs=n)
    batched.seed(seed)
    obs = batched.reset()
    singles = [TradingEnv(GOOGL, config) for _ in range(n)]
    single_obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(singles)]
    rng = np.random.default_rng(0)
    for _ in range(130):  # several episodes: auto-reset must draw the same starts
        for i in range(n):
            np.testing.assert_array_equal(obs["market"][i], single_obs[i]["market"])
            np.testing.assert_array_equal(obs["account"][i], single_obs[i]["account"])
        actions = rng.integers(0, [3, 4, 4], size=(n, 3))
        obs, rewards, dones, infos = batched.step(actions)
        for i, env in enumerate(singles):
            single_obs[i], reward_i, terminated, truncated, info = env.step(actions[i])
            assert rewards[i] == np.float32(reward_i)
            assert dones[i] == (terminated or truncated)
            assert batched.last_step["equity"][i] == info["equity"]
            assert batched.last_step["commission"][i] == info["commission"]
            if dones[i]:
                np.testing.assert_array_equal(
                    infos[i]["terminal_observation"]["account"], single_obs[i]["account"]
                )
                assert infos[i]["TimeLimit.truncated"] == truncated
                assert infos[i]["episode_trading"] == info["episode_trading"]
                single_obs[i], _ = env.reset()
            else:
                assert infos[i] == {}


def test_batched_infos_of_unfinished_accounts_are_read_only_and_vec_monitor_still_reports():
    from stable_baselines3.common.vec_env import VecMonitor

    env = VecMonitor(BatchedTradingEnv(GOOGL, window=8, episode_length=3, n_envs=2))
    env.reset()
    _, _, dones, infos = env.step(np.zeros((2, 3), dtype=np.int64))
    assert not dones.any()
    with pytest.raises(TypeError):
        infos[0]["mine"] = 1  # shared by all accounts: a write must not leak into later steps
    env.step(np.zeros((2, 3), dtype=np.int64))
    _, _, dones, infos = env.step(np.zeros((2, 3), dtype=np.int64))
    assert dones.all()
    for info in infos:
        assert info["episode"]["l"] == 3
        assert info["episode_trading"]["steps"] == 3
        info["mine"] = 1  # a finished account's info is its own dict


def test_batched_env_passes_through_sb3_ppo():
    from stable_baselines3 import PPO

    from training.run.session import without_logs

    env = BatchedTradingEnv(GOOGL, window=8, episode_length=32, n_envs=4)
    model = without_logs(
        PPO(
            "MultiInputPolicy",
            env,
            n_steps=16,
            batch_size=32,
            n_epochs=1,
            seed=0,
            policy_kwargs=dict(net_arch=[16]),
        )
    )
    model.learn(64)
    assert model.num_timesteps == 64


def test_too_few_bars_for_a_window_is_a_clear_error():
    frame = random_walk_frame(10, seed=0)
    with pytest.raises(DataError, match=r"need at least window \+ 1 = 17 bars"):
        TradingEnv(frame, window=16)
