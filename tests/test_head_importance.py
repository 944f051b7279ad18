"""Head importance, pruning and attention maps: identities, a short training run, the CLI."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecMonitor
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from agent.policy import MultiHeadPolicy
from agent.pruning import prune_policy
from envs import BatchedTradingEnv, TradingEnv, load_market_data
from training.attention.importance import (
    TARGETS,
    ImportanceBatch,
    gae,
    head_importance,
    normalize_per_layer,
    per_sample_losses,
)
from training.attention.pruning import compare_policies, heads_to_prune, pruning_order
from training.config import load_config
from training.heads import main as heads_main
from training.run.callbacks import HeadImportanceCallback
from training.run.data import data_files
from training.run.folder import RunDir, load_model
from training.run.session import build_model
from training.train import main as train_main

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data" / "gymanytrading_GOOGL_daily.csv"
WINDOW, N_FEATURES, N_ACCOUNT = 8, 3, 8
OBSERVATION_SPACE = spaces.Dict(
    {
        "market": spaces.Box(-np.inf, np.inf, (WINDOW, N_FEATURES), np.float32),
        "account": spaces.Box(-np.inf, np.inf, (N_ACCOUNT,), np.float32),
    }
)
TRUNKS = {
    "standard": dict(d_model=16, n_heads=4, n_layers=2),
    "collaborative": dict(d_model=16, n_heads=4, n_layers=2, attention="collaborative", d_shared=8),
    "deep_single_head_admin": dict(
        d_model=16, n_heads=2, n_layers=2, layout="deep_single_head", residual="admin"
    ),
}
COEFFICIENTS = dict(ent_coef=0.01, vf_coef=0.5)


def make_policy(trunk: dict) -> MultiHeadPolicy:
    torch.manual_seed(0)
    return MultiHeadPolicy(
        OBSERVATION_SPACE,
        spaces.MultiDiscrete([3, 4, 4]),
        lambda _: 3e-4,
        trunk=trunk,
        account_dim=16,
        head_hidden=16,
        flat_direction_index=1,
    )


def random_batch(n: int, seed: int = 0) -> ImportanceBatch:
    rng = np.random.default_rng(seed)
    return ImportanceBatch(
        {
            "market": rng.standard_normal((n, WINDOW, N_FEATURES)).astype(np.float32),
            "account": rng.standard_normal((n, N_ACCOUNT)).astype(np.float32),
        },
        np.stack([rng.integers(0, k, n) for k in (3, 4, 4)], axis=1),
        rng.standard_normal(n),
        rng.standard_normal(n),
    )


def losses_with_gates(policy: MultiHeadPolicy, batch: ImportanceBatch, gates: torch.Tensor):
    policy.features_extractor.trunk.set_head_gates(gates)
    obs, _ = policy.obs_to_tensor(batch.observations)
    tensors = [torch.as_tensor(a) for a in (batch.actions, batch.advantages, batch.returns)]
    with torch.no_grad():
        losses = per_sample_losses(policy, obs, *(t.float() for t in tensors), **COEFFICIENTS)
    return {target: loss.numpy() for target, loss in losses.items()}


def ranks(values: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(values)).astype(float)


@pytest.mark.parametrize("target", TARGETS)
def test_first_order_importance_ranks_heads_like_the_measured_loss_change(target):
    """I_h = E|dL/dxi_h| against E|L(xi_h = 0) - L| measured by masking each head (8 heads)."""
    policy = make_policy(TRUNKS["standard"])
    scale = np.random.default_rng(1).permutation(np.geomspace(0.05, 2.0, 8)).reshape(2, 4)
    with torch.no_grad():  # heads of clearly different weight in the output
        for layer, block in enumerate(policy.features_extractor.trunk.blocks):
            for head in range(4):
                block.attn.proj.weight[:, head * 4 : (head + 1) * 4] *= float(scale[layer, head])
    batch = random_batch(256)
    importance = head_importance(policy, batch, normalize_advantage=False, **COEFFICIENTS)
    base = losses_with_gates(policy, batch, torch.ones(2, 4))[target]
    measured = np.zeros((2, 4))
    for layer in range(2):
        for head in range(4):
            gates = torch.ones(2, 4)
            gates[layer, head] = 0.0
            masked = losses_with_gates(policy, batch, gates)[target]
            measured[layer, head] = np.abs(masked - base).mean()
    rho = np.corrcoef(ranks(importance[target].ravel()), ranks(measured.ravel()))[0, 1]
    assert rho > 0.85, (importance[target], measured)


def test_per_sample_gate_gradients_are_each_samples_own_gradient():
    policy = make_policy(TRUNKS["standard"])
    trunk = policy.features_extractor.trunk
    market = torch.randn(3, WINDOW, N_FEATURES)
    with trunk.sample_gate_gradients(3) as gates:
        trunk(market).square().sum().backward()
    for b in range(3):
        with trunk.gate_gradients() as single:
            trunk(market[b : b + 1]).square().sum().backward()
        torch.testing.assert_close(gates.grad[b], single.grad)
    assert trunk._sample_gates is None and not trunk.head_gates.requires_grad


def test_normalisation_and_pruning_order():
    scores = np.array([[3.0, 4.0, np.nan], [0.0, 0.0, 1.0], [np.nan] * 3])  # last: all pruned
    normalized = normalize_per_layer(scores)
    np.testing.assert_allclose(normalized[0, :2], [0.6, 0.8])
    assert np.isnan(normalized[0, 2]) and normalized[1, 2] == 1.0 and np.isnan(normalized[2]).all()
    assert pruning_order(normalized) == [(1, 0), (1, 1), (0, 0), (0, 1), (1, 2)]
    assert [heads_to_prune(s / 10, 8) for s in range(10)] == [0, 1, 2, 2, 3, 4, 5, 6, 6, 7]


def test_gae_bootstraps_truncation_not_termination():
    rewards = np.array([1.0, 2.0, 3.0, 4.0])
    values = np.array([0.5, 0.5, 0.5, 0.5])
    next_values = np.array([0.5, 10.0, 0.5, 7.0])
    terminated = np.array([0.0, 1.0, 0.0, 0.0])  # step 1 ends an account; step 3 runs out of data
    done = np.array([0.0, 1.0, 0.0, 1.0])
    advantages = gae(rewards, values, next_values, terminated, done, gamma=0.9, gae_lambda=0.8)
    a3 = 4.0 + 0.9 * 7.0 - 0.5
    a2 = 3.0 + 0.9 * 0.5 - 0.5 + 0.9 * 0.8 * a3
    a1 = 2.0 - 0.5  # terminated: no bootstrap, no later steps
    a0 = 1.0 + 0.9 * 0.5 - 0.5 + 0.9 * 0.8 * a1
    np.testing.assert_allclose(advantages, [a0, a1, a2, a3])


@pytest.mark.parametrize("variant", sorted(TRUNKS))
def test_pruned_policy_equals_the_gated_policy(variant):
    policy = make_policy(TRUNKS[variant])
    trunk = policy.features_extractor.trunk
    keep = torch.rand(trunk.head_gates.shape, generator=torch.Generator().manual_seed(3)) > 0.4
    keep[0] = False  # a whole layer pruned: no attention compute left in it
    pruned = prune_policy(policy, keep)
    small = pruned.features_extractor.trunk
    assert small.config.block_heads == tuple(int(k) for k in keep.sum(dim=1))
    for block, n_heads in zip(small.blocks, small.config.block_heads, strict=True):
        assert block.attn.n_heads == n_heads
        assert block.attn.proj.in_features == n_heads * block.attn.head_dim  # really smaller
    in_optimizer = {id(p) for group in pruned.optimizer.param_groups for p in group["params"]}
    assert in_optimizer == {id(p) for p in pruned.parameters()}

    trunk.set_head_gates(keep.float())
    observations = random_batch(64, seed=5).observations
    difference, identical = compare_policies(policy, pruned, observations)
    assert difference < 1e-5 and identical
    obs, _ = policy.obs_to_tensor(observations)
    with torch.no_grad():
        torch.testing.assert_close(pruned.predict_values(obs), policy.predict_values(obs))
    assert pruned.trunk_config["heads_per_layer"] == small.config.heads_per_layer


def test_callback_logs_importance_of_every_head_to_tensorboard(tmp_path):
    cfg = load_config(REPO / "configs/smoke.yaml", ["trunk.n_layers=2"])
    market = load_market_data(data_files(cfg.data)[0])
    env = VecMonitor(BatchedTradingEnv(market, cfg.env, n_envs=cfg.ppo.n_envs))
    run = RunDir(tmp_path)
    model = build_model(cfg, env, run)
    model.learn(256, callback=HeadImportanceCallback(every=200), tb_log_name="train")
    (folder,) = run.tensorboard.iterdir()
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    expected = {
        f"attention/importance/{target}/layer{layer}_head{head}"
        for target in TARGETS
        for layer in range(2)
        for head in range(2)
    }
    assert expected <= set(events.Tags()["scalars"])
    assert [e.step for e in events.Scalars("attention/importance/ppo_loss/layer1_head0")] == [256]
    assert "attention/importance/heatmap" in events.Tags()["images"]


# --- the CLI on a smoke run -------------------------------------------------------------------


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("heads") / "run"
    overrides = ["train.checkpoint_every=0", "train.eval_every=0"]
    args = ["--config", str(REPO / "configs/smoke.yaml"), "--run-dir", str(run)]
    assert train_main([*args, *(f"--set={item}" for item in overrides)]) == 0
    return run


def test_cli_importance_without_subcommand_writes_its_files(smoke_run, tmp_path):
    out = tmp_path / "importance"
    command = ["-m", "training.heads", "--model", str(smoke_run), "--data", str(DATA)]
    result = subprocess.run(
        [sys.executable, *command, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads((out / "importance.json").read_text())
    assert set(data["importance"]) == set(TARGETS)
    assert np.array(data["importance"]["ppo_loss"]).shape == (1, 2)  # smoke: 1 layer x 2 heads
    assert data["normalization"] == "layer" and data["split"] == "train"
    assert data["samples"] > 1000
    assert (out / "importance.png").stat().st_size > 10_000


def test_cli_prune_saves_a_smaller_model_that_acts_like_the_gated_one(smoke_run, tmp_path):
    out = tmp_path / "prune"
    args = ["prune", "--model", str(smoke_run), "--data", str(DATA), "--out", str(out)]
    assert heads_main([*args, "--share", "0.5"]) == 0
    data = json.loads((out / "pruning.json").read_text())
    assert [point["share"] for point in data["curve"]] == pytest.approx([i / 10 for i in range(10)])
    assert all(point["sharpe"] is not None for point in data["curve"])
    summary = data["pruned_model"]
    assert summary["heads_per_layer"] == [1] and summary["identical_deterministic_actions"]
    assert (out / "pruning.png").is_file()

    pruned = load_model(out / "pruned_model.safetensors").policy
    assert pruned.trunk.blocks[0].attn.n_heads == 1
    assert load_config(out / "config.yaml").trunk.heads_per_layer == (1,)
    gated = load_model(smoke_run).policy
    gates = torch.ones(1, 2)
    gates[tuple(summary["heads_pruned"][0])] = 0.0
    gated.trunk.set_head_gates(gates)
    cfg = load_config(smoke_run / "config.yaml")
    env = TradingEnv(DATA, cfg.env, random_start=False, episode_length=None)
    obs, _ = env.reset(seed=0)
    for _ in range(50):
        action = gated.predict(obs, deterministic=True)[0]
        np.testing.assert_array_equal(pruned.predict(obs, deterministic=True)[0], action)
        obs, *_ = env.step(action)
    # The pruned model is a model like any other for the CLI (config.yaml next to it).
    again = tmp_path / "again"
    assert heads_main(["--model", str(out / "pruned_model.safetensors"), "--data", str(DATA),
                       "--out", str(again)]) == 0  # fmt: skip
    assert np.array(
        json.loads((again / "importance.json").read_text())["importance"]["value"]
    ).shape == (1, 2)


def test_cli_running_a_command_again_keeps_its_earlier_files(smoke_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(smoke_run, run)
    args = ["attention", "--model", str(run), "--data", str(DATA), "--date", "2016-03-04"]
    assert heads_main(args) == 0 and heads_main(args) == 0
    stem = "attention_2016-03-04"
    assert (run / "heads" / f"{stem}.json").is_file() and (
        run / "heads-2" / f"{stem}.json"
    ).is_file()
    assert f"{run / 'heads-2' / stem}.png" in capsys.readouterr().out
    # Another date writes other files: the first folder takes them.
    assert heads_main([*args[:-1], "2016-03-07"]) == 0
    assert (run / "heads" / "attention_2016-03-07.json").is_file()
    # An --out that holds the files is refused in one line.
    assert heads_main([*args, "--out", str(run / "heads")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{run / 'heads'}: already holds {stem}.png, {stem}.json" in err


@pytest.mark.parametrize("full", [False, True])
def test_cli_attention_maps_for_a_date(smoke_run, tmp_path, full):
    args = ["attention", "--model", str(smoke_run), "--data", str(DATA), "--out", str(tmp_path)]
    assert heads_main([*args, "--date", "2016-03-05", *(["--full"] if full else [])]) == 0
    data = json.loads((tmp_path / "attention_2016-03-04.json").read_text())  # Saturday -> Friday
    assert len(data["tokens"]) == 16 and data["tokens"][-1] == "2016-03-04"
    pooled = np.array(data["pooled"])  # [layer, head, token]
    assert pooled.shape == (1, 2, 16)
    np.testing.assert_allclose(pooled.sum(axis=-1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(np.array(data["maps"])[:, :, -1], pooled)  # "last" pooling
    assert (tmp_path / "attention_2016-03-04.png").stat().st_size > 5_000


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["attention", "--date", "not-a-date"], "--date: expected a date"),
        (["attention", "--date", "2004-08-20"], "no full window of 16 bars ends there"),
        (["attention", "--date", "2031-01-01"], "after the data"),
        (["prune", "--share", "1.5"], "--share: expected a fraction in [0, 1)"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(smoke_run, tmp_path, capsys, extra, message):
    command, *rest = extra
    args = [command, "--model", str(smoke_run), "--data", str(DATA), "--out", str(tmp_path), *rest]
    assert heads_main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_cli_refuses_foreign_files_and_a_mismatched_window(smoke_run, tmp_path, capsys):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "config.yaml").write_text((smoke_run / "config.yaml").read_text())
    (foreign / "best_model.safetensors").write_text("not a model file")
    assert heads_main(["--model", str(foreign), "--data", str(DATA)]) == 2
    assert "best_model.safetensors: not a safetensors file" in capsys.readouterr().err

    wider = tmp_path / "wider"
    wider.mkdir()
    text = (smoke_run / "config.yaml").read_text().replace("window: 16", "window: 32")
    (wider / "config.yaml").write_text(text)
    model = (smoke_run / "best_model.safetensors").read_bytes()
    (wider / "best_model.safetensors").write_bytes(model)
    assert heads_main(["--model", str(wider), "--data", str(DATA)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "[16, 7]" in err and "[32, 7]" in err, err
