"""Run configuration: shipped files, overrides, one-line errors, save/load round trip."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import yaml

from training.config import (
    DEFAULT_CONFIG_PATH,
    REPO_ROOT,
    ConfigError,
    RunConfig,
    config_to_dict,
    load_config,
    save_config,
)

CONFIGS = REPO_ROOT / "configs"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "x.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def error(path: Path | None, text: str | None = None, overrides: tuple[str, ...] = ()) -> str:
    """The one-line message of the `ConfigError` that loading raises."""
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name", ["default", "smoke", "gpu"])
def test_shipped_configs_load(name: str) -> None:
    cfg = load_config(CONFIGS / f"{name}.yaml")
    assert not hasattr(cfg.trunk, "window"), "the trunk's window is the env's"
    assert cfg.train.name == name
    raw = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    assert "window" not in raw.get("trunk", {}), "window is set in env only"


def test_shipped_values() -> None:
    assert DEFAULT_CONFIG_PATH == CONFIGS / "default.yaml"
    smoke = load_config(CONFIGS / "smoke.yaml")
    assert (smoke.env.window, smoke.env.episode_length) == (16, 64)
    assert (smoke.trunk.d_model, smoke.trunk.n_heads, smoke.trunk.n_layers) == (16, 2, 1)
    assert (smoke.ppo.n_envs, smoke.ppo.n_steps, smoke.ppo.batch_size) == (4, 32, 64)
    assert (smoke.train.total_timesteps, smoke.train.progress_bar) == (256, False)
    gpu = load_config(CONFIGS / "gpu.yaml")
    assert (gpu.policy.device, gpu.policy.bf16, gpu.ppo.batch_size) == ("cuda", True, 4096)
    default = load_config(DEFAULT_CONFIG_PATH)  # the learning benchmark's C170 (RESULTS.md)
    assert default.train.total_timesteps == 150_000 and default.ppo.gamma == 0.5
    assert default.ppo.learning_rate == 1e-4 and default.train.feature_noise == 0.0
    assert (default.train.resampled_paths, default.train.resample_block) == (3, 128)
    assert default.train.resample_method == "permutation" and default.train.resample_detrend == 0
    assert (default.train.eval_every, default.train.eval_start) == (15_000, 60_000)
    assert default.train.restarts == 2 and default.train.vote
    assert default.train.challenger_margin == 1.0
    assert default.train.hold_margin == 1.0 and default.train.select_by == "growth"
    assert default.train.challenger == ("train.direction_outcomes=0.2",)
    assert default.train.direction_teacher == 1.0 and default.train.direction_outcomes == 0.0
    assert (default.env.resize_band, default.env.turnover_penalty) == (0.25, 0.001)
    assert default.env.long_only and default.env.leverage_levels == (1.0,)
    assert (default.trunk.n_layers, default.env.decision_interval) == (1, 5)
    assert default.env.momentum_horizons == (16, 64)
    assert default.env.risk_levels == (0.05, 0.1, 0.2, math.inf)
    assert (default.env.volatility_target, default.env.volatility_target_window) == (0.35, 10)


def test_no_file_and_empty_file_give_the_defaults(tmp_path: Path) -> None:
    assert load_config() == RunConfig()
    assert load_config(write(tmp_path, "")) == RunConfig()
    assert load_config(write(tmp_path, "ppo:\n")) == RunConfig()


def test_file_keeps_defaults_for_missing_keys(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "ppo:\n  n_epochs: 10\n"))
    assert cfg.ppo.n_epochs == 10
    assert cfg.ppo == dataclasses.replace(RunConfig().ppo, n_epochs=10)


def test_overrides_parse_yaml_values_and_beat_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "ppo:\n  learning_rate: 0.001\n")
    cfg = load_config(
        path,
        [
            "ppo.learning_rate=1e-4",
            "env.leverage_levels=[1,2]",
            "env.bars_per_year=null",
            "ppo.target_kl=0.02",
            "env.reward=differential_sharpe",
            "data.ticker=AAPL",
        ],
    )
    assert cfg.ppo.learning_rate == 1e-4 and isinstance(cfg.ppo.learning_rate, float)
    assert cfg.env.leverage_levels == (1.0, 2.0)
    assert cfg.env.bars_per_year is None
    assert cfg.ppo.target_kl == 0.02
    assert cfg.env.reward == "differential_sharpe"
    assert cfg.data.ticker == "AAPL"


def test_the_trunk_shape_the_data_decides_is_not_a_config_key(tmp_path: Path) -> None:
    cfg = load_config(None, ["env.window=24"])
    assert cfg.env.window == 24 and "window" not in config_to_dict(cfg)["trunk"]
    message = error(None, overrides=("env.window=24", "trunk.window=48"))
    derived = "not a config key any more, the trunk reads env.window; delete it"
    assert message == f"--set: trunk.window: {derived}"
    saved_before = write(tmp_path, "env:\n  window: 16\ntrunk:\n  n_features: 5\n")  # old run
    message = error(saved_before)
    assert message.startswith(f"{saved_before}: trunk.n_features: not a config key any more")


def test_exponent_numbers_that_pyyaml_reads_as_strings(tmp_path: Path) -> None:
    # PyYAML (YAML 1.1) reads 2e5 and 3e-4 as strings; 2.0e+5 as a float.
    path = write(tmp_path, "ppo:\n  learning_rate: 3e-4\ntrain:\n  total_timesteps: 2e5\n")
    cfg = load_config(path, ["train.checkpoint_every=2.0e+4"])
    assert cfg.ppo.learning_rate == 3e-4
    assert cfg.train.total_timesteps == 200_000 and type(cfg.train.total_timesteps) is int
    assert cfg.train.checkpoint_every == 20_000 and type(cfg.train.checkpoint_every) is int
    assert load_config(None, ["ppo.clip_range=1"]).ppo.clip_range == 1.0


def test_unknown_key_suggests_the_closest(tmp_path: Path) -> None:
    path = write(tmp_path, "ppo:\n  learnig_rate: 1e-4\n")
    assert error(path) == (
        f"{path}: unknown key 'ppo.learnig_rate' (did you mean 'ppo.learning_rate'?)"
    )
    message = error(None, overrides=("train.learning_rate=1e-4",))
    assert message == "--set: unknown key 'train.learning_rate' (did you mean 'ppo.learning_rate'?)"
    assert error(None, overrides=("ppo.zzz=1",)) == "--set: unknown key 'ppo.zzz'"


def test_unknown_section(tmp_path: Path) -> None:
    path = write(tmp_path, "poo:\n  n_envs: 4\n")
    assert error(path) == f"{path}: unknown section 'poo' (did you mean 'ppo'?)"


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("ppo:\n  n_steps: abc\n", "ppo.n_steps: expected int, got 'abc' (str)"),
        ("ppo:\n  n_steps: 12.5\n", "ppo.n_steps: expected int, got 12.5 (float)"),
        ("ppo:\n  n_envs: true\n", "ppo.n_envs: expected int, got True (bool)"),
        ("ppo:\n  gamma: [0.9, 0.99]\n", "ppo.gamma: expected float, got [0.9, 0.99] (list)"),
        ("ppo:\n  gamma: yes\n", "ppo.gamma: expected float, got True (bool)"),
        ("train:\n  progress_bar: 1\n", "train.progress_bar: expected bool, got 1 (int)"),
        ("train:\n  name: 7\n", "train.name: expected str, got 7 (int)"),
        ("ppo:\n  target_kl: high\n", "ppo.target_kl: expected float or null, got 'high' (str)"),
        (
            "env:\n  leverage_levels: 2\n",
            "env.leverage_levels: expected a list of float, got 2 (int)",
        ),
        (
            "env:\n  risk_levels: [0.01, x]\n",
            "env.risk_levels: expected a list of float, got [0.01, 'x'] (list)",
        ),
        ("ppo: 3\n", "ppo: expected a mapping of keys, got 3 (int)"),
    ],
)
def test_wrong_types_name_file_key_and_expectation(
    tmp_path: Path, yaml_text: str, expected: str
) -> None:
    path = write(tmp_path, yaml_text)
    assert error(path) == f"{path}: {expected}"


def test_literal_lists_the_allowed_values(tmp_path: Path) -> None:
    path = write(tmp_path, "trunk:\n  pooling: max\n")
    assert error(path) == (
        f"{path}: trunk.pooling: expected one of 'last', 'mean', 'cls', got 'max' (str)"
    )
    message = error(None, overrides=("env.reward=sharpe",))
    assert message.startswith("--set: env.reward: expected one of 'log_return', ")
    assert load_config(None, ["trunk.pooling=mean"]).trunk.pooling == "mean"


def test_none_able_fields(tmp_path: Path) -> None:
    path = write(tmp_path, "env:\n  episode_length: null\n  bars_per_year: 252\n")
    cfg = load_config(path)
    assert cfg.env.episode_length is None
    assert cfg.env.bars_per_year == 252.0 and isinstance(cfg.env.bars_per_year, float)
    assert load_config(None, ["train.run_dir=runs/x"]).train.run_dir == "runs/x"


def test_dataclass_own_validation_becomes_config_error(tmp_path: Path) -> None:
    path = write(tmp_path, "env:\n  window: 1\n")
    assert error(path) == f"{path}: env.window: expected an integer >= 2, got 1"
    path = write(tmp_path, "env:\n  momentum_horizons: [64, 64]\n")
    assert error(path) == (
        f"{path}: env.momentum_horizons: expected a list of distinct integers >= 1, got (64, 64)"
    )
    assert load_config(None, ["env.momentum_horizons=[16,64]"]).env.feature_names[-2:] == (
        "momentum_16",
        "momentum_64",
    )
    path = write(tmp_path, "env:\n  leverage_levels: [0.5, 1, 2]\n  resize_band: 0.5\n")
    assert error(path).startswith(
        f"{path}: env.resize_band: expected a number < 0.5 with leverage_levels [0.5, 1.0, 2.0] "
    )  # at 0.5, a held 1x position could never be resized to 2x: |2 - 1| is not > 0.5 x 2
    levels = load_config(None, ["env.leverage_levels=[1,1.25]"]).env
    assert levels.max_resize_band == pytest.approx(0.2)
    message = error(None, overrides=("env.decision_interval=0",))
    assert message == "--set: env.decision_interval: expected an integer >= 1, got 0"
    assert load_config(None, ["env.decision_interval=5"]).env.decision_interval == 5
    message = error(None, overrides=("env.volatility_target=0",))
    assert message.startswith("--set: env.volatility_target: expected a positive number")
    assert load_config(None, ["env.volatility_target=0.2"]).env.volatility_target == 0.2
    message = error(None, overrides=("env.volatility_target_window=1",))
    assert message == "--set: env.volatility_target_window: expected an integer >= 2, got 1"
    message = error(None, overrides=("train.resample_detrend=1.5",))
    assert (
        message == "--set: train.resample_detrend: expected a share of the drift, 0 to 1, got 1.5"
    )
    assert load_config(None, ["train.resample_detrend=1"]).train.resample_detrend == 1.0
    message = error(None, overrides=("ppo.learning_rate_end=-1",))
    assert message == "--set: ppo.learning_rate_end: expected a number >= 0 or null, got -1.0"
    assert load_config(None, ["ppo.learning_rate_end=1e-5"]).ppo.learning_rate_end == 1e-5
    message = error(None, overrides=("policy.hold_prior=-1",))
    assert message == "--set: policy.hold_prior: expected a number >= 0, got -1.0"
    path = write(tmp_path, "env:\n  maintenance_margin: 0.3\n")
    assert error(path).startswith(f"{path}: env.maintenance_margin: expected ")
    path = write(tmp_path, "ppo:\n  batch_size: 100\n")
    assert error(path) == (
        f"{path}: ppo.batch_size: expected a divisor of ppo.n_envs * ppo.n_steps = 2048, got 100"
    )
    path = write(tmp_path, "data:\n  validation: 0.6\n  test: 0.5\n")
    assert error(path) == f"{path}: data.test: expected validation + test < 1, got 0.5"
    path = write(tmp_path, "trunk:\n  d_model: 30\n  n_heads: 4\n")
    assert error(path) == f"{path}: trunk.d_model: expected a multiple of trunk.n_heads (4), got 30"


def test_override_errors_name_set(tmp_path: Path) -> None:
    path = write(tmp_path, "ppo:\n  n_steps: 64\n")
    assert error(path, overrides=("ppo.n_steps=abc",)) == (
        "--set: ppo.n_steps: expected int, got 'abc' (str)"
    )
    assert error(path, overrides=("ppo.gamma=2",)).startswith("--set: ppo.gamma: expected ")
    assert error(None, overrides=("ppo.n_steps",)).startswith("--set: expected KEY=VALUE")
    assert error(path, overrides=("ppo.n_steps.x=1",)) == (
        "--set: ppo.n_steps: expected a mapping of keys, got 64 (int)"
    )


def test_bad_files(tmp_path: Path) -> None:
    assert error(tmp_path / "missing.yaml") == f"{tmp_path / 'missing.yaml'}: no such config file"
    path = write(tmp_path, "- 1\n- 2\n")
    assert error(path) == f"{path}: expected a mapping of sections, got [1, 2] (list)"
    path = write(tmp_path, "ppo:\n  n_steps: [1, 2\n")
    assert error(path).startswith(f"{path}: invalid YAML (line ")


def test_extends_reads_the_base_file_first_and_merges_each_section(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(
        "ppo:\n  n_epochs: 7\n  gamma: 0.5\ntrain:\n  name: base\n", encoding="utf-8"
    )
    (tmp_path / "mid.yaml").write_text("extends: base.yaml\nppo:\n  gamma: 0.7\n", encoding="utf-8")
    path = write(tmp_path, "extends: mid.yaml\ntrain:\nppo:\n  n_steps: 64\n")  # empty train:
    cfg = load_config(path, ["train.name=top"])
    assert (cfg.ppo.n_epochs, cfg.ppo.gamma, cfg.ppo.n_steps) == (7, 0.7, 64)
    assert cfg.train.name == "top" and load_config(path).train.name == "base"
    assert cfg.ppo.learning_rate == RunConfig().ppo.learning_rate  # set by no file


def test_extends_mistakes_name_the_file_they_are_in(tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text("ppo:\n  n_steps: abc\n", encoding="utf-8")
    path = write(tmp_path, "extends: base.yaml\n")
    assert error(path) == f"{base}: ppo.n_steps: expected int, got 'abc' (str)"
    path = write(tmp_path, "extends: base.yaml\nppo:\n  n_steps: 64\n")
    assert load_config(path).ppo.n_steps == 64  # the top file's value replaces the bad one
    path = write(tmp_path, "extends: nope.yaml\n")
    assert error(path) == f"{path}: extends: {tmp_path / 'nope.yaml'}: no such config file"
    path = write(tmp_path, "extends: [base.yaml]\n")
    assert (
        error(path)
        == f"{path}: extends: expected the path of a YAML config, got ['base.yaml'] (list)"
    )
    base.write_text("extends: x.yaml\n", encoding="utf-8")
    path = write(tmp_path, "extends: base.yaml\n")
    assert "extends: a cycle of config files" in error(path)


def test_the_gpu_config_is_the_default_run_with_gpu_shapes() -> None:
    default, gpu = load_config(DEFAULT_CONFIG_PATH), load_config(CONFIGS / "gpu.yaml")
    assert (gpu.data, gpu.ppo.gamma, gpu.ppo.learning_rate) == (
        default.data,
        default.ppo.gamma,
        default.ppo.learning_rate,
    )
    assert dataclasses.replace(gpu.env, window=default.env.window) == default.env
    same = ("select_by", "challenger", "hold_margin", "resampled_paths", "direction_teacher")
    assert all(getattr(gpu.train, key) == getattr(default.train, key) for key in same)
    assert (gpu.env.window, gpu.trunk.n_layers, gpu.ppo.n_envs) == (128, 4, 256)


def test_yaml_dates_become_iso_strings(tmp_path: Path) -> None:
    path = write(tmp_path, "data:\n  validation_start: 2016-01-04\n  test_start: '2018-01-02'\n")
    cfg = load_config(path)
    assert (cfg.data.validation_start, cfg.data.test_start) == ("2016-01-04", "2018-01-02")
    path = write(tmp_path, "data:\n  validation_start: 2018-01-04\n  test_start: 2016-01-02\n")
    assert error(path).startswith(f"{path}: data.test_start: expected a date after ")
    path = write(tmp_path, "data:\n  test_start: soon\n")
    assert error(path).startswith(f"{path}: data.test_start: expected an ISO date")


def test_save_load_round_trip(tmp_path: Path) -> None:
    cfg = load_config(
        CONFIGS / "smoke.yaml",
        ["env.leverage_levels=[1, 1.5]", "env.bars_per_year=252", "ppo.target_kl=null"],
    )
    path = save_config(cfg, tmp_path / "run" / "config.yaml")
    assert load_config(path) == cfg
    assert [p.name for p in path.parent.iterdir()] == ["config.yaml"]  # no temp file left
    saved = yaml.safe_load(path.read_text())
    assert saved == config_to_dict(cfg)
    assert saved["env"]["leverage_levels"] == [1.0, 1.5]
    assert list(saved) == ["data", "env", "trunk", "policy", "ppo", "train"]
    save_config(RunConfig(), path)  # overwrites in place
    assert load_config(path) == RunConfig()
