"""Validation of a run: a backtest of the deterministic policy on the validation range.

`validate` is one pass over every instrument with validation bars. The run folder holds its
state, so a resumed run continues it: `validation.json` lists every pass's metrics, and
`best_model.safetensors` is the model of the pass with the best finite score so far, its Sharpe
ratio or its log growth (`train.select_by`, `training.evaluation.selection.validation_score`).
With several instruments the metrics are those of their combined accounts
(`training.evaluation.portfolio`), and each instrument's own are kept under "instruments".
`training.run.callbacks.ValidationCallback` calls it every `train.eval_every` timesteps;
`training.train` calls it once more at the end when no pass saved a best model.

The generalization gap is the training episodes' mean Sharpe ratio minus the validation Sharpe
ratio: a policy that memorises its training path scores far better on it than on new bars.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import pandas as pd
from stable_baselines3.common.base_class import BaseAlgorithm

from agent import MultiHeadPolicy, built_like, policy_of
from envs import TradingEnv
from training.config import SelectBy
from training.evaluation.fast_inference import FastPolicy
from training.evaluation.lean import long_share_pct
from training.evaluation.metrics import compute_metrics, record_metrics, trades_from_record
from training.evaluation.portfolio import combine_records
from training.evaluation.selection import best_pass, best_score, validation_score
from training.run.atomic import write_json_atomic
from training.run.folder import RunDir
from training.run.model_file import write_model_file


def deployed(policy: MultiHeadPolicy, leverage: int | None) -> MultiHeadPolicy:
    """The policy a run validates and saves: `policy` itself, or where `leverage` is the index
    of a level (`RunConfig.deployed_leverage_index`) a copy whose leverage head always chooses it.

    Training samples every level, so the leverage head explores the size of the position, and
    the advantage of one size over another changes sign with the market's trend: a lesson the
    shared trunk learns for every head. The copy trades at one size, which validation judges
    and the saved model keeps (benchmarks/RESULTS.md, thirty-fourth round).
    """
    if leverage is None:
        return policy
    pinned = built_like(policy)
    pinned.load_state_dict(policy.state_dict())
    pinned.decision_heads.pin("leverage", leverage)
    pinned.set_training_mode(False)
    return pinned


def validate(
    model: BaseAlgorithm,
    envs: Mapping[str, TradingEnv],
    run: RunDir,
    train_sharpe: float = math.nan,
    select_by: SelectBy = "sharpe",
    leverage: int | None = None,
) -> dict[str, Any]:
    """Backtest `model`'s deterministic policy over each env's range; record the pass in `run`.

    `envs` maps instrument names to evaluation envs (one episode over the validation range).
    The metrics (`training.evaluation.metrics.compute_metrics`, of the combined accounts when
    there are several) are appended to `run.validation_history` with the model's timestep
    count, `train_episode_sharpe` (`train_sharpe`: the mean Sharpe ratio of the training
    episodes since the last pass, NaN if none ended), `generalization_gap` (that minus the
    validation Sharpe), and the pass's `score` by `select_by` with its `score_standard_error`
    (`validation_score`), and `long_share_pct`, the direction head's lean from a flat account
    (`training.evaluation.lean.long_share_pct`). `run.best_model` is saved (atomically) when
    the score is finite and beats every earlier pass's. With `leverage` the policy validated
    and saved is `deployed`'s copy, pinned to that level. Returns the entry.
    """
    policy = deployed(policy_of(model), leverage)
    return validate_policy(policy, model.num_timesteps, envs, run, train_sharpe, select_by)


def validate_policy(
    policy: MultiHeadPolicy,
    timesteps: int,
    envs: Mapping[str, TradingEnv],
    run: RunDir,
    train_sharpe: float = math.nan,
    select_by: SelectBy = "sharpe",
) -> dict[str, Any]:
    """`validate` for a bare `policy` trained for `timesteps` (no PPO model around it)."""
    records = {name: FastPolicy(policy, env.core).record_episode() for name, env in envs.items()}
    bars_per_year = next(iter(envs.values())).core.bars_per_year
    if len(records) == 1:
        metrics = record_metrics(next(iter(records.values())), bars_per_year=bars_per_year)
    else:
        combined = combine_records(list(records.values()))
        trades = pd.concat([trades_from_record(r) for r in records.values()], ignore_index=True)
        metrics = compute_metrics(combined, trades, bars_per_year=bars_per_year)
    sharpe = float(metrics["sharpe"])
    score, standard_error = validation_score(metrics, select_by)
    entry: dict[str, Any] = {
        "timesteps": timesteps,
        **metrics,
        "train_episode_sharpe": train_sharpe,
        "generalization_gap": train_sharpe - sharpe,
        "score": score,
        "score_standard_error": standard_error,
        "long_share_pct": long_share_pct(policy, envs),
    }
    if len(records) > 1:
        entry["instruments"] = {
            name: record_metrics(record, bars_per_year=bars_per_year)
            for name, record in records.items()
        }
    history = read_validation_history(run)
    if math.isfinite(score) and score > best_score(history):
        write_model_file(run.best_model, policy, timesteps)
    history.append(entry)
    write_json_atomic(run.validation_history, history)
    return entry


def read_validation_history(run: RunDir) -> list[dict[str, Any]]:
    """The earlier passes of `run` (NaN metrics read back as None), oldest first."""
    if not run.validation_history.exists():
        return []
    history: list[dict[str, Any]] = json.loads(run.validation_history.read_text())
    return history


def passes_since_best(run: RunDir) -> int:
    """Validation passes of `run` after the one with the best finite score (all, if none)."""
    history = read_validation_history(run)
    best = best_pass(history)
    return len(history) - (0 if best is None else best + 1)


def generalization_summary(
    history: list[dict[str, Any]], who: str = "", where: str = "validation.json"
) -> str:
    """Lines for the end of training: the chosen pass of `history` (the best, as `best_pass`
    ranks them) and the last one, each with its training episodes' Sharpe and the gap to its
    validation Sharpe; headed by `who` (the policy's name, e.g. a contender's) and `where` the
    history was read from."""
    of = f" of the {who}" if who else ""
    if not history:
        return f"generalization{of}: no validation pass, so the gap is unknown"
    best = best_pass(history)
    chosen = history[0 if best is None else best]
    passes = "1 validation pass" if len(history) == 1 else f"{len(history)} validation passes"
    return "\n".join(
        [
            f"generalization{of} over {passes} ({where}):",
            f"  chosen pass  {chosen['timesteps']:,} timesteps: {describe_pass(chosen)}",
            f"  last pass    {history[-1]['timesteps']:,} timesteps: {describe_pass(history[-1])}",
        ]
    )


def describe_pass(entry: dict[str, Any]) -> str:
    """A validation pass's Sharpe and return, and where it has them, its training episodes'
    Sharpe and the generalization gap."""
    train, gap = entry.get("train_episode_sharpe"), entry.get("generalization_gap")
    text = (
        f"validation Sharpe {_number(entry.get('sharpe'))}, "
        f"return {_number(entry.get('total_return_pct'))}%"
    )
    if train is not None and math.isfinite(train):
        text += f"; training episodes' Sharpe {_number(train)}, gap {_number(gap)}"
    return text


def never_beat_flat(history: list[dict[str, Any]]) -> str | None:
    """The plain warning that no pass of `history` beat staying flat (a return above 0%), so
    the test figures of the model it chose are no evidence of skill; None where one did, or
    where there was no pass."""
    if not history:
        return None
    returns = [entry.get("total_return_pct") for entry in history]
    best_return = max((r for r in returns if r is not None), default=None)
    if best_return is not None and best_return > 0:
        return None
    best = "its one pass" if len(history) == 1 else f"the best of {len(history)} passes"
    return (
        f"validation never beat flat: {best} returned {_number(best_return)}%; the test "
        "figures below are no evidence of skill"
    )


def _number(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:,.2f}"
