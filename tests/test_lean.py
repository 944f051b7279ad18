"""`training.evaluation.lean`: the direction head's lean from a flat account, against the env's
own observations bar by bar, a head pinned to one side, and several instruments pooled."""

import numpy as np
import pytest
import torch

from envs.synthetic import generate
from training.config import load_config
from training.evaluation.backtest import evaluation_env
from training.evaluation.lean import flat_account_observations, long_probabilities, long_share_pct
from training.run.folder import build_policy

CFG = load_config("configs/smoke.yaml")
MARKET = generate("trend_regimes", 600, 0).market


def env_over(bars: range):
    return evaluation_env(MARKET, CFG.env, bars)


def test_the_observations_are_the_envs_own_from_a_flat_account():
    env = env_over(range(100, 300))
    bars, observation = flat_account_observations(env)
    assert bars[0] == env.core.first_bar and bars[-1] == env.core.end_bar - 1
    for bar in (bars[0], bars[57], bars[-1]):
        seen, _ = env.reset(options={"start_bar": int(bar)})
        row = int(bar - bars[0])
        np.testing.assert_array_equal(observation["market"][row], seen["market"])
        np.testing.assert_array_equal(observation["account"][row], seen["account"])


def test_the_probabilities_are_the_policys_bar_by_bar_in_any_batching(monkeypatch):
    torch.manual_seed(0)
    policy = build_policy(CFG)
    env = env_over(range(100, 300))
    long = CFG.env.direction_names.index("long")
    bars, _ = flat_account_observations(env)
    monkeypatch.setattr("training.evaluation.lean.LEAN_BATCH", 7)  # batches that split the range
    found = long_probabilities(policy, env)
    assert found.shape == bars.shape
    for bar in (bars[0], bars[100], bars[-1]):
        seen, _ = env.reset(options={"start_bar": int(bar)})
        one = {key: value[None] for key, value in seen.items()}
        with torch.no_grad():
            expected = policy.head_distributions(one).heads()["direction"].probs[0, long]
        assert found[bar - bars[0]] == pytest.approx(float(expected), abs=1e-6)
    share = long_share_pct(policy, {"one": env})
    assert share == pytest.approx((found > 0.5).mean() * 100)


@pytest.mark.parametrize(("side", "share"), [("long", 100.0), ("flat", 0.0), ("short", 0.0)])
def test_a_head_pinned_to_one_side_leans_all_the_way(side, share):
    policy = build_policy(CFG)
    policy.decision_heads.pin("direction", CFG.env.direction_names.index(side))
    assert long_share_pct(policy, {"one": env_over(range(100, 300))}) == share


def test_instruments_pool_their_bars():
    torch.manual_seed(1)
    policy = build_policy(CFG)
    short, longer = env_over(range(100, 160)), env_over(range(200, 500))
    each = [long_probabilities(policy, env) > 0.5 for env in (short, longer)]
    pooled = long_share_pct(policy, {"a": short, "b": longer})
    assert pooled == pytest.approx(np.concatenate(each).mean() * 100)
    assert len(each[0]) == 59 and len(each[1]) == 299
