"""Backtest a trained agent and the baselines through the same environment code as training.

    python -m training.backtest --model RUN_DIR_or_MODEL_ZIP --data CSV [--ticker T] [--adjust]
                                [--start DATE] [--end DATE] [--out DIR]

Reads top to bottom: model + its config -> data -> env -> agent and baselines -> metrics -> files.
The agent acts deterministically (the most likely level of each head) through `FastPolicy`, which
gives the actions of `model.predict` at a fraction of the cost: it steps the env's own execution
kernel in a compiled loop. The baselines (`training.baselines`) are policies run through a
`TradingEnv`. Either way one implementation of fills, stops, costs and accounting
(`envs.execution`) serves every strategy.

With a RUN_DIR the model is its `best_model.zip` (else `final_model.zip`); a bare zip needs the
run's `config.yaml` next to it (or, for a zip in `checkpoints/`, in the run folder above). The
config gives the env settings: window, levels, costs. `--start`/`--end` pick the bars to trade by
date (a date without a time includes that whole day); earlier bars still fill the first windows.

Outputs in `--out` (default `<run_dir>/backtest/<data-file-stem>[-ticker][-start-to-end]`), each
written atomically once everything has been computed: `metrics.json` (every strategy),
`equity.csv` (the agent's record, `training.rollout.RECORD_COLUMNS`, plus each baseline's
equity), `trades.csv` (the agent's round trips), `report.png` (`training.report`) and
`next_order.json` (`training.next_order`: the agent's order for the open after the last bar, null
when its account was liquidated). The metrics table and the next order are printed. A user
mistake (a file that is not one of our models, data that does not fit it, a date range without
enough bars) prints one line on stderr and exits with code 2.
"""

from __future__ import annotations

import argparse
import io
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
from stable_baselines3 import PPO
from stable_baselines3.common.base_class import BaseAlgorithm

from agent import MultiHeadPolicy
from envs import MarketData, TradingEnv, load_market_data
from envs.market_data import parse_time, time_labels
from training.atomic import write_atomic, write_json_atomic
from training.baselines import BarPolicy, baseline_policies
from training.cli import add_model_and_data_arguments, reports_user_errors
from training.config import RunConfig, load_config
from training.data import split_run_market
from training.fast_inference import FastPolicy
from training.metrics import compute_metrics, format_metrics_table, trades_from_record
from training.next_order import NextOrder, decide_next_order
from training.report import AGENT, render_report
from training.rollout import record_episode
from training.run_dir import RunDir

MODEL_NAMES = ("best_model.zip", "final_model.zip")  # in a run folder, in order of preference


class BacktestError(ValueError):
    """A user mistake in what to backtest; str(err) is one line naming the file or option."""


@dataclass(frozen=True)
class LoadedModel:
    """A trained agent with the config of the run that made it."""

    model: PPO
    config: RunConfig
    path: Path  # the model zip
    run_dir: Path  # the folder holding the run's config.yaml


@dataclass(frozen=True)
class BacktestResult:
    """Every strategy's per-bar record, trades and metrics; the agent comes first."""

    records: dict[str, pd.DataFrame]  # strategy -> `training.rollout` record
    trades: dict[str, pd.DataFrame]  # strategy -> `trades_from_record`
    metrics: dict[str, dict[str, float]]  # strategy -> `compute_metrics`
    next_order: NextOrder | None  # the agent's order after the last bar; None if terminated


# --- running strategies -----------------------------------------------------------------------


class _BarClock(gym.Wrapper):
    """The env, remembering the bar of its latest observation (`info["bar"]`) for the policy."""

    def __init__(self, env: TradingEnv) -> None:
        super().__init__(env)
        self.core = env.core  # `record_episode` reads the env's data
        self.bar = -1

    def reset(self, **kwargs: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset the env; note the start bar."""
        obs, info = self.env.reset(**kwargs)
        self.bar = info["bar"]
        return obs, info

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        """Step the env; note the new bar."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.bar = info["bar"]
        return obs, reward, terminated, truncated, info


def record_strategy(env: TradingEnv, policy: BarPolicy) -> pd.DataFrame:
    """Run `policy(obs, bar)` over `env`'s episode; the per-bar record of `record_episode`."""
    clock = _BarClock(env)
    return record_episode(clock, lambda obs: policy(obs, clock.bar))


def backtest(model: BaseAlgorithm, env: TradingEnv) -> BacktestResult:
    """The deterministic agent and the baselines over the whole range of `env`.

    `env` must cover its range in one episode: built with ``random_start=False,
    episode_length=None``.
    """
    core = env.core
    if core.config.random_start or core.episode_length != core.end_bar - core.first_bar:
        raise ValueError("backtest needs an env built with random_start=False, episode_length=None")
    agent = FastPolicy(model.policy, core)
    records = {AGENT: agent.record_episode()}
    final = agent.final_accounts
    next_order = None if final is None else decide_next_order(model.policy, core, final)
    records.update(
        (name, record_strategy(env, policy)) for name, policy in baseline_policies(core).items()
    )
    trades = {name: trades_from_record(record) for name, record in records.items()}
    metrics = {
        name: compute_metrics(record, trades[name], bars_per_year=core.bars_per_year)
        for name, record in records.items()
    }
    return BacktestResult(records, trades, metrics, next_order)


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


def write_report(result: BacktestResult, out: Path, title: str) -> Path:
    """Write metrics.json, next_order.json, equity.csv, trades.csv and report.png to `out`.

    Everything is rendered in memory first, then each file is written atomically.
    """
    equity = result.records[AGENT].copy()
    for name, record in result.records.items():
        if name != AGENT:
            equity[f"{name}_equity"] = record["equity"].to_numpy()
    files = {
        "equity.csv": _csv_bytes(equity),
        "trades.csv": _csv_bytes(result.trades[AGENT]),
        "report.png": render_report(result.records, title),
    }
    write_json_atomic(out / "metrics.json", result.metrics)
    next_order = result.next_order.to_dict() if result.next_order else None
    write_json_atomic(out / "next_order.json", next_order)
    for name, data in files.items():
        write_atomic(out / name, lambda file, data=data: file.write(data))
    return out


def _default_title(env: TradingEnv) -> str:
    core = env.core
    first, last = time_labels(core.timestamps[[core.first_bar, core.end_bar]])
    name = Path(core.market.source).stem + (f" {core.market.ticker}" if core.market.ticker else "")
    return f"{name}: {first} .. {last}"


# --- model, config and data -------------------------------------------------------------------


def locate_model(path: Path) -> tuple[Path, Path]:
    """(model zip, the folder holding its run's config.yaml) for a run folder or a model zip."""
    if path.is_dir():
        for name in MODEL_NAMES:
            if (path / name).is_file():
                return path / name, path
        raise BacktestError(f"{path}: no {' or '.join(MODEL_NAMES)} in this run folder")
    if not path.is_file():
        raise BacktestError(f"{path}: no such model file or run folder")
    folders = [path.parent] + ([path.parent.parent] if path.parent.name == "checkpoints" else [])
    for folder in folders:
        if RunDir(folder).config.is_file():
            return path, folder
    raise BacktestError(
        f"{path}: no config.yaml next to the model; the env settings (window, levels, costs) "
        "come from the run's config.yaml: pass the run folder, or copy its config.yaml here"
    )


def load_model(path: Path) -> LoadedModel:
    """Load a model saved by `training.train` (a run folder or a zip) and its run's config."""
    model_path, run_dir = locate_model(path)
    config = load_config(RunDir(run_dir).config)
    try:
        with warnings.catch_warnings():  # SB3 warns in several lines about foreign files
            warnings.simplefilter("ignore")
            model = PPO.load(model_path, device="cpu")
    except Exception as error:  # any unreadable file: the cause, in one line
        cause = " ".join(str(error).split()) or type(error).__name__
        raise BacktestError(
            f"{model_path}: not a model saved by training.train ({cause})"
        ) from None
    if not isinstance(model.policy, MultiHeadPolicy):
        raise BacktestError(
            f"{model_path}: a {type(model.policy).__name__} model, not a multi-head trading agent "
            "(agent.MultiHeadPolicy) saved by training.train"
        )
    return LoadedModel(model, config, model_path, run_dir)


def check_fits(model: BaseAlgorithm, env: TradingEnv, model_path: Path) -> None:
    """Raise `BacktestError` unless the env's observations and actions are the model's."""
    for key in ("market", "account"):
        expected, found = model.observation_space[key].shape, env.observation_space[key].shape
        if expected != found:
            what = "window, features" if key == "market" else "account features"
            raise BacktestError(
                f"{model_path}: the model reads {key} observations of shape {expected} "
                f"({what}), the env built from its config gives {found}"
            )
    expected, found = model.action_space.nvec.tolist(), env.action_space.nvec.tolist()
    if expected != found:
        raise BacktestError(
            f"{model_path}: the model has {expected} levels per head, its config {found}"
        )


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

    def position(when: pd.Timestamp, side: str = "left") -> int:
        return int(np.searchsorted(times, when.to_datetime64(), side=side))

    first = 0 if start is None else position(_parse_time("--start", start))
    stop = len(market)
    if end is not None:
        stop = position(_parse_time("--end", end, whole_day=True), side="right")
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
    validation: int  # of them on its validation split (which chose best_model.zip)
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


def in_sample(cfg: RunConfig, data: Path, ticker: str | None, env: TradingEnv) -> InSample | None:
    """The decisions of `env` on the training run's own train and validation bars, or None.

    Only the run's own data file and ticker can be compared bar by bar: the run's splits
    (`training.data.split_run_market`) are recomputed on the same bars. None for other data, or
    when no decision falls on those bars.
    """
    same_file = data.resolve() == cfg.data.resolved_path().resolve()
    if not same_file or ticker != cfg.data.ticker:
        return None
    core = env.core
    splits = split_run_market(core.market, cfg.data)
    decisions = range(core.first_bar, core.end_bar)

    def overlap(split: range) -> int:
        return max(0, min(decisions.stop, split.stop) - max(decisions.start, split.start))

    test_start = pd.Timestamp(core.timestamps[splits.test.start]) if splits.test else None
    found = InSample(len(decisions), overlap(splits.train), overlap(splits.validation), test_start)
    return found if found.count else None


def default_out(run_dir: Path, data: Path, args: argparse.Namespace) -> Path:
    """`<run_dir>/backtest/<data-file-stem>[-ticker][-start-to-end]`."""
    name = data.stem + (f"-{args.ticker}" if args.ticker else "")
    if args.start or args.end:
        name += f"-{args.start or 'first'}-to-{args.end or 'last'}"
    return run_dir / "backtest" / name.replace(":", "").replace(" ", "T")


# --- entry point ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        prog="python -m training.backtest", description=__doc__.splitlines()[0]
    )
    add_model_and_data_arguments(parser)
    parser.add_argument(
        "--adjust",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="split-adjust prices from Adj Close (default: as the model was trained)",
    )
    parser.add_argument("--start", help="first date to trade (earlier bars serve as history)")
    parser.add_argument("--end", help="last date to trade (a date includes its whole day)")
    parser.add_argument(
        "--out", type=Path, help="output folder (default <run_dir>/backtest/<data-stem>[-ticker])"
    )
    return parser.parse_args(argv)


@reports_user_errors(BacktestError)
def main(argv: Sequence[str] | None = None) -> int:
    """Backtest; print the metrics table and where the report is. User mistakes exit 2."""
    args = parse_args(argv)
    loaded = load_model(args.model)
    cfg = loaded.config
    market = load_market_data(
        args.data,
        ticker=args.ticker,
        adjust=cfg.data.adjust if args.adjust is None else args.adjust,
        min_rows=cfg.env.window + 1,
    )
    bars = select_bars(market, args.start, args.end)
    env = TradingEnv(market, cfg.env, bars=bars, random_start=False, episode_length=None)
    check_fits(loaded.model, env, loaded.path)
    result = backtest(loaded.model, env)
    out = args.out or default_out(loaded.run_dir, args.data, args)
    title = f"{loaded.path.name} on {_default_title(env)}"
    seen = in_sample(cfg, args.data, args.ticker, env)
    if seen is not None:
        title += f" [in-sample: {seen.count / seen.decisions:.0%} of decisions]"
    write_report(result, out, title)
    core = env.core
    print(f"{loaded.path} on {market!r}, decisions at bars {core.first_bar}..{core.end_bar - 1}")
    if seen is not None:
        print(seen.warning(), file=sys.stderr)
    print(format_metrics_table(result.metrics))
    print(f"\n{format_next_order(result)}")
    print(f"\nreport: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
