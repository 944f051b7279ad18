"""Every direction's outcome: the env's counterfactual rewards and the loss that uses them."""

from pathlib import Path

import numpy as np
import pytest
import torch
from stable_baselines3.common.logger import Logger

from envs import BatchedTradingEnv
from envs import execution as ex
from training.config import load_config
from training.run.folder import RunDir
from training.run.outcomes import DirectionOutcomes, outcome_loss
from training.run.session import build_model

REPO = Path(__file__).resolve().parents[1]
GOOGL = REPO / "data" / "gymanytrading_GOOGL_daily.csv"
SETS = ["env.window=8", "env.long_only=false", "env.decision_interval=5", "policy.device=cpu"]
SETS += ["ppo.n_envs=8", "ppo.n_steps=8", "ppo.batch_size=16"]


def test_each_direction_level_is_stepped_on_a_copy_and_the_taken_one_pays_its_reward():
    cfg = load_config(None, SETS)
    env = BatchedTradingEnv(GOOGL, cfg.env, n_envs=8, direction_rewards=True)
    env.seed(3)
    env.reset()
    rng = np.random.default_rng(0)
    directions = len(cfg.env.direction_sides)
    for _ in range(30):
        actions = np.stack(
            [rng.integers(0, n, size=8) for n in (directions, len(cfg.env.leverage_levels), 4)],
            axis=1,
        )  # [8, 3]
        before = env._accounts.state.copy()
        env.step_async(actions)
        _, rewards, _, _ = env.step_wait()
        taken = env.direction_rewards[np.arange(8), actions[:, 0]]  # [8]
        np.testing.assert_allclose(taken, rewards, rtol=1e-6)  # float32 rewards
        assert env.direction_rewards.shape == (8, directions)
        assert np.isfinite(env.direction_rewards).all()
        # A flat account that stays flat pays nothing; the others moved with the market.
        was_flat = before[:, ex.QTY] == 0.0
        flat_level = list(cfg.env.direction_sides).index(0)
        assert (env.direction_rewards[was_flat, flat_level] == 0.0).all()
    plain = BatchedTradingEnv(GOOGL, cfg.env, n_envs=8)
    assert not plain.direction_rewards.any()  # off by default: never computed


def test_the_loss_moves_each_state_towards_the_level_that_paid_more(tmp_path):
    cfg = load_config(None, [*SETS, "train.direction_outcomes=1"])
    env = BatchedTradingEnv(GOOGL, cfg.env, n_envs=8, direction_rewards=True)
    env.seed(0)
    model = build_model(cfg, env, RunDir(tmp_path / "run"))
    model.set_logger(Logger(folder=None, output_formats=[]))  # learn() would set one up
    outcomes = DirectionOutcomes(1.0, batch_size=16, seed=0)
    outcomes.init_callback(model)
    obs = env.reset()
    rewards = np.zeros((len(obs["market"]), len(cfg.env.direction_sides)))  # [8, D]
    rewards[:4, 0] = 0.01  # short paid on the first four states
    rewards[4:, 2] = 0.01  # long on the others

    def probs() -> np.ndarray:
        with torch.no_grad():
            return model.policy.head_distributions(obs).heads()["direction"].probs.numpy()

    start = probs()
    for _ in range(20):
        outcomes._pending, outcomes._rewards = obs, rewards
        outcomes._on_rollout_start()
    end = probs()
    assert (end[:4, 0] > start[:4, 0] + 0.05).all() and (end[4:, 2] > start[4:, 2] + 0.05).all()
    assert outcomes._pending is None
    with pytest.raises(ValueError, match="weight must be > 0"):
        DirectionOutcomes(0.0, batch_size=16, seed=0)


def test_the_loss_gradient_stays_large_for_a_level_the_head_has_ruled_out():
    """At logits that put 0.998 on long, the gradient on flat's logit where flat paid is its
    probability less its target share, not scaled down by the probability (as the expected
    policy gradient's would be: tried first, C75 in benchmarks/RESULTS.md)."""
    logits = torch.tensor([[-3.0, -3.0, 6.0]], requires_grad=True)  # short, flat, long
    q = torch.tensor([[-1.0, 2.0, -1.0]])  # flat paid
    target = torch.softmax(q, dim=1)
    outcome_loss(logits, target).backward()
    probs = torch.softmax(logits.detach(), dim=1)
    assert probs[0, 1] < 0.002
    torch.testing.assert_close(logits.grad, probs - target)
    assert logits.grad[0, 1] < -0.9  # flat's logit is pushed up at nearly full strength
    expected_gradient = -(probs[0, 1] * (q[0, 1] - (probs * q).sum()))  # d(-sum pi q)/d flat
    assert abs(expected_gradient) < 0.01
