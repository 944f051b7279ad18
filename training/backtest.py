"""Backtest a trained agent through the same environment code as training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from stable_baselines3.common.base_class import BaseAlgorithm

from envs import TradingEnv
from training.metrics import compute_metrics, trades_from_record
from training.rollout import record_episode
from training.run_dir import write_atomic, write_json_atomic


def run_backtest(model: BaseAlgorithm, env: TradingEnv, out: Path) -> Path:
    """Run the deterministic policy over `env`'s whole range; write the report files to `out`.

    Writes `metrics.json`, `equity.csv` (one row per bar) and `trades.csv`, each atomically.
    """

    def act(obs: dict[str, np.ndarray]) -> np.ndarray:
        return model.predict(obs, deterministic=True)[0]

    record = record_episode(env, act)
    trades = trades_from_record(record)
    metrics = compute_metrics(record, trades, bars_per_year=env.core.bars_per_year)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "metrics.json", {"agent": metrics})
    for name, frame in (("equity.csv", record), ("trades.csv", trades)):
        text = frame.to_csv(index=False)
        write_atomic(out / name, lambda file, text=text: file.write(text.encode()))
    return out
