"""The direction head's marginal balance loss: against a collapse onto one level early."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from stable_baselines3.common.logger import Logger

from envs import BatchedTradingEnv
from envs.synthetic.generators import random_walk, trend_regimes
from training.config import ConfigError, load_config
from training.run.balance import DirectionBalance, balance_applies, marginal_balance_loss
from training.run.folder import RunDir
from training.run.session import build_model

REPO = Path(__file__).resolve().parents[1]
GOOGL = REPO / "data" / "gymanytrading_GOOGL_daily.csv"
SETS = ["env.window=8", "env.long_only=true", "policy.device=cpu"]
SETS += ["ppo.n_envs=8", "ppo.n_steps=8", "ppo.batch_size=16"]


def test_the_loss_is_minus_the_entropy_of_the_marginal_not_of_each_state():
    sure_and_split = torch.tensor([[9.0, -9.0], [-9.0, 9.0]])  # certain, each a different level
    sure_and_same = torch.tensor([[-9.0, 9.0], [-9.0, 9.0]])  # certain, both long
    undecided = torch.zeros(2, 2)
    assert marginal_balance_loss(sure_and_split).item() == pytest.approx(-math.log(2), abs=1e-6)
    assert marginal_balance_loss(undecided).item() == pytest.approx(-math.log(2), abs=1e-6)
    assert marginal_balance_loss(sure_and_same).item() == pytest.approx(0.0, abs=1e-6)
    # Only the marginal matters: a head sure in each state is as balanced as an undecided one.
    three = torch.tensor([[0.0, 0.0, 0.0]])
    assert marginal_balance_loss(three).item() == pytest.approx(-math.log(3), abs=1e-6)


def test_a_pass_moves_a_collapsed_head_towards_balance_and_the_weight_falls_to_zero(tmp_path):
    cfg = load_config(None, SETS)
    env = BatchedTradingEnv(GOOGL, cfg.env, n_envs=8)
    env.seed(0)
    model = build_model(cfg, env, RunDir(tmp_path / "run"))
    model.set_logger(Logger(folder=None, output_formats=[]))  # learn() would set one up
    model.policy.decision_heads.lean_towards(cfg.env.hold_action, 3.0)  # long at ~0.95
    balance = DirectionBalance(1.0, until=1000, batch_size=16, seed=0)
    balance.init_callback(model)
    obs = env.reset()

    def share_long() -> float:
        with torch.no_grad():
            probs = model.policy.head_distributions(obs).heads()["direction"].probs.numpy()
        return float(probs[:, cfg.env.hold_action[0]].mean())

    start = share_long()
    for _ in range(60):
        balance._pending = obs
        balance._on_rollout_start()
    assert start > 0.9 and share_long() < start - 0.1  # towards 0.5 each pass
    assert balance._pending is None

    model.num_timesteps = 250
    assert balance._weight() == pytest.approx(0.75)
    model.num_timesteps = 1000  # from `until` on the pass does nothing
    assert balance._weight() == 0.0
    before = share_long()
    balance._pending = obs
    balance._on_rollout_start()
    assert share_long() == before
    with pytest.raises(ValueError, match="until must be a timestep"):
        DirectionBalance(1.0, until=0, batch_size=16, seed=0)


@pytest.mark.parametrize(
    ("key", "value"), [("direction_balance", "-1"), ("direction_balance_until", "0")]
)
def test_bad_balance_settings_name_the_key(key, value):
    with pytest.raises(ConfigError, match=f"train.{key}"):
        load_config(None, [f"train.{key}={value}"])


def test_the_pass_reads_every_state_of_the_rollout():
    balance = DirectionBalance(1.0, until=10, batch_size=4, seed=0)
    rows, target = balance._targets({"market": np.zeros((6, 2, 3))})
    assert list(rows) == list(range(6)) and target is None


def test_with_an_evidence_level_the_loss_is_on_only_where_returns_predict():
    cfg = load_config(REPO / "configs" / "default.yaml", ["train.direction_balance=1"])
    trend = trend_regimes(3000, 2094).market  # its returns persist: p < 0.1
    walk = random_walk(3000, 2002).market  # nothing to find: both tests' p above 0.1
    everywhere = cfg
    gated = load_config(
        REPO / "configs" / "default.yaml",
        ["train.direction_balance=1", "train.direction_balance_evidence=0.1"],
    )
    off = load_config(REPO / "configs" / "default.yaml", [])
    assert balance_applies(everywhere, [(walk, range(len(walk)))])
    assert balance_applies(gated, [(trend, range(len(trend)))])
    assert not balance_applies(gated, [(walk, range(len(walk)))])
    assert not balance_applies(off, [(trend, range(len(trend)))])
