"""`python -m training.train` end to end: outputs, TensorBoard tags, resume, bad input, learning."""

import json
import math
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from stable_baselines3.common.vec_env import DummyVecEnv
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from agent.heads import FIXED_LOGIT
from envs import TradingEnv
from training.config import DEFAULT_CONFIG_PATH, ConfigError, load_config, resolve_config
from training.evaluation.metrics import compute_metrics, trades_from_record
from training.evaluation.rollout import record_episode
from training.run.data import data_files
from training.run.folder import RunDir, load_model, restore_checkpoint
from training.run.model_file import policy_tensors, read_model_file
from training.run.session import build_model
from training.train import main

REPO = Path(__file__).resolve().parents[1]
GOOGL = REPO / "data" / "gymanytrading_GOOGL_daily.csv"


def train_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "training.train", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def event_tags(run: Path) -> tuple[set[str], set[str], int]:
    """Scalar tags, histogram tags and the last logged step of a run's TensorBoard events."""
    (folder,) = (run / "tb").iterdir()
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "histograms": 0})
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    last = max(e.step for e in events.Scalars("time/fps"))
    return scalars, set(events.Tags()["histograms"]), last


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("smoke") / "run"
    result = train_cli("--config", "configs/smoke.yaml", "--run-dir", str(run))
    assert result.returncode == 0, result.stderr
    return run


def test_smoke_run_writes_models_report_and_summary(smoke_run):
    for name in (
        "config.yaml",
        "final_model.safetensors",
        "best_model.safetensors",
        "validation.json",
        "report/metrics.json",
        "report/equity.csv",
        "report/trades.csv",
    ):
        assert (smoke_run / name).is_file(), name
    assert RunDir(smoke_run).latest_checkpoint() is not None
    assert not zipfile.is_zipfile(smoke_run / "final_model.safetensors")  # no pickles inside
    assert read_model_file(smoke_run / "final_model.safetensors").num_timesteps == 256
    assert not list(smoke_run.rglob("*.tmp"))  # atomic writes leave no temporary files


def test_tensorboard_logs_every_head_and_the_trading_groups(smoke_run):
    scalars, histograms, _ = event_tags(smoke_run)
    for head in ("direction", "leverage", "risk"):
        assert f"heads/{head}/actions" in histograms
        assert f"heads/{head}/entropy" in scalars
    assert {
        "heads/direction/share_long",
        "heads/direction/share_flat",
        "heads/direction/share_short",
        "heads/leverage/mean",
        "heads/risk/mean_pct",
    } <= scalars
    assert {
        "trading/return_pct",
        "trading/sharpe",
        "trading/max_drawdown_pct",
        "trading/turnover",
        "trading/costs_pct",
        "trading/stops",
        "trading/liquidations",
    } <= scalars
    assert {"eval/sharpe", "eval/total_return_pct", "eval/max_drawdown_pct"} <= scalars


def test_resume_restores_weights_optimizer_and_step_count_in_the_same_tensorboard_run(tmp_path):
    """A smoke run of 256 steps (checkpoints at 128 and 256), resumed to 512: the model `fit`
    builds from the run's config gets the checkpoint's weights, Adam state and step count before
    learning continues, and the run goes on in the same TensorBoard folder."""
    run = tmp_path / "resumed"
    result = train_cli("--config", "configs/smoke.yaml", "--run-dir", str(run))
    assert result.returncode == 0, result.stderr
    checkpoint = RunDir(run).latest_checkpoint()
    saved = read_model_file(checkpoint)
    assert checkpoint.name == "checkpoint_256_steps.safetensors" and saved.num_timesteps == 256
    assert saved.optimizer is not None and saved.optimizer["state"]  # Adam moments, step counts

    cfg = load_config(run / "config.yaml")
    env = DummyVecEnv([lambda: TradingEnv(GOOGL, cfg.env)] * cfg.ppo.n_envs)
    model = build_model(cfg, env, RunDir(tmp_path / "scratch"))
    restore_checkpoint(model, checkpoint)  # what `fit` does with --resume, before `learn`
    assert model.num_timesteps == 256
    for name, value in policy_tensors(model.policy).items():
        assert torch.equal(value, saved.policy[name]), name
    state = model.policy.optimizer.state_dict()
    assert state["state"].keys() == saved.optimizer["state"].keys()
    for index, entries in saved.optimizer["state"].items():
        assert state["state"][index].keys() == entries.keys()
        assert all(torch.equal(state["state"][index][k], v) for k, v in entries.items())
    assert json.loads(json.dumps(state["param_groups"])) == saved.optimizer["param_groups"]

    result = train_cli(
        "--resume", str(run), "--set", "train.total_timesteps=512", "--set", "train.threads=2"
    )
    assert result.returncode == 0, result.stderr
    assert "512 timesteps," in result.stdout and "torch CPU threads 2" in result.stdout
    assert f"resuming from {checkpoint} at 256 timesteps" in result.stdout
    assert read_model_file(run / "final_model.safetensors").num_timesteps == 512
    steps = sorted(int(p.name.split("_")[1]) for p in (run / "checkpoints").iterdir())
    assert steps == [128, 256, 384, 512]  # continued on the same schedule
    _, _, last_step = event_tags(run)  # one TensorBoard folder, continued
    assert last_step > 256


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "ppo.learnig_rate=1"], "did you mean 'ppo.learning_rate'"),
        (["--data", "no/such/file.csv"], "no/such/file.csv"),
        (["--set", "env.window=abc"], "env.window"),
        (["--set", "train.threads=0"], "train.threads: expected an integer >= 1 or null"),
        (["--set", "policy.device=cuda"], "policy.device: cuda asked for, but torch"),
        (["--set", "policy.device=gpu"], "expected a torch device such as auto, cpu or cuda"),
    ],
)
def test_user_mistakes_exit_2_with_one_line_and_no_traceback(
    args, message, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on CI, on any machine
    code = main(["--config", "configs/smoke.yaml", "--run-dir", str(tmp_path / "r"), *args])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_data_on_the_command_line_is_found_from_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = resolve_config(REPO / "configs/smoke.yaml", data="x.csv")
    assert data_files(cfg.data) == [tmp_path / "x.csv"]
    both = resolve_config(REPO / "configs/smoke.yaml", data=["x.csv", "y.csv"], ticker=["A", "B"])
    assert data_files(both.data) == [tmp_path / "x.csv", tmp_path / "y.csv"]
    assert both.data.tickers == ("A", "B")
    default = resolve_config(DEFAULT_CONFIG_PATH)  # the default config's data is in the repo
    assert data_files(default.data) == sorted((REPO / "data").glob("*.csv"))


def alternating_market(n: int, seed: int) -> pd.DataFrame:
    """Each bar's move reverses the previous one (with noise): a pattern a good agent exploits."""
    rng = np.random.default_rng(seed)
    moves = 0.01 * np.where(np.arange(n) % 2 == 0, 1.0, -1.0) + rng.normal(0, 0.002, n)
    close = 100 * np.exp(np.cumsum(moves))
    open_ = np.concatenate([[100.0], close[:-1]])
    spread = np.abs(rng.normal(0, 0.002, n))
    return pd.DataFrame(
        {
            "Date": pd.date_range("2010-01-01", periods=n, freq="D"),
            "Open": open_,
            "High": np.maximum(open_, close) * (1 + spread),
            "Low": np.minimum(open_, close) * (1 - spread),
            "Close": close,
            "Volume": np.full(n, 1e6),
        }
    )


def test_agent_learns_an_exploitable_pattern_and_beats_baselines(tmp_path):
    csv = tmp_path / "alternating.csv"
    alternating_market(1200, seed=0).to_csv(csv, index=False)
    run = tmp_path / "run"
    overrides = [
        "train.total_timesteps=12288",
        "train.eval_every=0",
        "env.window=8",
        "ppo.n_envs=16",
        "ppo.n_steps=64",
        "ppo.batch_size=256",
        "ppo.n_epochs=4",
        "ppo.learning_rate=1e-3",
        "env.leverage_levels=[1.0]",
        "env.risk_levels=[0.5]",
        "env.episode_length=64",
    ]
    args = ["--config", "configs/smoke.yaml", "--data", str(csv), "--run-dir", str(run)]
    for override in overrides:
        args += ["--set", override]
    assert main(args) == 0

    cfg = load_config(run / "config.yaml")
    policy = load_model(run / "final_model.safetensors").policy
    test_bars = range(1020, 1200)

    def backtest(policy) -> float:
        env = TradingEnv(str(csv), cfg.env, bars=test_bars, random_start=False, episode_length=None)
        record = record_episode(env, policy, seed=0)
        metrics = compute_metrics(record, trades_from_record(record), bars_per_year=252)
        return metrics["total_return_pct"]

    rng = np.random.default_rng(0)
    agent = backtest(lambda obs: policy.predict(obs, deterministic=True)[0])
    buy_and_hold = backtest(lambda obs: np.array([2, 0, 0]))
    random_agent = backtest(lambda obs: rng.integers(0, [3, 1, 1]))
    print(f"agent {agent:.1f}%, buy-and-hold {buy_and_hold:.1f}%, random {random_agent:.1f}%")
    assert agent > buy_and_hold + 20 and agent > random_agent + 20, (
        agent,
        buy_and_hold,
        random_agent,
    )


def test_a_hold_prior_starts_the_policy_at_buy_and_hold(tmp_path: Path) -> None:
    """`policy.hold_prior` leans the fresh model's heads towards `env.hold_action` (long, the
    level nearest 1x, no stop); without it the initial policy is near uniform."""
    sets = ["env.long_only=true", "env.leverage_levels=[0.5,1]", "env.risk_levels=[0.05,.inf]"]
    for prior, lean in ((0.0, 0.5), (2.0, math.exp(2.0) / (math.exp(2.0) + 1))):
        cfg = load_config(None, [*sets, f"policy.hold_prior={prior}", "policy.device=cpu"])
        assert cfg.env.hold_action == (1, 1, 1)
        env = DummyVecEnv([lambda cfg=cfg: TradingEnv(GOOGL, cfg.env)] * cfg.ppo.n_envs)
        model = build_model(cfg, env, RunDir(tmp_path / f"prior{prior}"))
        heads = model.policy.head_distributions(env.reset()).heads()
        for (name, dist), level in zip(heads.items(), cfg.env.hold_action, strict=True):
            assert dist.probs[0, level].item() == pytest.approx(lean, abs=5e-3), name


def test_a_deployed_leverage_trains_every_level_and_saves_the_policy_pinned_to_one(tmp_path):
    """With `policy.deployed_leverage` training samples every leverage level (TensorBoard's
    shares), while the validated and saved models choose that one level on any window (their
    leverage logits: weights zero, the level's bias `FIXED_LOGIT`); checkpoints keep the head
    as it trains, for `--resume`."""
    run = tmp_path / "run"
    sets = ["--set", "env.leverage_levels=[0.5,1]", "--set", "policy.deployed_leverage=1"]
    code = main(["--config", "configs/smoke.yaml", "--run-dir", str(run), *sets])
    assert code == 0
    (folder,) = (run / "tb").iterdir()
    events = EventAccumulator(str(folder))
    events.Reload()
    for level in ("0.5", "1"):
        shares = [e.value for e in events.Scalars(f"heads/leverage/share_{level}x")]
        assert 0.2 < np.mean(shares) < 0.8, level  # a near-uniform head samples both
    logits = "action_net.leverage.logits"
    for name in ("best_model", "final_model"):
        tensors = read_model_file(run / f"{name}.safetensors").policy
        assert not tensors[f"{logits}.weight"].any(), name
        assert tensors[f"{logits}.bias"].tolist() == [0.0, FIXED_LOGIT], name
    checkpoint = read_model_file(RunDir(run).latest_checkpoint()).policy
    assert checkpoint[f"{logits}.weight"].abs().sum() > 0


def test_a_deployed_leverage_must_be_one_of_the_levels() -> None:
    expected = r"policy.deployed_leverage: expected one of env.leverage_levels \[0.5, 1.0\], got 2"
    with pytest.raises(ConfigError, match=expected):
        load_config(None, ["env.leverage_levels=[0.5,1]", "policy.deployed_leverage=2"])


def test_a_learning_rate_end_makes_the_step_size_fall_linearly(tmp_path: Path) -> None:
    """With `ppo.learning_rate_end` the step size falls linearly from `ppo.learning_rate` at the
    first step to it at the last (SB3 counts progress in timesteps); without, it is constant."""
    sets = ["ppo.n_envs=1", "ppo.n_steps=8", "ppo.batch_size=8", "ppo.n_epochs=1"]
    sets += ["ppo.learning_rate=3e-4", "policy.device=cpu", "env.window=8"]
    for end, halfway, last in ((None, 3e-4, 3e-4), (1e-4, 2e-4, 1e-4)):
        cfg = load_config(None, [*sets, f"ppo.learning_rate_end={'null' if end is None else end}"])
        env = DummyVecEnv([lambda cfg=cfg: TradingEnv(GOOGL, cfg.env)])
        model = build_model(cfg, env, RunDir(tmp_path / f"end{end}"))
        assert model.lr_schedule(1.0) == pytest.approx(3e-4)
        assert model.lr_schedule(0.5) == pytest.approx(halfway)
        assert model.lr_schedule(0.0) == pytest.approx(last)
        model.learn(16)  # two rollouts of 8: the last update comes with none of the run left
        (group,) = model.policy.optimizer.param_groups
        assert group["lr"] == pytest.approx(last)


def test_a_model_built_without_a_run_folder_writes_no_logs_anywhere(tmp_path, monkeypatch):
    """`build_model` with no run folder (benchmarks that time or probe a model) learns with a
    logger that writes nothing: no TensorBoard events, and none of the empty folders SB3 makes
    in the system's temporary directory (named SB3-<time>) for a model left to its own
    logger."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    sets = ["ppo.n_envs=1", "ppo.n_steps=8", "ppo.batch_size=8", "ppo.n_epochs=1"]
    cfg = load_config(None, [*sets, "policy.device=cpu", "env.window=8"])
    env = DummyVecEnv([lambda: TradingEnv(GOOGL, cfg.env)])
    model = build_model(cfg, env, None)
    model.learn(16)
    assert model.tensorboard_log is None and model.logger.output_formats == []
    assert not [folder.name for folder in scratch.iterdir() if folder.name.startswith("SB3-")]
