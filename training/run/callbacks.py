"""SB3 callbacks: per-head and trading TensorBoard logs, validation, checkpoints, head importance.

TensorBoard tags are grouped by namespace:
`heads/<direction|leverage|risk>/...` (one rollout's actions), `trading/...` (training episodes),
`eval/...` (the validation range), `generalization/...` (training episodes' Sharpe against
validation's), `attention/importance/...` (head importance), next to SB3's
own `train/...`, `rollout/...`, `time/...`.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.buffers import DictRolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import HParam, Image

from agent import policy_of
from envs import EnvConfig, TradingEnv
from envs.config import HEAD_NAMES
from training.attention.importance import batch_from_rollout, head_importance
from training.attention.plots import figure_array, importance_figure
from training.config import SelectBy
from training.evaluation.validation import passes_since_best, validate
from training.run.folder import RunDir, save_model_atomic
from training.run.interrupt import interrupt_pending

IMPORTANCE_NAMESPACE = "attention/importance"
_TENSORBOARD_ONLY = ("stdout", "log", "json", "csv")  # histograms and images: TensorBoard alone
# Rollout observations used to measure each head's mean entropy: enough for a smooth curve, at a
# small share of training time (a whole rollout was not: benchmarks/RESULTS.md).
_ENTROPY_SAMPLE = 512


class InterruptCheck(BaseCallback):
    """Raise KeyboardInterrupt at the next step once a Ctrl-C was received but swallowed on the
    way (`training.run.interrupt`): a Ctrl-C always stops training."""

    def _on_step(self) -> bool:
        if interrupt_pending():
            raise KeyboardInterrupt
        return True


class HeadMonitor(BaseCallback):
    """Logs what each decision head did in the last rollout, under `heads/<name>/...`.

    Per head: a histogram of its actions, its mean entropy on the rollout's observations, and the
    share of each action (`share_no_stop` for an `inf` risk level); plus the mean chosen
    leverage (while in a position) and risk (while in a position with a stop).
    """

    def __init__(self, env_config: EnvConfig) -> None:
        super().__init__()
        self.env_config = env_config

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        buffer = _rollout_buffer(self.model)
        actions = buffer.actions.reshape(-1, 3).astype(np.int64)  # [n_steps * n_envs, 3]
        config = self.env_config
        direction, leverage, risk = actions[:, 0], actions[:, 1], actions[:, 2]
        for name, column in zip(HEAD_NAMES, actions.T, strict=True):
            self.logger.record(f"heads/{name}/actions", column, exclude=_TENSORBOARD_ONLY)
        for index, label in enumerate(config.direction_names):
            self.logger.record(f"heads/direction/share_{label}", float(np.mean(direction == index)))
        in_position = direction != config.flat_direction_index
        levels = np.asarray(config.leverage_levels)[leverage]
        risks = np.asarray(config.risk_levels)[risk]
        if in_position.any():
            self.logger.record("heads/leverage/mean", float(levels[in_position].mean()))
        with_stop = in_position & np.isfinite(risks)  # inf is no stop: its share below
        if with_stop.any():
            self.logger.record("heads/risk/mean_pct", float(risks[with_stop].mean() * 100))
        for index, level in enumerate(config.leverage_levels):
            self.logger.record(
                f"heads/leverage/share_{level:g}x", float(np.mean(leverage == index))
            )
        for index, level in enumerate(config.risk_levels):
            label = f"{level * 100:g}pct" if np.isfinite(level) else "no_stop"
            self.logger.record(f"heads/risk/share_{label}", float(np.mean(risk == index)))
        for name, entropy in self._entropies(buffer).items():
            self.logger.record(f"heads/{name}/entropy", entropy)

    def _entropies(self, buffer: DictRolloutBuffer) -> dict[str, float]:
        n = buffer.buffer_size * buffer.n_envs
        pick = np.random.default_rng(self.num_timesteps).choice(n, min(n, _ENTROPY_SAMPLE), False)
        obs = {
            key: th.as_tensor(value.reshape(n, *value.shape[2:])[pick], device=self.model.device)
            for key, value in buffer.observations.items()
        }
        with th.no_grad():
            distribution = policy_of(self.model).head_distributions(obs)
            return {name: float(h.mean()) for name, h in distribution.entropy_per_head().items()}


class TradingMonitor(BaseCallback):
    """Averages the trading summaries of training episodes that ended in a rollout: `trading/...`.

    Episode return, Sharpe, max drawdown, turnover, costs, stops and liquidations. An episode
    without volatility has no Sharpe ratio (NaN): the mean is over the episodes that have one.
    """

    def __init__(self) -> None:
        super().__init__()
        self._episodes: dict[str, list[float]] = defaultdict(list)

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            summary = info.get("episode_trading")
            if summary:
                for key, value in summary.items():
                    self._episodes[key].append(value)
        return True

    def _on_rollout_end(self) -> None:
        if not self._episodes:
            return
        with warnings.catch_warnings():  # a key that is NaN in every episode averages to NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            for key, values in self._episodes.items():
                self.logger.record(f"trading/{key}", float(np.nanmean(values)))
        self.logger.record("trading/episodes", len(self._episodes["steps"]))
        self._episodes.clear()


def due_after(timesteps: int, every: int, start: int = 0) -> int:
    """The first multiple of `every` after `timesteps` and at or after `start`: when periodic
    work (a checkpoint, a validation pass) next falls due."""
    return max((timesteps // every + 1) * every, -(-start // every) * every)


class PeriodicCallback(BaseCallback):
    """A callback with work due at each multiple of `every` timesteps from `start` on, also
    after a resume."""

    def __init__(self, every: int, start: int = 0) -> None:
        super().__init__()
        if every < 1:
            raise ValueError(f"every must be >= 1 timestep, got {every}")
        if start < 0:
            raise ValueError(f"start must be >= 0 timesteps, got {start}")
        self.every = every
        self.start = start
        self._next = due_after(0, every, start)

    def _init_callback(self) -> None:
        # The model's count: the callback's own is still 0 here, also when a run is resumed.
        self._next = due_after(self.model.num_timesteps, self.every, self.start)

    def _due(self) -> bool:
        """True once each time the timestep count reaches the next multiple of `every`."""
        if self.num_timesteps < self._next:
            return False
        self._next = due_after(self.num_timesteps, self.every, self.start)
        return True

    def _on_step(self) -> bool:
        return True


_NOT_LOGGED = ("timesteps", "train_episode_sharpe", "generalization_gap", "score_standard_error")


class ValidationCallback(PeriodicCallback):
    """Every `every` timesteps from `start` on, a validation pass
    (`training.evaluation.validation.validate`). Skipping the passes before `start` is a
    warm-up: a policy a few updates from its near-uniform start can win a validation range by
    luck, and is then the model kept.

    It backtests the deterministic policy on every instrument's validation range, keeps
    `best_model.safetensors` (the best pass by `select_by`) and `validation.json` in `run`, and
    logs the metrics under `eval/<metric>` (`eval/score` the one passes are ranked by; each
    instrument's Sharpe and return under `eval/<instrument>/...` when there are several) and the
    generalization gap under `generalization/...`: the mean Sharpe ratio of the training
    episodes that ended since the last pass, the validation Sharpe, and their difference. With
    `patience` > 0, training stops once that many passes in a row have not beaten the best
    validation score (early stopping; the best model is kept either way). With `leverage` (a
    level's index, `RunConfig.deployed_leverage_index`) each pass validates the policy pinned to it.
    """

    def __init__(
        self,
        envs: Mapping[str, TradingEnv],
        run: RunDir,
        every: int,
        patience: int = 0,
        start: int = 0,
        select_by: SelectBy = "sharpe",
        leverage: int | None = None,
    ) -> None:
        super().__init__(every, start)
        self.envs = envs
        self.run = run
        self.patience = patience
        self.select_by = select_by
        self.leverage = leverage
        self._episode_sharpes: list[float] = []

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            summary = info.get("episode_trading")
            if summary:
                self._episode_sharpes.append(summary["sharpe"])
        if not self._due():
            return True
        with warnings.catch_warnings():  # no finite episode Sharpe since the last pass: NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            train_sharpe = float(np.nanmean(self._episode_sharpes or [np.nan]))
        self._episode_sharpes.clear()
        entry = validate(
            self.model, self.envs, self.run, train_sharpe, self.select_by, self.leverage
        )
        for key, value in entry.items():
            if key == "instruments":
                for name, metrics in value.items():
                    for metric in ("sharpe", "total_return_pct"):
                        self.logger.record(f"eval/{name}/{metric}", float(metrics[metric]))
            elif key not in _NOT_LOGGED:
                self.logger.record(f"eval/{key}", float(value))
        self.logger.record("generalization/train_episode_sharpe", train_sharpe)
        self.logger.record("generalization/validation_sharpe", float(entry["sharpe"]))
        self.logger.record("generalization/gap", float(entry["generalization_gap"]))
        return self.patience == 0 or passes_since_best(self.run) < self.patience


class AtomicCheckpoint(PeriodicCallback):
    """Saves `checkpoints/checkpoint_<timesteps>_steps.safetensors` every `every` timesteps,
    atomically: the policy, its optimizer state and the timestep count (what `--resume` reads)."""

    def __init__(self, run: RunDir, every: int) -> None:
        super().__init__(every)
        self.run = run

    def _on_step(self) -> bool:
        if self._due():
            path = self.run.checkpoint(self.num_timesteps)
            save_model_atomic(self.model, path, with_optimizer=True)
        return True


class HyperParameters(BaseCallback):
    """Logs the run's hyper-parameters once, at the start of training (TensorBoard HPARAMS)."""

    def __init__(self, flat_config: dict[str, Any]) -> None:
        super().__init__()
        self.flat_config = {
            k: v if isinstance(v, int | float | str | bool) else str(v)
            for k, v in flat_config.items()
        }

    def _on_training_start(self) -> None:
        metrics = {"eval/sharpe": 0.0, "trading/return_pct": 0.0}
        self.logger.record("hparams", HParam(self.flat_config, metrics), exclude=_TENSORBOARD_ONLY)

    def _on_step(self) -> bool:
        return True


def flatten(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"ppo": {"gamma": 0.99}}` -> `{"ppo.gamma": 0.99}`."""
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


class HeadImportanceCallback(PeriodicCallback):
    """Every `every` timesteps, logs each head's importance on the rollout just collected.

    Scalars ``attention/importance/<target>/layer<l>_head<h>`` (l, h from 0, as in
    `head_gates[l, h]`; targets in `training.attention.importance.TARGETS`) hold the raw
    ``E|dL/dxi|`` on up to `sample_size` transitions of the rollout, with the rollout's own
    advantages and returns (SB3 has computed them when a rollout ends), the model's `ent_coef` and
    `vf_coef`. With `image`, the heatmap of `training.attention.plots.importance_figure` goes under
    ``attention/importance/heatmap``.
    """

    def __init__(self, every: int, sample_size: int = 1024, image: bool = True) -> None:
        super().__init__(every)
        self.sample_size = sample_size
        self.image = image

    def _on_rollout_end(self) -> None:
        if not self._due():
            return
        rng = np.random.default_rng(self.num_timesteps)
        batch = batch_from_rollout(_rollout_buffer(self.model), self.sample_size, rng)
        ppo = _ppo(self.model)
        importance = head_importance(
            policy_of(ppo),
            batch,
            ent_coef=float(ppo.ent_coef),
            vf_coef=float(ppo.vf_coef),
            normalize_advantage=ppo.normalize_advantage,
        )
        for target, values in importance.items():
            for (layer, head), value in np.ndenumerate(values):
                if np.isfinite(value):
                    tag = f"{IMPORTANCE_NAMESPACE}/{target}/layer{layer}_head{head}"
                    self.logger.record(tag, float(value))
        if self.image:
            figure = importance_figure(importance, f"E|dL/dxi| at {self.num_timesteps:,} steps")
            picture = Image(figure_array(figure), "HWC")
            self.logger.record(
                f"{IMPORTANCE_NAMESPACE}/heatmap", picture, exclude=_TENSORBOARD_ONLY
            )


def _ppo(model: BaseAlgorithm) -> PPO:
    """The model the callbacks of this module serve: a PPO (SB3 types it as its base class)."""
    if not isinstance(model, PPO):
        raise TypeError(f"expected a PPO model, got a {type(model).__name__}")
    return model


def _rollout_buffer(model: BaseAlgorithm) -> DictRolloutBuffer:
    """The PPO rollout buffer just filled (of Dict observations: a `DictRolloutBuffer`)."""
    buffer = _ppo(model).rollout_buffer
    assert isinstance(buffer, DictRolloutBuffer)  # the envs' observations are a Dict space
    return buffer
