"""The backtest library: a trained agent and the baselines through the env's own execution code.

The agent acts deterministically (the most likely level of each head) through `FastPolicy`, which
gives the actions of `policy.predict` at a fraction of the cost: it steps the env's own execution
kernel in a compiled loop; a vote of several policies, which a run ships under `train.vote`,
trades through `training.evaluation.vote.record_trained`. The baselines
(`training.evaluation.baselines`) are policies run through a `TradingEnv` over the same market,
bars and costs, whose only levels are 1x and no stop (`baseline_env`). Either way one
implementation of fills, stops, costs and accounting (`envs.execution`) serves every strategy.

`backtest` gives every strategy's record, trades and metrics and the agent's next order;
`write_report` writes them atomically: `metrics.json` (every strategy), `equity.csv` (the agent's
record, `training.evaluation.rollout.RECORD_COLUMNS`, plus each baseline's equity), `trades.csv`
(the agent's round trips), `report.png` (`training.evaluation.report`) and `next_order.json`
(`training.evaluation.next_order`: the agent's order for the open after the last bar, null when
its account was liquidated). `format_comparison` renders the metrics table for the terminal,
with `holding_note`'s line when the agent held one side (or none) throughout rather than timed
the market. `select_bars` and `in_sample` serve the command line
(`python -m training.backtest`); their mistakes are `BacktestError`s of one line.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agent import MultiHeadPolicy
from envs import EnvConfig, MarketData, TradingEnv
from envs.market_data import parse_time, time_labels
from training.evaluation.baselines import (
    BarPolicy,
    baseline_env,
    baseline_policies,
    buy_and_hold,
    sized_baseline_env,
)
from training.evaluation.fast_inference import FastPolicy
from training.evaluation.metrics import (
    compute_metrics,
    format_metrics_table,
    record_metrics,
    trades_from_record,
)
from training.evaluation.next_order import NextOrder, decide_next_order
from training.evaluation.report import AGENT, render_report
from training.evaluation.rollout import record_episode
from training.evaluation.vote import Trained, record_trained
from training.run.atomic import write_bytes_atomic, write_json_atomic
from training.run.data import recorded_splits
from training.run.folder import RunDir

SIZED_HOLD = "sized_hold"  # the baseline that holds long at the env's volatility budget
HELD_SHARE = 0.99  # one side (or none) at this share of the closes: the agent held, not timed


class BacktestError(ValueError):
    """A user mistake in what to backtest; str(err) is one line naming the file or option."""


@dataclass(frozen=True)
class BacktestResult:
    """Every strategy's per-bar record, trades and metrics; the agent comes first."""

    records: dict[str, pd.DataFrame]  # strategy -> `training.evaluation.rollout` record
    trades: dict[str, pd.DataFrame]  # strategy -> `trades_from_record`
    metrics: dict[str, dict[str, float]]  # strategy -> `compute_metrics`
    next_order: NextOrder | None  # the agent's order after the last bar; None if terminated
    bars_per_year: float  # what annualised the metrics (the env's)
    decision_interval: int = 1  # the agent's (`EnvConfig`); the baselines decide on every bar


# --- running strategies -----------------------------------------------------------------------


class _BarClock:
    """The env, remembering the bar of its latest observation (`info["bar"]`) for the policy."""

    def __init__(self, env: TradingEnv) -> None:
        self.env = env
        self.core = env.core  # `record_episode` reads the env's data
        self.bar = -1

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset the env; note the start bar."""
        obs, info = self.env.reset(seed=seed, options=options)
        self.bar = info["bar"]
        return obs, info

    def step(
        self, action: np.ndarray
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Step the env; note the new bar."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.bar = info["bar"]
        return obs, reward, terminated, truncated, info


def record_strategy(env: TradingEnv, policy: BarPolicy) -> pd.DataFrame:
    """Run `policy(obs, bar)` over `env`'s episode; the per-bar record of `record_episode`."""
    clock = _BarClock(env)
    return record_episode(clock, lambda obs: policy(obs, clock.bar))


def evaluation_env(market: MarketData, config: EnvConfig, bars: range | None = None) -> TradingEnv:
    """An env that runs `bars` of `market` (None: all) as one episode from its first bar.

    What `backtest`, the metrics helpers below and validation step through
    (``random_start=False, episode_length=None``).
    """
    return TradingEnv(market, config, bars=bars, random_start=False, episode_length=None)


def strategy_metrics(env: TradingEnv, policy: BarPolicy) -> dict[str, float]:
    """Backtest metrics of ``policy(obs, bar)`` over `env`'s whole range."""
    return record_metrics(record_strategy(env, policy), bars_per_year=env.core.bars_per_year)


def agent_metrics(policy: MultiHeadPolicy, env: TradingEnv) -> dict[str, float]:
    """Backtest metrics of the deterministic policy over `env`'s whole range.

    `FastPolicy.record_episode` (the actions of ``model.predict(deterministic=True)``, with the
    trunk's current gates) and `compute_metrics`.
    """
    record = FastPolicy(policy, env.core).record_episode()
    return record_metrics(record, bars_per_year=env.core.bars_per_year)


def backtest(trained: Trained, env: TradingEnv) -> BacktestResult:
    """The deterministic `trained` (a policy, or a vote of several: `record_trained`) and the
    baselines over the whole range of `env`.

    `env` must cover its range in one episode (`evaluation_env`); the baselines run on the same
    market and bars under their own levels (`baseline_env`).
    """
    core = env.core
    if core.config.random_start or core.episode_length != core.end_bar - core.first_bar:
        raise ValueError("backtest needs an env of one episode over its range (evaluation_env)")
    record, final = record_trained(trained, core)
    next_order = None if final is None else decide_next_order(trained, core, final)
    return with_baselines(record, next_order, env)


def with_baselines(
    agent: pd.DataFrame, next_order: NextOrder | None, env: TradingEnv
) -> BacktestResult:
    """The agent's record over `env`'s range, the baselines' over the same range, and metrics."""
    core = env.core
    records = {AGENT: agent}
    baselines = baseline_env(env)
    records.update(
        (name, record_strategy(baselines, strategy))
        for name, strategy in baseline_policies(baselines).items()
    )
    sized = sized_baseline_env(env)
    if sized is not None:
        records[SIZED_HOLD] = record_strategy(sized, buy_and_hold(sized.core.config))
    trades = {name: trades_from_record(record) for name, record in records.items()}
    metrics = {
        name: compute_metrics(record, trades[name], bars_per_year=core.bars_per_year)
        for name, record in records.items()
    }
    return BacktestResult(
        records, trades, metrics, next_order, core.bars_per_year, core.config.decision_interval
    )


def holding_note(
    results: Iterable[BacktestResult], metrics: Mapping[str, Mapping[str, float]]
) -> str | None:
    """One line for under a metrics table when the agent did not time the market, else None.

    That is when, at the close of at least `HELD_SHARE` of the bars of all `results` (one per
    instrument), the agent held one side (long, or short) or no position. Its figures are then
    mostly the market's, or flat's, whatever they show. For a held side the line sets the
    agent's Sharpe in `metrics` (strategy -> metrics, as `BacktestResult.metrics`) beside that of
    the baseline that holds the same way: `SIZED_HOLD` where the env sizes by a volatility
    budget, else buy_and_hold. `SIZED_HOLD` resizes to the budget on any bar and an agent that
    decides every k > 1 bars only on its decision bars, which alone moves their figures apart
    (benchmarks/RESULTS.md, sixty-seventh round): the line then says so.
    """
    results = list(results)
    position = np.concatenate(
        [result.records[AGENT]["position"].to_numpy()[1:] for result in results]
    )  # [bars] the agent's signed position at each close; row 0 is the start, not a close
    if len(position) == 0:
        return None
    long, short = float(np.mean(position > 0)), float(np.mean(position < 0))
    if 1.0 - long - short >= HELD_SHARE:
        return (
            f"the agent held a position at {long + short:.0%} of the closes: it stood aside, "
            "and its figures are nearly flat's"
        )
    held = "long" if long >= HELD_SHARE else "short" if short >= HELD_SHARE else None
    if held is None:
        return None
    baseline = SIZED_HOLD if SIZED_HOLD in metrics else "buy_and_hold"
    how = ""
    if baseline == SIZED_HOLD:
        how = " (buy-and-hold sized by the same volatility budget"
        interval = max(result.decision_interval for result in results)
        if interval > 1:
            how += ", resized on any bar; the agent resizes only on its decisions, "
            how += f"every {interval}"
        how += ")"
    return (
        f"the agent was {held} at {max(long, short):.0%} of the closes: it held the market rather "
        f"than timed it; Sharpe {metrics[AGENT]['sharpe']:.2f} against {baseline}'s "
        f"{metrics[baseline]['sharpe']:.2f}{how}"
    )


def format_comparison(
    results: Iterable[BacktestResult], metrics: dict[str, dict[str, float]]
) -> str:
    """`metrics` (strategy -> metrics of `results`, one instrument's or combined) as
    `format_metrics_table` renders them, with `holding_note`'s line under the table when the agent
    did not time the market."""
    note = holding_note(results, metrics)
    table = format_metrics_table(metrics)
    return table if note is None else f"{table}\n{note}"


def format_next_order(result: BacktestResult) -> str:
    """The agent's next order for the terminal, or why there is none."""
    if result.next_order is not None:
        return result.next_order.format()
    record = result.records[AGENT]
    end = "liquidated" if record["liquidated"].iloc[-1] else "bankrupt"
    when = time_labels(record["timestamp"].to_numpy())[-1]
    return f"next order: none, the agent's account was {end} on {when}"


# --- report files -----------------------------------------------------------------------------


def _csv_bytes(frame: pd.DataFrame) -> bytes:
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False)
    return buffer.getvalue().encode()


REPORT_FILES = ("metrics.json", "next_order.json", "equity.csv", "trades.csv", "report.png")
"""The files `write_report` writes, in its order."""


def write_report(result: BacktestResult, out: Path, title: str) -> Path:
    """Write `REPORT_FILES`: metrics.json, next_order.json, equity.csv, trades.csv, report.png.

    equity.csv is the agent's record with each baseline's equity beside it, by timestamp: when
    the agent's account was liquidated early, the rows after it hold the baselines only.
    Everything is rendered in memory first, then each file is written atomically.
    """
    equity = result.records[AGENT]
    for name, record in result.records.items():
        if name != AGENT:
            baseline = record[["timestamp", "equity"]].rename(columns={"equity": f"{name}_equity"})
            equity = equity.merge(baseline, on="timestamp", how="outer")
    files = {
        "equity.csv": _csv_bytes(equity),
        "trades.csv": _csv_bytes(result.trades[AGENT]),
        "report.png": render_report(result.records, title),
    }
    write_json_atomic(out / "metrics.json", result.metrics)
    next_order = result.next_order.to_dict() if result.next_order else None
    write_json_atomic(out / "next_order.json", next_order)
    for name, data in files.items():
        write_bytes_atomic(out / name, data)
    return out


def default_title(env: TradingEnv) -> str:
    """`<data file>[ ticker]: <first decision> .. <last bar>` for a report's title."""
    core = env.core
    first, last = time_labels(core.timestamps[[core.first_bar, core.end_bar]])
    name = Path(core.market.source).stem + (f" {core.market.ticker}" if core.market.ticker else "")
    return f"{name}: {first} .. {last}"


# --- the data and the bars ---------------------------------------------------------------------


def _parse_time(option: str, text: str, whole_day: bool = False) -> pd.Timestamp:
    when = parse_time(text, whole_day=whole_day)
    if when is None:
        raise BacktestError(f"{option}: expected a date such as 2017-06-30, got {text!r}")
    return when


def select_bars(market: MarketData, start: str | None, end: str | None) -> range:
    """Bars from the first at or after `start` to the last at or before `end` (None: no limit).

    An `end` without a time of day includes that whole day.
    """
    times = market.timestamps
    first = 0 if start is None else market.bar_position(_parse_time("--start", start))
    stop = len(market)
    if end is not None:
        stop = market.bar_position(_parse_time("--end", end, whole_day=True), end=True)
    if stop - first < 2:
        span = f"{pd.Timestamp(times[0])} .. {pd.Timestamp(times[-1])}"
        given = " ".join(
            f"--{name} {value}" for name, value in (("start", start), ("end", end)) if value
        )
        n = max(stop - first, 0)
        raise BacktestError(
            f"{market.source}: {given} selects {n} bar{'' if n == 1 else 's'} of the data "
            f"({span}); a backtest needs at least 2"
        )
    return range(first, stop)


@dataclass(frozen=True)
class InSample:
    """How many of a backtest's decisions fall on bars the model learned from or was chosen on."""

    decisions: int  # decisions of the backtest
    train: int  # of them on the run's training split
    validation: int  # of them on its validation split (which chose best_model.safetensors)
    test_start: pd.Timestamp | None  # first bar of the run's held-out test split, if any

    @property
    def count(self) -> int:
        """Decisions on training or validation bars."""
        return self.train + self.validation

    def warning(self) -> str:
        """One line for the terminal: the counts, and where the held-out bars start."""
        parts = [f"{n:,} on its {name} bars" for name, n in
                 (("training", self.train), ("validation", self.validation)) if n]  # fmt: skip
        line = (
            f"warning: {self.count:,} of the {self.decisions:,} decisions are in-sample "
            f"({' and '.join(parts)}), so these results flatter the agent"
        )
        if self.test_start is not None:
            date = time_labels(np.array([self.test_start.to_datetime64()]))[0]
            line += f"; its held-out test split starts {date} (--start {date})"
        return line


def in_sample(run: RunDir, env: TradingEnv) -> InSample | None:
    """The decisions of `env` on the training run's own train and validation bars, or None.

    Only the run's own instruments (the same file and ticker, as its `splits.json` lists them)
    are compared, by the run's calendar split dates. None for other data, for a run folder
    without `splits.json`, or when no decision falls before the test dates.
    """
    if not run.splits.is_file():
        return None
    recorded = json.loads(run.splits.read_text())
    market = env.core.market
    if not any(
        Path(entry["source"]).resolve() == Path(market.source).resolve()
        and entry["ticker"] == market.ticker
        for entry in recorded["instruments"]
    ):
        return None
    splits = recorded_splits(run.splits, market)
    decisions = range(env.core.first_bar, env.core.end_bar)

    def overlap(split: range) -> int:
        return max(0, min(decisions.stop, split.stop) - max(decisions.start, split.start))

    test_start = pd.Timestamp(recorded["test_start"]) if recorded["test_start"] else None
    found = InSample(len(decisions), overlap(splits.train), overlap(splits.validation), test_start)
    return found if found.count else None
