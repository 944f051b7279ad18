"""MultiHeadPolicy and MultiHeadDistribution: identities, optimizer wiring and a short PPO run."""

import itertools
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3 import PPO

from agent.distribution import MultiHeadDistribution
from agent.policy import MultiHeadPolicy
from envs.config import HEAD_NAMES
from training.run.model_file import (
    load_optimizer_state,
    load_policy_tensors,
    read_model_file,
    write_model_file,
)
from training.run.session import without_logs

WINDOW, N_FEATURES, N_ACCOUNT = 8, 3, 8
TRUNK = dict(d_model=16, n_heads=2, n_layers=1)
OBSERVATION_SPACE = spaces.Dict(
    {
        "market": spaces.Box(-np.inf, np.inf, (WINDOW, N_FEATURES), np.float32),
        "account": spaces.Box(-np.inf, np.inf, (N_ACCOUNT,), np.float32),
    }
)


def make_policy(nvec=(3, 4, 4), flat=1, conditional=True) -> MultiHeadPolicy:
    torch.manual_seed(0)
    return MultiHeadPolicy(
        OBSERVATION_SPACE,
        spaces.MultiDiscrete(list(nvec)),
        lambda _: 3e-4,
        trunk=TRUNK,
        account_dim=16,
        head_hidden=16,
        flat_direction_index=flat,
        conditional_heads=conditional,
    )


def random_obs(batch: int, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "market": torch.randn(batch, WINDOW, N_FEATURES, generator=generator),
        "account": torch.randn(batch, N_ACCOUNT, generator=generator),
    }


def sharpened_distribution(policy: MultiHeadPolicy, batch: int = 6) -> MultiHeadDistribution:
    """Distribution with non-uniform heads (the initial policy is near uniform by design)."""
    torch.manual_seed(1)
    for head in (policy.decision_heads.direction, policy.decision_heads.leverage):
        torch.nn.init.normal_(head.logits.weight, std=1.0)
    return policy.head_distributions(random_obs(batch))


def test_joint_log_prob_is_the_sum_of_head_log_probs():
    dist = sharpened_distribution(make_policy(conditional=False))
    actions = dist.sample()
    per_head = dist.log_prob_per_head(actions)
    assert set(per_head) == set(HEAD_NAMES)
    torch.testing.assert_close(dist.log_prob(actions), sum(per_head.values()))
    torch.testing.assert_close(dist.entropy(), sum(dist.entropy_per_head().values()))


@pytest.mark.parametrize(("nvec", "flat"), [((3, 4, 4), 1), ((2, 4, 4), 0)])
def test_conditional_log_prob_drops_leverage_and_risk_when_flat(nvec, flat):
    dist = sharpened_distribution(make_policy(nvec=nvec, flat=flat))
    directions = torch.arange(6) % nvec[0]
    actions = torch.stack([directions, torch.arange(6) % 4, torch.arange(6) % 3], dim=1)
    per_head = dist.log_prob_per_head(actions)
    log_prob = dist.log_prob(actions)
    for i, direction in enumerate(directions.tolist()):
        expected = per_head["direction"][i]
        if direction != flat:
            expected = expected + per_head["leverage"][i] + per_head["risk"][i]
        torch.testing.assert_close(log_prob[i], expected)


def test_conditional_entropy_is_the_entropy_of_the_effective_action():
    dist = sharpened_distribution(make_policy())
    h = dist.entropy_per_head()
    p_flat = dist.distribution[0].probs[:, 1]
    formula = h["direction"] + (1 - p_flat) * (h["leverage"] + h["risk"])
    torch.testing.assert_close(dist.entropy(), formula)

    # Brute force: enumerate every effective action (flat, or a non-flat direction with a
    # leverage and a risk level) and sum -p log p with the conditional log-probabilities.
    actions = [(1, 0, 0)] + [
        a for a in itertools.product(range(3), range(4), range(4)) if a[0] != 1
    ]
    batch = p_flat.shape[0]
    total = torch.zeros(batch)
    for action in actions:
        log_p = dist.log_prob(torch.tensor([action] * batch))
        total -= log_p.exp() * log_p
    torch.testing.assert_close(dist.entropy(), total)
    torch.testing.assert_close(
        sum(dist.log_prob(torch.tensor([a] * batch)).exp() for a in actions), torch.ones(batch)
    )


def test_unvalidated_heads_match_torch_and_still_refuse_nan_logits():
    """The Categoricals skip torch's argument checks; results equal validated ones, and
    sampling from NaN logits still fails."""
    dist = MultiHeadDistribution((3, 4, 4), flat_direction_index=1)
    logits = torch.randn(5, 11, generator=torch.Generator().manual_seed(0))
    dist.proba_distribution(logits)
    actions = dist.sample()
    splits = logits.split([3, 4, 4], dim=1)
    checked = [torch.distributions.Categorical(logits=s, validate_args=True) for s in splits]
    for i, (ours, reference) in enumerate(zip(dist.distribution, checked, strict=True)):
        assert not ours._validate_args
        assert torch.equal(ours.log_prob(actions[:, i]), reference.log_prob(actions[:, i]))
        assert torch.equal(ours.entropy(), reference.entropy())
    with pytest.raises(RuntimeError, match="nan"):
        dist.proba_distribution(torch.full((5, 11), float("nan"))).sample()


def test_initial_policy_is_near_uniform():
    dist = make_policy(conditional=False).head_distributions(random_obs(4))
    for name, n in zip(HEAD_NAMES, (3, 4, 4), strict=True):
        torch.testing.assert_close(
            dist.entropy_per_head()[name], torch.full((4,), math.log(n)), atol=1e-3, rtol=0
        )


def test_a_hold_prior_leans_each_head_towards_one_level():
    policy = make_policy(conditional=False)
    policy.decision_heads.lean_towards((2, 0, 3), 2.0)  # long, the first leverage, the last stop
    probs = {name: d.probs for name, d in policy.head_distributions(random_obs(4)).heads().items()}
    for name, level, n in zip(HEAD_NAMES, (2, 0, 3), (3, 4, 4), strict=True):
        lean = math.exp(2.0) / (math.exp(2.0) + n - 1)
        torch.testing.assert_close(probs[name][:, level], torch.full((4,), lean), atol=5e-3, rtol=0)


@pytest.mark.parametrize("conditional", [False, True])
def test_heads_made_to_always_choose_an_action_choose_it_on_any_window(conditional):
    policy = make_policy(conditional=conditional)
    sharpened_distribution(policy)  # heads that read their input, before they are fixed
    policy.decision_heads.always((2, 0, 3))  # long, the first leverage, the last stop
    obs = random_obs(64, seed=3)
    obs["market"] = obs["market"] * 10.0
    with torch.no_grad():
        probs = {name: d.probs for name, d in policy.head_distributions(obs).heads().items()}
    for name, level in zip(HEAD_NAMES, (2, 0, 3), strict=True):
        assert bool((probs[name][:, level] > 1 - 1e-6).all()), name


def test_optimizer_holds_every_parameter():
    policy = make_policy()
    in_optimizer = {id(p) for group in policy.optimizer.param_groups for p in group["params"]}
    parts = {
        "direction": policy.decision_heads.direction,
        "leverage": policy.decision_heads.leverage,
        "risk": policy.decision_heads.risk,
        "value_net": policy.value_net,
        "value_mlp": policy.mlp_extractor.value_net,
        "trunk": policy.features_extractor.trunk,
        "account_mlp": policy.features_extractor.account_mlp,
    }
    for name, module in parts.items():
        params = {id(p) for p in module.parameters()}
        assert params and params <= in_optimizer, name
    assert in_optimizer == {id(p) for p in policy.parameters()}


def test_trunk_init_survives_policy_build():
    policy = make_policy()
    qkv = policy.features_extractor.trunk.blocks[0].attn.qkv.weight
    assert qkv.abs().max() <= math.sqrt(6 / (16 + 16))  # Xavier per projection, not orthogonal


def test_forward_and_evaluate_actions_shapes():
    policy = make_policy()
    obs = random_obs(5)
    actions, values, log_prob = policy(obs)
    assert actions.shape == (5, 3)
    assert values.shape == (5, 1)
    assert log_prob.shape == (5,)
    values, log_prob, entropy = policy.evaluate_actions(obs, actions.float())
    assert values.shape == (5, 1)
    assert log_prob.shape == (5,)
    assert entropy.shape == (5,)


def test_head_distributions_is_a_snapshot():
    policy = make_policy()
    first = policy.head_distributions(random_obs(3, seed=0))
    logits = first.distribution[0].logits.clone()
    policy.head_distributions(random_obs(3, seed=1))
    torch.testing.assert_close(first.distribution[0].logits, logits)


def test_bf16_is_inactive_on_cpu():
    obs = random_obs(4)
    fp32 = make_policy()
    bf16 = make_policy()
    bf16.features_extractor.use_bf16 = True
    torch.testing.assert_close(bf16.extract_features(obs), fp32.extract_features(obs))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bf16 autocast is CUDA-only")
def test_bf16_on_cuda_returns_float32_features_close_to_fp32():
    policy = make_policy().cuda()
    obs = {key: value.cuda() for key, value in random_obs(4).items()}
    fp32 = policy.extract_features(obs)
    policy.features_extractor.use_bf16 = True
    bf16 = policy.extract_features(obs)
    assert bf16.dtype == torch.float32
    torch.testing.assert_close(bf16, fp32, atol=0.1, rtol=0.05)


def test_conditional_heads_need_a_flat_direction():
    with pytest.raises(ValueError, match="flat_direction_index"):
        make_policy(flat=None)
    make_policy(flat=None, conditional=False)


class SignEnv(gym.Env):
    """Tiny real env with the trading spaces: reward = direction (short/flat/long) x sign."""

    def __init__(self, episode_length: int = 16) -> None:
        self.observation_space = OBSERVATION_SPACE
        self.action_space = spaces.MultiDiscrete([3, 4, 4])
        self.episode_length = episode_length

    def _observe(self) -> dict[str, np.ndarray]:
        return {
            "market": self.np_random.standard_normal((WINDOW, N_FEATURES)).astype(np.float32),
            "account": self.np_random.standard_normal(N_ACCOUNT).astype(np.float32),
        }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        self._obs = self._observe()
        return self._obs, {}

    def step(self, action):
        reward = float((int(action[0]) - 1) * np.sign(self._obs["market"][-1, 0]))
        self._t += 1
        self._obs = self._observe()
        return self._obs, reward, False, self._t >= self.episode_length, {}


def test_ppo_learn_then_a_model_file_rebuilds_the_policy(tmp_path):
    """After PPO learns, the policy's tensors and Adam state written to a model file load into a
    policy built in code from the same arguments: same actions, same optimizer state."""
    policy_kwargs = dict(trunk=TRUNK, account_dim=16, head_hidden=16, flat_direction_index=1)
    model = without_logs(
        PPO(
            MultiHeadPolicy,
            SignEnv(),
            n_steps=64,
            batch_size=32,
            n_epochs=2,
            policy_kwargs=policy_kwargs,
            seed=0,
            device="cpu",
        )
    )
    model.learn(128)
    path = write_model_file(tmp_path / "model.safetensors", model.policy, model.num_timesteps,
                            with_optimizer=True)  # fmt: skip
    saved = read_model_file(path)
    loaded = MultiHeadPolicy(
        model.observation_space, model.action_space, lambda _: 3e-4, **policy_kwargs
    )
    load_policy_tensors(loaded, saved, path)
    load_optimizer_state(loaded.optimizer, saved, path)

    assert saved.num_timesteps == 128 and loaded.action_dist.conditional
    ours, theirs = model.policy.optimizer.state_dict(), loaded.optimizer.state_dict()
    assert ours["state"].keys() == theirs["state"].keys()
    for index, entries in ours["state"].items():
        assert entries.keys() == theirs["state"][index].keys()
        assert all(torch.equal(value, theirs["state"][index][k]) for k, value in entries.items())
    env = SignEnv()
    env.reset(seed=1)
    draws = [env._observe() for _ in range(16)]
    obs = {key: np.stack([draw[key] for draw in draws]) for key in ("market", "account")}
    actions, _ = model.predict(obs, deterministic=True)
    loaded_actions, _ = loaded.predict(obs, deterministic=True)
    np.testing.assert_array_equal(actions, loaded_actions)
    assert actions.shape == (16, 3)
