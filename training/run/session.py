"""The one training path: torch set-up, the PPO model and its `learn` call on a range of bars.

`training.train` (a run with checkpoints and validation) and `training.walkforward` (one model per
fold) both train through `fit`; they differ only in the callbacks they add and in whether a
checkpoint is resumed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.utils import LinearSchedule, set_random_seed
from stable_baselines3.common.vec_env import VecEnv, VecMonitor, VecNormalize

from agent import MultiHeadPolicy, policy_of
from envs import BatchedTradingEnv, MarketData
from envs.core import TradingCore
from training.config import ConfigError, RunConfig
from training.run.augment import FeatureNoise, resampled_path
from training.run.balance import DirectionBalance, balance_applies
from training.run.callbacks import HeadMonitor, InterruptCheck, TradingMonitor
from training.run.folder import RunDir, policy_kwargs, restore_checkpoint
from training.run.interrupt import remembered_ctrl_c
from training.run.outcomes import DirectionOutcomes
from training.run.teacher import DirectionTeacher, describe_teacher, momentum_teacher

TB_RUN_NAME = "train"  # TensorBoard run name: events go to <run>/tb/train_1, continued on resume


def prepare_torch(cfg: RunConfig) -> None:
    """Seed Python, NumPy and torch, and set torch's CPU threads when `train.threads` is set.

    Raises `ConfigError` (one line) for a `policy.device` torch cannot use here: SB3 would run a
    CUDA device it cannot see on the CPU without a word, and `configs/gpu.yaml`'s trunk there
    would take hours instead of minutes."""
    check_device(cfg.policy.device)
    set_random_seed(cfg.train.seed)
    if cfg.train.threads is not None:
        torch.set_num_threads(cfg.train.threads)


def check_device(name: str) -> None:
    """Raise `ConfigError` unless `name` ("auto", "cpu", "cuda", "cuda:1", ...) is a torch device
    this machine has; "auto" always is (CUDA when torch sees a GPU, else the CPU)."""
    if name == "auto":
        return
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(
            f"policy.device: expected a torch device such as auto, cpu or cuda, got {name!r}"
        ) from None
    if device.type != "cuda":
        return
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0 or (device.index or 0) >= count:
        raise ConfigError(
            f"policy.device: {name} asked for, but torch {torch.__version__} sees "
            f"{count or 'no'} GPU{'s' if count != 1 else ''} here; set policy.device to cpu or auto"
        )


def ppo_arguments(cfg: RunConfig) -> dict[str, Any]:
    """The keyword arguments of SB3's `PPO` that `cfg.ppo` sets: every field but those that shape
    the env (`n_envs`, the number of accounts; `normalize_reward`, a wrapper `fit` adds).

    With `ppo.learning_rate_end` set, `learning_rate` is SB3's `LinearSchedule` from
    `learning_rate` at the first step to `learning_rate_end` at `train.total_timesteps` (SB3
    counts progress against the run's total, so a resumed run carries on where it stopped)."""
    ppo = dataclasses.asdict(cfg.ppo)
    ppo.pop("n_envs")
    ppo.pop("normalize_reward")
    end = ppo.pop("learning_rate_end")
    if end is not None:
        ppo["learning_rate"] = LinearSchedule(cfg.ppo.learning_rate, end, end_fraction=1.0)
    return ppo


def without_logs(model: PPO) -> PPO:
    """`model`, its SB3 logger set to write nothing: left to itself, SB3 makes an empty folder in
    the system's temporary directory for every model that learns without TensorBoard."""
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def build_model(cfg: RunConfig, env: VecEnv, run: RunDir | None) -> PPO:
    """PPO with the multi-head policy, configured from `cfg`; TensorBoard logs in `run`, or no
    logs at all where `run` is None (`without_logs`: benchmarks that time or probe a model).

    With `policy.hold_prior` > 0 the fresh policy leans towards buy-and-hold's action
    (`DecisionHeads.lean_towards`): absent evidence, the agent starts by holding the market."""
    model = PPO(
        MultiHeadPolicy,
        env,
        policy_kwargs=policy_kwargs(cfg),
        seed=cfg.train.seed,
        device=cfg.policy.device,
        tensorboard_log=None if run is None else str(run.tensorboard),
        verbose=0,
        **ppo_arguments(cfg),
    )
    if run is None:
        without_logs(model)
    if cfg.policy.hold_prior > 0:
        policy_of(model).decision_heads.lean_towards(cfg.env.hold_action, cfg.policy.hold_prior)
    return model


def fit(
    cfg: RunConfig,
    ranges: Sequence[tuple[MarketData, range]],
    run: RunDir,
    *,
    callbacks: Sequence[BaseCallback] = (),
    checkpoint: Path | None = None,
) -> PPO:
    """A model trained on `ranges` ((market, bars) pairs) up to `cfg.train.total_timesteps`.

    `cfg.ppo.n_envs` accounts step together (`BatchedTradingEnv`, seeded with `train.seed`) on
    one core over every range (`TradingCore.stacked`): each episode trades one instrument. With
    `train.resampled_paths` = K, K copies of each range in blocks of `train.resample_block` bars
    (`resampled_path` with `train.resample_method`, drawn from a generator seeded with
    `train.seed`) are trained on beside the real ones.
    The model is fresh, or continued from `checkpoint` (a model file with the optimizer state,
    `training.run.folder.restore_checkpoint`) in the same TensorBoard run. The per-head
    and trading monitors (`heads/...`, `trading/...`) always log; `callbacks` run after them.
    With `train.direction_outcomes` or `train.direction_teacher` > 0 the direction head also
    learns, after each PPO update, what every level paid (`training.run.outcomes`) or what a
    linear model of the real ranges' bars establishes (`training.run.teacher`; fitted here, and
    said in one printed line, before training); with `train.direction_balance` > 0 it is also
    kept from settling on one level early (`training.run.balance`; whether it is, where
    `train.direction_balance_evidence` asks the bars first, is printed).
    TensorBoard logs go to `run.tensorboard`; nothing is saved here.
    """
    real_ranges = len(ranges)  # the copies follow them
    balance = balance_applies(cfg, ranges)
    if cfg.train.direction_balance > 0:
        level = cfg.train.direction_balance_evidence
        off = f"off: no test of the training bars finds returns predicting at p < {level}"
        print(f"direction balance loss: {'on' if balance else off}")
    if cfg.train.resampled_paths:  # more paths of the same bars (`resampled_path`)
        rng = np.random.default_rng(cfg.train.seed)
        block, method = cfg.train.resample_block, cfg.train.resample_method
        detrend = cfg.train.resample_detrend
        copies = [
            (resampled_path(market, bars, block, rng, method, detrend=detrend), range(len(bars)))
            for _ in range(cfg.train.resampled_paths)
            for market, bars in ranges
        ]
        ranges = [*ranges, *copies]
    outcomes = cfg.train.direction_outcomes
    core = TradingCore.stacked(ranges, cfg.env)
    env = BatchedTradingEnv(core, n_envs=cfg.ppo.n_envs, direction_rewards=outcomes > 0)
    env.seed(cfg.train.seed)
    monitored: VecEnv = VecMonitor(env)
    if cfg.train.feature_noise > 0:
        monitored = FeatureNoise(monitored, cfg.train.feature_noise, cfg.train.seed)
    if cfg.ppo.normalize_reward:  # rewards only: observations are volatility-scaled already
        monitored = VecNormalize(monitored, norm_obs=False, gamma=cfg.ppo.gamma)
    model = build_model(cfg, monitored, run)
    if checkpoint is not None:  # its tensors, optimizer state and timestep count; no code
        restore_checkpoint(model, checkpoint)
        print(f"resuming from {checkpoint} at {model.num_timesteps:,} timesteps")
    remaining = cfg.train.total_timesteps - model.num_timesteps
    if remaining > 0:
        monitors: list[BaseCallback] = [InterruptCheck(), HeadMonitor(cfg.env), TradingMonitor()]
        if outcomes > 0:  # the direction head also learns from the levels it did not take
            monitors.append(DirectionOutcomes(outcomes, cfg.ppo.batch_size, cfg.train.seed))
        if balance:  # no collapse onto one level early (run/balance.py)
            until = round(cfg.train.direction_balance_until * cfg.train.total_timesteps)
            monitors.append(
                DirectionBalance(
                    cfg.train.direction_balance, until, cfg.ppo.batch_size, cfg.train.seed
                )
            )
        if cfg.train.direction_teacher > 0:  # what the training bars establish (run/teacher.py)
            teacher = momentum_teacher(core, real_ranges, cfg.env)
            print(describe_teacher(teacher))
            if teacher is not None and teacher.teaches:
                monitors.append(
                    DirectionTeacher(
                        cfg.train.direction_teacher,
                        cfg.ppo.batch_size,
                        cfg.train.seed,
                        teacher,
                        cfg.env.direction_sides,
                    )
                )
        with remembered_ctrl_c():  # a Ctrl-C a library swallows still stops training
            model.learn(
                remaining,
                callback=CallbackList([*monitors, *callbacks]),
                tb_log_name=TB_RUN_NAME,
                reset_num_timesteps=checkpoint is None,
                progress_bar=cfg.train.progress_bar,
                log_interval=cfg.train.log_interval,
            )
    return model
