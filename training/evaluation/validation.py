"""Validation of a run: a backtest of the deterministic policy on the validation range.

`validate` is one pass. The run folder holds its state, so a resumed run continues it:
`validation.json` lists every pass's metrics, and `best_model.zip` is the model of the pass with
the best finite Sharpe ratio so far. `training.run.callbacks.ValidationCallback` calls it every
`train.eval_every` timesteps; `training.train` calls it once more at the end when no pass saved
a best model.
"""

from __future__ import annotations

import json
import math

from stable_baselines3.common.base_class import BaseAlgorithm

from agent import policy_of
from envs import TradingEnv
from training.evaluation.backtest import agent_metrics
from training.run.atomic import write_json_atomic
from training.run.folder import RunDir, save_model_atomic


def validate(model: BaseAlgorithm, env: TradingEnv, run: RunDir) -> dict[str, float]:
    """Backtest `model`'s deterministic policy over `env`'s range; record it in `run`.

    The metrics (`training.evaluation.metrics.compute_metrics`) are appended, with the model's
    timestep count, to `run.validation_history`; `run.best_model` is saved (atomically) when
    the Sharpe ratio is finite and beats every earlier pass's. Returns the metrics.
    """
    metrics = agent_metrics(policy_of(model), env)
    history = _history(run)
    best = max((h["sharpe"] for h in history if h.get("sharpe") is not None), default=-math.inf)
    sharpe = float(metrics["sharpe"])
    if math.isfinite(sharpe) and sharpe > best:
        save_model_atomic(model, run.best_model)
    history.append({"timesteps": model.num_timesteps, **metrics})
    write_json_atomic(run.validation_history, history)
    return metrics


def _history(run: RunDir) -> list[dict[str, float]]:
    """The earlier passes of `run` (NaN metrics read back as None), oldest first."""
    if not run.validation_history.exists():
        return []
    history: list[dict[str, float]] = json.loads(run.validation_history.read_text())
    return history
