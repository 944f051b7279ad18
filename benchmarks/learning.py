"""Learning benchmark: does the agent learn structure that is there, and do no harm where none is?

The yardstick of ../shared/LEARNING.md, in one run:

1. **Synthetic series** (`envs.synthetic`): six seeded generators with a hidden state the
   benchmark knows (random walk, trend regimes, volatility regimes, mean reversion, crash risk,
   and turbulence regimes: volatility regimes whose growth-optimal leverage in turbulence is
   below 0.5x, so that an agent capped at 1x has a leverage task too), bars from intrabar
   paths. Each series has 7,000 bars: the agent trains on the first 3,000 with the product's
   own training path (`training.train.train`: validation on the next 1,000 picks the best
   model), and is tested on the last 3,000, a tail it never saw (long, because a levered rule's
   log growth over 1,000 bars is too noisy to rank rules by). On that tail,
   through the same engine and costs:
   - the oracle knows the hidden state (an upper bound), and the fair ceiling knows the
     generator's parameters but infers the state from past bars (HMM forward / Kalman filter),
     each with its knobs tuned on the training bars (`envs.synthetic.references`);
   - buy-and-hold is the product's baseline (long 1x from the first open, no stop);
   - on the kinds of `ESTIMATED_KINDS` (all but crash risk), the estimated ceiling is the fair
     ceiling's rule with the generator's parameters fitted to the training bars
     (`envs.synthetic.estimation`): how much of the ceiling's edge the 3,000 bars the agent
     learns from reveal to a statistician who knows the model family.
   Per series: the agent's share of the ceiling's edge,
   ``(g_agent - g_bh) / (g_ceiling - g_bh)`` with g the log growth over the tail; its turnover
   a year and fees as % of equity a year; the generalization gap (training episodes' Sharpe
   minus validation Sharpe) of the chosen model and at the end of training. Since one tail is
   a noisy yardstick, each trained agent is also scored on the same bars of `--fresh-series`
   unseen series of its kind (the same seeds for every run), ``share_fresh``; on the
   `EXPECTED_KINDS` (the crash-free regime kinds) also by expected log growth given the
   exposures held (`envs.synthetic.expectation`: the same share without the price noise),
   ``share_expected_fresh``. Per run, a table also shows which way its training bars went
   (`training_bars_growth`) beside the agent's and the estimated ceiling's scores, so that a
   worst seed the bars themselves mislead can be told from the learner's own; the targets
   table (`learning_report`: `TARGETS`, `targets_table`) checks the targets below and draws
   that line for every seed below a worst-seed target.
2. **Real data** (`--real`): walk-forward on the bundled universe (`training.walkforward`),
   every seed, against the baselines; the agent's Sharpe with its deflated Sharpe ratio, the
   probability that its edge is noise given every configuration tried (`--configs-tried`).

Every figure is a median and a worst case over seeds, with the seeds listed. Targets (issue
#10): structured series, median share >= 0.6 and worst >= 0.3; random walk, turnover <= 25 a year
and log growth no more than 5 points (0.05) below buy-and-hold; real data, median Sharpe >=
buy-and-hold's - 0.3, no seed below buy-and-hold's - 0.6, turnover <= 50 a year, costs <= 3% of
equity a year.

Usage:
    python benchmarks/learning.py [--quick] [--config configs/default.yaml] [--set k=v ...]
        [--seeds 0 1 2 3 4] [--kinds trend_regimes ...] [--timesteps N] [--jobs 2]
        [--out runs/learning-<time>] [--real] [--folds 3] [--configs-tried N] [--fresh-series 8]
    python benchmarks/learning.py --combine OUT [OUT ...]
    python benchmarks/learning.py --reselect OUT [--from OTHER ...] [--set k=v ...] --out NEW

`--quick` (a few minutes on 2 cores): 2 seeds, 40k timesteps, a short real walk-forward. With
`--timesteps` (or `--quick`) the config's validation schedule is fitted to the shorter run: ten
passes, the first held back by the same share of the run (`validation_schedule`). Runs
go to `--out`; the tables are printed and written to `<out>/learning.json`. `--rescore OUT` trains
nothing: it scores the agents an earlier run saved in OUT on `--fresh-series` fresh series, and
the estimated ceiling again. `--combine OUT [OUT ...]` trains and writes nothing: it pools
earlier runs' results into one set of tables, with the targets checked on every block of ten
seeds (`blocks_table`), for a seed count no one run reaches. `--reselect OUT --out NEW` trains
nothing either: it keeps, in OUT's synthetic runs and in every fold of its walk-forwards, the
pass and contender that another config (`--set`) would have kept, and scores them into NEW
(`reselect`; a walk-forward's folds are traded through again). Other selection keys
(`SELECTION_KEYS`: `train.select_by`, the contest's margins, evidence levels and prior) need
only OUT; a contest of contenders that other runs trained (`train.challenger` on other
overrides, an incumbent on other training keys) takes each from the `--from OTHER` report whose
run of the same kind and seed trained it under the same config. Exact when those runs kept a
checkpoint at every validation pass (`--set train.checkpoint_every=` the config's
`train.eval_every`), or where no contender's best pass changes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import shutil
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from learning_report import BLOCK, blocks_table, finite, print_report, seed_list

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

N_TRAIN, N_VALIDATION, N_TAIL = 3000, 1000, 3000  # bars of each synthetic series, in order
FRESH_SEED = 10_000  # fresh series k of a kind has seed FRESH_SEED + k, the same for every run
FRESH_SERIES = 8  # fresh series each agent is scored on by default (--quick: 2)
KINDS = (
    "random_walk",
    "trend_regimes",
    "volatility_regimes",
    "mean_reversion",
    "crash_risk",
    "turbulence_regimes",
)


@dataclass(frozen=True)
class Job:
    """One training run of the benchmark: a series kind and a seed, under one config."""

    kind: str
    seed: int
    config: str
    overrides: tuple[str, ...]
    out: str
    fresh_series: int = 0  # fresh series of the kind the trained agent is scored on as well


def run_synthetic(job: Job) -> dict[str, Any]:
    """Train on one generated series and score the agent against the references on its tail."""
    import torch

    from envs.synthetic import rule_actions, run_actions, tune_knobs
    from training.config import load_config
    from training.evaluation.selection import best_pass
    from training.evaluation.validation import read_validation_history
    from training.run.challenger import read_contest
    from training.run.data import RunData
    from training.run.folder import RunDir
    from training.train import train

    torch.set_num_threads(1)
    series, split = synthetic_series(job.kind, job.seed)
    overrides = [*job.overrides, f"train.seed={job.seed}", "train.threads=1"]
    cfg = load_config(job.config, [*overrides, "train.progress_bar=false"])
    run = RunDir.new(Path(job.out), f"{job.kind}-s{job.seed}")
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        train(cfg, run, resume=False, data=RunData((series.market,), split))
    seconds = time.perf_counter() - started
    metrics = json.loads((run.report / "metrics.json").read_text())
    history = read_validation_history(run)
    splits = split.splits[0]
    tail = splits.test
    # Each reference tunes its knobs on the training bars, never on the tail.
    knobs = {rule: tune_knobs(series, cfg.env, rule, splits.train) for rule in REFERENCES}
    references = {}
    for rule in REFERENCES:
        actions = rule_actions(series, cfg.env, rule, knobs[rule], start=tail.start)
        references[rule] = run_actions(series, cfg.env, actions, tail).log_growth

    hold = math.log1p(metrics["buy_and_hold"]["total_return_pct"] / 100.0)
    edge = references["ceiling"] - hold
    estimated = estimated_on_own_tail(job.kind, job.seed, series, tail, cfg.env, hold, edge)
    scores = score_trained_agent(job.kind, job.seed, run.root, job.fresh_series)
    by_state = held_by_state(run.report / "equity.csv", series.state, tail)
    chosen = history[best_pass(history) or 0]  # the pass the run kept, by its score
    return {
        "kind": job.kind,
        "seed": job.seed,
        "run": str(run.root),
        "seconds": seconds,
        "growth_buy_and_hold": hold,
        "growth_ceiling": references["ceiling"],
        "growth_oracle": references["oracle"],
        **tail_figures(metrics["agent"], hold, references["ceiling"]),
        "gap_chosen": finite(chosen.get("generalization_gap")),
        "gap_last": finite(history[-1].get("generalization_gap")),
        "chosen_timesteps": chosen["timesteps"],
        # With train.restarts > 1: which restart's model the run kept (1 is train.seed's).
        "restart_kept": json.loads(run.restart_choice.read_text())["kept"]
        if run.restart_choice.is_file()
        else 1,
        **contest_fields(read_contest(run)),
        "growth_training_bars": training_bars_growth(series.market, splits.train),
        **estimated,
        **scores,
        **by_state,
    }


def tail_figures(agent: dict[str, Any], hold: float, ceiling: float) -> dict[str, Any]:
    """The agent's figures on its own tail from its backtest `agent` metrics, against
    buy-and-hold's and the fair ceiling's log growth there (`hold`, `ceiling`)."""
    growth = math.log1p(agent["total_return_pct"] / 100.0)
    edge = ceiling - hold
    return {
        "growth_agent": growth,
        "share": (growth - hold) / edge if edge > 0 else math.nan,
        "excess_growth": growth - hold,
        "sharpe": finite(agent["sharpe"]),
        "turnover_per_year": finite(agent["turnover_per_year"]),
        "fees_pct_per_year": finite(agent["fees_pct_per_year"]),
        "average_leverage": finite(agent["average_leverage"]),
    }


REFERENCES = ("oracle", "ceiling")
# Kinds whose parameters `envs.synthetic.estimation` fits: the estimated ceiling is scored there.
ESTIMATED_KINDS = (
    "random_walk",
    "trend_regimes",
    "volatility_regimes",
    "mean_reversion",
    "turbulence_regimes",
)
# Crash-free regime kinds: every rule is also scored by its expected log growth there.
EXPECTED_KINDS = ("random_walk", "trend_regimes", "volatility_regimes", "turbulence_regimes")
# The fitted parameters each family reports (`estimated_params`).
FITTED_KEYS = {"regime": ("drift", "vol", "transition"), "ou": ("phi", "deviation_sd", "noise_sd")}
# Calm / turbulent kinds: the volatility probe runs there.
VOLATILITY_KINDS = ("volatility_regimes", "turbulence_regimes")


def contest_fields(contest: dict[str, Any] | None) -> dict[str, Any]:
    """A run's contest (`challenger.json`'s content; None: the run held none) as result fields:
    `contender_kept` ("incumbent", "challenger" or "hold"; None without a contest) and the
    training bars' evidence it read (`training.run.evidence`), `evidence_momentum_p`,
    `evidence_tail_p` and `evidence_persistence_p` (None where it read none)."""
    from training.run.challenger import recorded_evidence

    contest = contest or {}
    evidence = asdict(recorded_evidence(contest))
    return {
        "contender_kept": contest.get("kept"),
        **{f"evidence_{test}_p": p for test, p in evidence.items()},
    }


def synthetic_series(kind: str, seed: int) -> tuple[Any, Any]:
    """The generated series of a run and its calendar split (train, validation, tail)."""
    from envs.splits import split_calendar
    from envs.synthetic import generate

    series = generate(kind, N_TRAIN + N_VALIDATION + N_TAIL, seed)
    n = len(series.market)
    return series, split_calendar([series.market], validation=N_VALIDATION / n, test=N_TAIL / n)


def training_bars_growth(market: Any, train: range) -> float:
    """Log growth of `market` over its training bars `train`, first close to last: which way the
    bars the agent learns from went. A range that fell far teaches any rule that reads the drift
    from it (the agent, the estimated ceiling) to stand aside; `run_table` shows it beside each
    run's scores so that a worst seed can be told from a data-limited one."""
    return math.log(market.close[train.stop - 1] / market.close[train.start])


def score_trained_agent(kind: str, seed: int, run_root: Path, n_fresh: int) -> dict[str, Any]:
    """The saved agent of `run_root` (trained on series `seed` of `kind`), loaded once and scored
    on fresh series (`score_on_fresh_series`) and, on the `VOLATILITY_KINDS`, probed
    (`volatility_probe`)."""
    from training.run.folder import load_model

    model = load_model(run_root)
    return {
        **score_on_fresh_series(kind, seed, model, n_fresh),
        **volatility_probe(kind, seed, model),
    }


def score_on_fresh_series(kind: str, seed: int, model: Any, n_fresh: int) -> dict[str, Any]:
    """The agent `model` (a `LoadedModel`) trained on series `seed` of `kind`, scored on
    `n_fresh` new series of its kind, against buy-and-hold and the references there.

    One tail of 3,000 bars is a noisy yardstick: on crash risk, the ceiling's edge over
    buy-and-hold is 0.19 +- 0.19 of log growth per tail (benchmarks/RESULTS.md). The generator is
    known, so the agent (its best model, as the test backtest uses) is also scored on the tails of
    fresh series of its kind, seeds ``FRESH_SEED + k``, the same for every run and config: paired
    comparisons. Each fresh series is a whole series like the agent's own, and the references
    tune their knobs on its training bars, so their figures depend on the kind and the env
    config only (`fresh_references`). ``share_fresh`` pools over the fresh series:
    ``sum(g_agent - g_bh) / sum(g_ceiling - g_bh)``.

    Two more figures:

    - on the `ESTIMATED_KINDS`, the estimated ceiling of the agent's own series (its parameters
      fitted to, and its knobs tuned on, the training bars the agent had), scored on the same
      fresh series: ``share_estimated_fresh``, pooled the same way;
    - on the `EXPECTED_KINDS` (crash-free regime series), every rule's **expected** log growth
      given the exposures it held (`envs.synthetic.expectation`), which drops the price noise
      that realized growth carries: ``share_expected_fresh`` and
      ``excess_growth_expected_fresh`` for the agent, ``share_estimated_expected_fresh`` for the
      estimated ceiling;
    - with `env.volatility_target`, buy-and-hold's action sized as the agent's positions are
      (decided on every bar): ``share_sized_hold_fresh`` (and ``..._expected_fresh``), what the
      sizing alone earns without a policy.
    """
    if n_fresh == 0:
        return {}
    from envs.synthetic import buy_and_hold_actions, run_actions
    from training.evaluation.backtest import evaluation_env
    from training.evaluation.fast_inference import FastPolicy

    env_config = model.config.env  # the run's, with the bars per year it trained under
    regime = kind in EXPECTED_KINDS
    rules = ["agent", *(["estimated"] if kind in ESTIMATED_KINDS else [])]
    if env_config.volatility_target is not None:
        rules.append("sized_hold")
    growths: dict[str, list[float]] = {
        name: [] for name in [*rules, "buy_and_hold", *REFERENCES]
    }  # realized log growth on each fresh tail
    expected: dict[str, list[float]] = {name: [] for name in growths} if regime else {}
    for k in range(n_fresh):
        series, split = synthetic_series(kind, FRESH_SEED + k)
        tail = split.splits[0].test
        env = evaluation_env(series.market, env_config, tail)
        record = FastPolicy(model.policy, env.core).record_episode()
        runs = {"agent": _record_growths(series, env.core.first_bar, record, regime)}
        if "estimated" in rules:
            runs["estimated"] = _run_growths(
                series, estimated_run(kind, seed, series, tail, env_config), regime
            )
        if "sized_hold" in rules:
            hold = buy_and_hold_actions(env_config, len(series.market))
            runs["sized_hold"] = _run_growths(
                series, run_actions(series, env_config, hold, tail, sized=True), regime
            )
        runs.update(fresh_references(kind, k, env_config))
        for name, (realized, mean) in runs.items():
            growths[name].append(realized)
            if regime:
                expected[name].append(mean)
    scores: dict[str, Any] = {}
    for measure, by_rule, prefix in (("", growths, "growth"), ("_expected", expected, "expected")):
        if not by_rule:
            continue
        hold = by_rule["buy_and_hold"]
        edge = sum(c - b for c, b in zip(by_rule["ceiling"], hold, strict=True))
        scored = (("agent", ""), ("estimated", "_estimated"), ("sized_hold", "_sized_hold"))
        for rule, name in scored:
            if rule in by_rule:
                gained = sum(a - b for a, b in zip(by_rule[rule], hold, strict=True))
                scores[f"share{name}{measure}_fresh"] = gained / edge if edge > 0 else math.nan
                scores[f"excess_growth{name}{measure}_fresh"] = gained / n_fresh
        scores.update({f"{prefix}_{rule}_fresh": values for rule, values in by_rule.items()})
    return scores


def _run_growths(series: Any, run: Any, expected: bool) -> tuple[float, float]:
    """(realized, expected or NaN) log growth of a `RunResult` on `series`; `expected` only on a
    crash-free regime series."""
    from envs.synthetic import expected_log_growth

    if not expected:
        return run.log_growth, math.nan
    return run.log_growth, expected_log_growth(series, run.first_bar, run.exposure, run.cost_share)


def _record_growths(
    series: Any, first_bar: int, record: Any, expected: bool
) -> tuple[float, float]:
    """(realized, expected or NaN) log growth of a backtest `record` (row 0 at `first_bar`'s
    close) on `series`."""
    from envs.synthetic import expected_log_growth

    equity = record["equity"].to_numpy()  # [n + 1]
    realized = math.log(equity[-1] / equity[0]) if equity[-1] > 0 else -math.inf
    if not expected:
        return realized, math.nan
    cost_share = record["costs"].to_numpy()[1:] / equity[:-1]  # [n]
    exposure = record["exposure"].to_numpy()  # [n + 1]
    return realized, expected_log_growth(series, first_bar, exposure, cost_share)


def estimated_on_own_tail(
    kind: str, seed: int, series: Any, tail: range, env_config: Any, hold: float, edge: float
) -> dict[str, Any]:
    """The estimated ceiling of `series` (series `seed` of `kind`, as `synthetic_series` gives
    it) on its own `tail`, where buy-and-hold grew `hold` and the fair ceiling `hold + edge`;
    {} outside `ESTIMATED_KINDS`."""
    if kind not in ESTIMATED_KINDS:
        return {}
    g_estimated = estimated_run(kind, seed, series, tail, env_config).log_growth
    fitted = estimated_rule(kind, seed, env_config)[0]
    return {
        "growth_estimated": g_estimated,
        "share_estimated": (g_estimated - hold) / edge if edge > 0 else math.nan,
        "excess_growth_estimated": g_estimated - hold,
        "estimated_params": {k: fitted.params[k] for k in FITTED_KEYS[fitted.family]},
    }


def estimated_run(kind: str, seed: int, series: Any, tail: range, env_config: Any) -> Any:
    """The `RunResult` over `tail` of `series` of the estimated ceiling of series `seed` of
    `kind` (`estimated_rule`): the fair ceiling's rule under the fitted parameters and their
    knobs."""
    from envs.synthetic import rule_actions, run_actions

    fitted, knobs = estimated_rule(kind, seed, env_config)
    believed = replace(series, params=fitted.params)  # the bars of `series`, the fitted model
    actions = rule_actions(believed, env_config, "ceiling", knobs, start=tail.start)
    return run_actions(series, env_config, actions, tail)


_ESTIMATED: dict[tuple[str, int, str], tuple[Any, Any]] = {}  # one process's cache


def estimated_rule(kind: str, seed: int, env_config: Any) -> tuple[Any, Any]:
    """(series, knobs) of the estimated ceiling of series `seed` of `kind`: the series with the
    parameters `envs.synthetic.estimation` fits to its training bars (the bars an agent trained
    on it had), and the knobs tuned on those bars under them. Cached per process."""
    from envs.synthetic import estimated_series, tune_knobs

    key = (kind, seed, repr(env_config))
    if key not in _ESTIMATED:
        series, split = synthetic_series(kind, seed)
        train = split.splits[0].train
        fitted = estimated_series(series, train)
        _ESTIMATED[key] = (fitted, tune_knobs(fitted, env_config, "ceiling", train))
    return _ESTIMATED[key]


_FRESH_REFERENCES: dict[tuple[str, int, str], dict[str, tuple[float, float]]] = {}  # per process


def fresh_references(kind: str, k: int, env_config: Any) -> dict[str, tuple[float, float]]:
    """(realized, expected) log growth on the tail of fresh series k of `kind`: buy-and-hold,
    oracle and ceiling (knobs tuned on the series' own training bars); expected growth only on
    the `EXPECTED_KINDS` (else NaN). Cached per process."""
    from envs.synthetic import buy_and_hold_actions, rule_actions, run_actions, tune_knobs

    key = (kind, k, repr(env_config))
    if key not in _FRESH_REFERENCES:
        series, split = synthetic_series(kind, FRESH_SEED + k)
        train, tail = split.splits[0].train, split.splits[0].test
        actions = {"buy_and_hold": buy_and_hold_actions(env_config, len(series.market))}
        for rule in REFERENCES:
            knobs = tune_knobs(series, env_config, rule, train)
            actions[rule] = rule_actions(series, env_config, rule, knobs, start=tail.start)
        found = {}
        for name, chosen in actions.items():
            run = run_actions(series, env_config, chosen, tail)
            found[name] = _run_growths(series, run, kind in EXPECTED_KINDS)
        _FRESH_REFERENCES[key] = found
    return _FRESH_REFERENCES[key]


def held_by_state(equity_csv: Path, state: Any, tail: range) -> dict[str, float]:
    """The agent's mean |exposure| and chosen leverage on the tail's bars of each regime.

    Row k >= 1 of the record is bar ``tail.start + k``: the action held during it (chosen on
    the bar before) and the exposure at its close, under the regime ``state[tail.start + k]``.
    For the regime series only (an integer state): on volatility regimes this shows whether the
    leverage head sizes to the volatility it sees.
    """
    import numpy as np
    import pandas as pd

    if not np.issubdtype(np.asarray(state).dtype, np.integer):
        return {}
    record = pd.read_csv(equity_csv).iloc[1:]
    regime = np.asarray(state)[tail.start + 1 : tail.start + 1 + len(record)]  # [n]
    exposure = record["exposure"].abs().to_numpy()  # [n]
    chosen = record["leverage"].to_numpy()  # [n]
    in_position = (record["direction"] != "flat").to_numpy()  # [n]
    found = {}
    for k in np.unique(regime):
        mask = regime == k
        held = mask & in_position
        found[f"exposure_state{k}"] = float(exposure[mask].mean())
        found[f"leverage_state{k}"] = float(chosen[held].mean()) if held.any() else math.nan
    return found


def volatility_probe(kind: str, seed: int, model: Any) -> dict[str, float]:
    """What the agent `model` (a `LoadedModel`) decides when only the volatility level changes.

    On the `VOLATILITY_KINDS` only (else {}): at every decision bar of the tail of series
    `seed`, the observation the agent would see from a flat account, with the `volatility`
    column of the whole window set to the level of each regime (the generator's per-bar vol,
    annualised as the env does) and `volatility_trend` to 0; everything else, the scaled price
    moves included, is the bar's own. Per regime k, averaged over the bars: the leverage head's
    expected level (``probe_leverage_state<k>``) and the direction head's probability of flat
    (``probe_flat_state<k>``). Growth-optimal leverage is about 6x calm and 0.9x turbulent on
    volatility regimes, 6x and 0.32x on turbulence regimes, so a head that reads the level
    chooses less in state 1.
    """
    if kind not in VOLATILITY_KINDS:
        return {}
    import numpy as np
    import torch

    from training.evaluation.backtest import evaluation_env

    config = model.config.env
    series, split = synthetic_series(kind, seed)
    env = evaluation_env(series.market, config, split.splits[0].test)
    first, _ = env.reset()
    start = first["account"]  # [N_ACCOUNT] a flat account with its initial equity
    tail = split.splits[0].test
    bars = np.arange(max(tail.start, config.window - 1), tail.stop - 1)  # [N] decision bars
    windows = env.core.market_windows(bars)  # [N, W, F]
    names = config.feature_names
    level, trend = names.index("volatility"), names.index("volatility_trend")
    per_year = math.sqrt(env.core.bars_per_year)
    levels = torch.tensor(config.leverage_levels, dtype=torch.float32)  # [L]
    found = {}
    for k, vol in enumerate(series.params["vol"]):
        probe = windows.copy()
        probe[:, :, level] = math.log(vol * per_year)
        probe[:, :, trend] = 0.0
        obs = {"market": probe, "account": np.repeat(start[None], len(bars), axis=0)}
        with torch.no_grad():
            heads = model.policy.head_distributions(obs).heads()
        leverage = heads["leverage"].probs @ levels  # [N]
        flat = heads["direction"].probs[:, config.flat_direction_index]  # [N]
        found[f"probe_leverage_state{k}"] = float(leverage.mean())
        found[f"probe_flat_state{k}"] = float(flat.mean())
    return found


@dataclass(frozen=True)
class RealJob:
    """One walk-forward over the bundled universe with one seed."""

    seed: int
    folds: int
    config: str
    overrides: tuple[str, ...]
    out: str
    configs_tried: int


def run_real(job: RealJob) -> dict[str, Any]:
    """Walk forward on the config's instruments with one seed; the combined accounts' figures."""
    import torch

    from training.cli import one_line_user_warnings
    from training.config import load_config
    from training.walkforward import walk_forward

    torch.set_num_threads(1)
    overrides = [*job.overrides, f"train.seed={job.seed}", "train.threads=1"]
    cfg = load_config(job.config, [*overrides, "train.progress_bar=false"])
    started = time.perf_counter()
    # a note on the data (e.g. a file without an adjusted close) as one line, as the CLI prints it
    with contextlib.redirect_stdout(io.StringIO()), one_line_user_warnings():
        run, report = walk_forward(
            cfg, job.folds, Path(job.out) / f"seed{job.seed}", job.configs_tried
        )
    return real_figures(job.seed, run.root, report, time.perf_counter() - started)


def real_figures(seed: int, run: Path, report: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The figures of one seed's walk-forward (`run`, its walkforward.json data `report`) that
    the benchmark reports: the combined accounts against the baselines, each instrument's and
    each fold's Sharpe."""
    agent, hold = report["aggregate"]["agent"], report["aggregate"]["buy_and_hold"]
    sized = report["aggregate"].get("sized_hold", {})  # only with `env.volatility_target`
    return {
        "seed": seed,
        "run": str(run),
        "seconds": seconds,
        "sharpe": finite(agent["sharpe"]),
        "sharpe_buy_and_hold": finite(hold["sharpe"]),
        "sharpe_minus_buy_and_hold": finite(agent["sharpe"]) - finite(hold["sharpe"]),
        # buy-and-hold sized like the agent, with `env.volatility_target` only (NaN without)
        "sharpe_sized_hold": finite(sized.get("sharpe")),
        "total_return_pct": agent["total_return_pct"],
        "total_return_pct_buy_and_hold": hold["total_return_pct"],
        "total_return_pct_sized_hold": finite(sized.get("total_return_pct")),
        "max_drawdown_pct": finite(agent["max_drawdown_pct"]),
        "max_drawdown_pct_buy_and_hold": finite(hold["max_drawdown_pct"]),
        "max_drawdown_pct_sized_hold": finite(sized.get("max_drawdown_pct")),
        "turnover_per_year": finite(agent["turnover_per_year"]),
        "fees_pct_per_year": finite(agent["fees_pct_per_year"]),
        "average_leverage": finite(agent["average_leverage"]),
        "noise_probability": finite(report["edge"]["noise_probability"]),
        "edge_sharpe": finite(report["edge"]["edge_sharpe"]),
        "instruments": {
            name: {
                "sharpe": finite(m["agent"]["sharpe"]),
                "buy_and_hold": finite(m["buy_and_hold"]["sharpe"]),
            }
            for name, m in report["instruments"].items()
        },
        # Each fold's test segment on its own: how much of it the agent was in the market, its
        # Sharpe against sized hold's, and the contender the fold kept (a policy that stands
        # aside through a segment shows here, not in the combined figures).
        "folds": [
            {
                "fold": fold["fold"],
                "test": fold["test"],
                "exposure_pct": finite(fold["metrics"].get("agent", {}).get("exposure_pct")),
                "sharpe": finite(fold["metrics"].get("agent", {}).get("sharpe")),
                "sharpe_sized_hold": finite(fold["metrics"].get("sized_hold", {}).get("sharpe")),
                "contender_kept": fold.get("contender_kept"),
            }
            for fold in report["folds"]
        ],
    }


# --- entry point -------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds, 40k timesteps")
    parser.add_argument("--config", default=str(REPO / "configs" / "default.yaml"))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="K=V")
    parser.add_argument("--seeds", type=int, nargs="+", help="default 0-4 (quick: 0 1)")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--timesteps", type=int, help="train.total_timesteps of every run")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (one torch thread each)")
    parser.add_argument("--out", type=Path, help="default runs/learning-<time>")
    parser.add_argument("--real", action="store_true", help="also walk forward on real data")
    parser.add_argument("--real-only", action="store_true", help="only the real-data part")
    parser.add_argument("--real-seeds", type=int, nargs="+", help="default 0 1 2 (quick: 0)")
    parser.add_argument("--folds", type=int, default=3, help="walk-forward test segments")
    parser.add_argument(
        "--rescore",
        type=Path,
        metavar="OUT",
        help="train nothing: score the agents of OUT/learning.json on --fresh-series series",
    )
    parser.add_argument(
        "--reselect",
        type=Path,
        metavar="OUT",
        help="train nothing: what OUT's synthetic runs keep under --set (selection keys, "
        "train.challenger, or training keys some --from report's runs trained with), scored "
        "into --out",
    )
    parser.add_argument(
        "--from",
        dest="sources",
        type=Path,
        nargs="+",
        default=[],
        metavar="OTHER",
        help="with --reselect: earlier runs of the same kinds and seeds whose contenders the "
        "contest may take",
    )
    parser.add_argument(
        "--combine",
        type=Path,
        nargs="+",
        metavar="OUT",
        help="train nothing: pool the results of earlier runs' OUT/learning.json into one report",
    )
    parser.add_argument(
        "--fresh-series",
        type=int,
        help="unseen series of its kind each agent is also scored on (default 8; quick: 2)",
    )
    parser.add_argument(
        "--configs-tried", type=int, default=1, help="configurations tried so far (for DSR)"
    )
    return parser.parse_args(argv)


def validation_schedule(config: str, overrides: Sequence[str], timesteps: int) -> list[str]:
    """`--set` overrides that run `config` (with `overrides`) for `timesteps` instead: a
    validation pass every tenth of the run (`train.eval_every`), and none before the same share
    of it as the config holds back (`train.eval_start`: the default's 60k of 150k is 16k of
    40k). Raises `ConfigError` for a config that does not load."""
    from training.config import load_config

    train = load_config(config, overrides).train
    start = timesteps * train.eval_start // train.total_timesteps
    return [
        f"train.total_timesteps={timesteps}",
        f"train.eval_every={max(timesteps // 10, 1)}",
        f"train.eval_start={start}",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.combine:
        return combine(args.combine)
    if args.rescore:
        n_fresh = FRESH_SERIES if args.fresh_series is None else args.fresh_series
        return rescore(args.rescore, n_fresh, args.jobs)
    if args.reselect:
        if args.out is None:
            print("benchmarks/learning.py: --reselect OUT needs --out NEW", file=sys.stderr)
            return 2
        n_fresh = FRESH_SERIES if args.fresh_series is None else args.fresh_series
        try:
            return reselect(
                args.reselect, args.out, args.overrides, args.jobs, n_fresh, args.sources
            )
        except ReselectError as error:
            print(f"benchmarks/learning.py: {error}", file=sys.stderr)
            return 2
    seeds = args.seeds or ([0, 1] if args.quick else [0, 1, 2, 3, 4])
    overrides = list(args.overrides)
    timesteps = args.timesteps or (40_000 if args.quick else None)
    if timesteps:
        from training.config import ConfigError

        try:
            overrides += validation_schedule(args.config, overrides, timesteps)
        except ConfigError as error:
            print(f"benchmarks/learning.py: {error}", file=sys.stderr)
            return 2
    if not any(item.startswith("train.checkpoint_every=") for item in overrides):
        overrides.append("train.checkpoint_every=0")  # unless asked for: disk and time
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out = args.out or REPO / "runs" / f"learning-{stamp}"
    if (out / "learning.json").exists():  # never overwrite an earlier run's results
        print(
            f"benchmarks/learning.py: {out} already holds results (learning.json); pass another "
            "--out (or --rescore it)",
            file=sys.stderr,
        )
        return 2
    out.mkdir(parents=True, exist_ok=True)
    kinds = [] if args.real_only else args.kinds
    fresh_series = args.fresh_series
    if fresh_series is None:
        fresh_series = 2 if args.quick else FRESH_SERIES
    jobs = [
        Job(kind, seed, args.config, tuple(overrides), str(out / "synthetic"), fresh_series)
        for seed in seeds
        for kind in kinds
    ]
    real_seeds = args.real_seeds or ([0] if args.quick else [0, 1, 2])
    real_jobs = [
        RealJob(seed, 2 if args.quick else args.folds, args.config, tuple(overrides),
                str(out / "real"), args.configs_tried)
        for seed in real_seeds
    ] if args.real or args.real_only else []  # fmt: skip
    print(f"learning benchmark: {len(jobs)} synthetic runs ({', '.join(kinds)}; seeds "
          f"{' '.join(map(str, seeds))}), {len(real_jobs)} walk-forwards on real data, config "
          f"{args.config} {' '.join(overrides)}, {args.jobs} at once -> {out}",
          flush=True)  # fmt: skip
    started = time.perf_counter()
    results, real = [], []
    with ProcessPoolExecutor(args.jobs, mp_context=get_context("spawn")) as pool:
        synthetic = [(job, pool.submit(run_synthetic, job)) for job in jobs]
        walks = [(job, pool.submit(run_real, job)) for job in real_jobs]
        for job, future in synthetic:
            try:
                result = future.result()
            except Exception as error:  # one failed run is reported, the others go on
                print(f"  {job.kind:<19} seed {job.seed}: FAILED ({error})", flush=True)
                continue
            results.append(result)
            print(f"  {result['kind']:<19} seed {result['seed']}: share {result['share']:+.2f} "
                  f"(fresh series {result.get('share_fresh', math.nan):+.2f}), "
                  f"turnover {result['turnover_per_year']:.0f}/yr, "
                  f"{result['seconds']:.0f} s", flush=True)  # fmt: skip
        for real_job, future in walks:
            try:
                result = future.result()
            except Exception as error:
                print(f"  real walk-forward    seed {real_job.seed}: FAILED ({error})", flush=True)
                continue
            real.append(result)
            print(f"  real walk-forward    seed {result['seed']}: Sharpe {result['sharpe']:.2f} "
                  f"(b&h {result['sharpe_buy_and_hold']:.2f}), turnover "
                  f"{result['turnover_per_year']:.0f}/yr, {result['seconds']:.0f} s",
                  flush=True)  # fmt: skip
    elapsed = time.perf_counter() - started
    report = {
        "command": " ".join(sys.argv),
        "config": args.config,
        "overrides": overrides,
        "seeds": seeds,
        "synthetic": results,
        "real": real,
        "configs_tried": args.configs_tried,
        "seconds": elapsed,
    }
    return write_and_print(report, out / "learning.json")


def rescore(out: Path, n_fresh: int, jobs: int) -> int:
    """Score the agents of an earlier run's ``<out>/learning.json`` on fresh series, in place."""
    path = out / "learning.json"
    report = json.loads(path.read_text())
    results = report["synthetic"]
    print(f"scoring {len(results)} trained agents of {path} on {n_fresh} fresh series each")
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
        scores = pool.map(_score_result, results, [n_fresh] * len(results))
        for result, score in zip(results, scores, strict=True):
            result.update(score)
    report["rescored"] = " ".join(sys.argv)
    return write_and_print(report, path)


def _score_result(result: dict[str, Any], n_fresh: int) -> dict[str, Any]:
    """A saved run's scores again: on fresh series, the probe, and the estimated ceiling on its
    own tail (under the run's env config, as scored at training)."""
    import torch

    from training.config import load_config

    torch.set_num_threads(1)
    kind, seed, hold = result["kind"], result["seed"], result["growth_buy_and_hold"]
    env_config = load_config(Path(result["run"]) / "config.yaml", []).env
    edge = result["growth_ceiling"] - hold
    series, split = synthetic_series(kind, seed)
    splits = split.splits[0]
    return {
        "growth_training_bars": training_bars_growth(series.market, splits.train),
        **estimated_on_own_tail(kind, seed, series, splits.test, env_config, hold, edge),
        **score_trained_agent(kind, seed, Path(result["run"]), n_fresh),
    }


# The keys that only choose among what a run trained (which validation pass, which contender),
# never how it trains: a run under other values of them trains to the bit as it did (but
# `train.select_by` where `train.patience` stops training by it)
SELECTION_KEYS = (
    "train.select_by",
    "train.challenger_margin",
    "train.challenger_evidence",
    "train.hold_margin",
    "train.hold_against",
    "train.hold_evidence",
    "train.hold_evidence_per",
    "train.policy_margin",
)


class ReselectError(ValueError):
    """An earlier run that `--reselect` cannot judge (one line: what, and what to do)."""


def reselect(
    out: Path,
    new_out: Path,
    overrides: Sequence[str],
    jobs: int,
    n_fresh: int,
    sources: Sequence[Path] = (),
) -> int:
    """Train nothing: hold every synthetic run of ``<out>/learning.json``, and every fold of its
    walk-forwards on real data, again as the run's config with `overrides` would have held it,
    from contenders trained already, and score what it keeps as the run scored its own (a
    walk-forward's folds traded through again, `_reselect_walk`; only under a config with a
    contest, since a fold without one would train); write the results to
    ``<new_out>/learning.json`` and print them.

    Each contender the new config trains or builds (`contest_configs`; the run itself where it
    holds no contest) is taken from the first run of the same kind and seed, in `out` and then
    in the reports of `sources`, that has one trained under the same config, the keys of
    `SELECTION_KEYS`, the contest's (`train.challenger`) and the folder aside (`_trains_as`):
    other selection keys need only `out`; a contest whose contenders several configs trained
    (a challenger on other overrides, an incumbent on other training keys) takes each from the
    report whose runs trained it. Exact, since what validation keeps never feeds back into
    training (without `train.patience`) and a run trains to the bit alike on one machine: the
    new config would train each contender as the run it is taken from did. A contender whose
    best pass changes needs that pass's checkpoint (`--set train.checkpoint_every=` the run's
    `train.eval_every` keeps one at every pass); a margin alone (the same `train.select_by`)
    changes no contender's best pass, so it needs none. With the earlier config it gives the
    earlier results back. Raises `ReselectError` (one line) where a contender was never trained
    as the new config trains it, before anything is written.
    """
    from training.config import ConfigError, load_config

    report = json.loads((out / "learning.json").read_text())
    if new_out.exists():
        raise ReselectError(f"--out {new_out}: already exists; pass a new folder")
    results, walks = report["synthetic"], report["real"]
    trained: dict[tuple[str, int], list[str]] = {}  # (kind or "real", seed): runs
    for path in [out, *sources]:
        try:
            earlier = json.loads((path / "learning.json").read_text())
            runs = [*earlier["synthetic"], *({**w, "kind": "real"} for w in earlier["real"])]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ReselectError(f"--from {path}: no benchmark results ({error})") from None
        for run in runs:
            trained.setdefault((run["kind"], run["seed"]), []).append(run["run"])

    def config(run: str) -> Any:
        try:  # a value the config refuses: one line here, not a traceback from a worker
            return load_config(Path(run) / "config.yaml", list(overrides))
        except ConfigError as error:
            raise ReselectError(str(error)) from None

    plans = []
    for result in results:
        label = f"{result['kind']} seed {result['seed']}"
        runs = trained[(result["kind"], result["seed"])]
        plans.append(_reselect_plan(config(result["run"]), label, runs))
    walk_plans = []
    for walk in walks:
        cfg = config(walk["run"])
        if not cfg.train.contested:
            raise ReselectError(
                f"--reselect: real seed {walk['seed']}: a walk-forward is held again only under "
                "a config with a contest (train.challenger or train.hold_margin)"
            )
        folds = sorted(Path(walk["run"]).glob("fold_*"), key=lambda fold: int(fold.name[5:]))
        walk_plans.append([
            _reselect_plan(cfg, f"real seed {walk['seed']} {fold.name}",
                           [f"{run}/{fold.name}" for run in trained[("real", walk["seed"])]])
            for fold in folds
        ])  # fmt: skip
    new_out.mkdir(parents=True)
    print(f"reselecting {len(results)} runs and {len(walks)} walk-forwards of {out} with "
          f"{' '.join(overrides)} -> {new_out}")  # fmt: skip
    tried = report.get("configs_tried", 1)
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
        args = [
            (r, str(new_out), tuple(overrides), n_fresh, plan)
            for r, plan in zip(results, plans, strict=True)
        ]
        walk_args = [
            (w, str(new_out), tuple(overrides), tried, fold_plans)
            for w, fold_plans in zip(walks, walk_plans, strict=True)
        ]
        walking = pool.map(_reselect_walk, walk_args)  # submitted now, beside the runs below
        reselected = list(pool.map(_reselect_run, args))
        walked = list(walking)
    for old, new in zip(results, reselected, strict=True):
        print(f"  {old['kind']:<19} seed {old['seed']}: kept {old['contender_kept']} at "
              f"{old['chosen_timesteps']:,} -> {new['contender_kept']} at "
              f"{new['chosen_timesteps']:,}; tail g - g_bh {old['excess_growth']:+.3f} -> "
              f"{new['excess_growth']:+.3f}")  # fmt: skip
    for old, new in zip(walks, walked, strict=True):
        print(f"  real walk-forward    seed {old['seed']}: kept "
              f"{', '.join(str(f.get('contender_kept')) for f in old.get('folds', []))} -> "
              f"{', '.join(str(f.get('contender_kept')) for f in new['folds'])}; Sharpe "
              f"{old['sharpe']:.2f} -> {new['sharpe']:.2f}")  # fmt: skip
    new_report = {
        **report,
        "command": " ".join(sys.argv),
        "reselected_from": [str(out), *map(str, sources)],
        "overrides": [*report["overrides"], *overrides],
        "synthetic": reselected,
        "real": walked,
    }
    return write_and_print(new_report, new_out / "learning.json")


def _trains_as(cfg: Any) -> dict[str, Any]:
    """`cfg` as far as it decides what a run trains: without its folder, its contest
    (`train.challenger`) and the keys of `SELECTION_KEYS` (but `train.select_by` where
    `train.patience` stops training by it)."""
    from training.config import config_to_dict

    ignored = {"run_dir", "challenger", *(key.split(".", 1)[1] for key in SELECTION_KEYS)}
    if cfg.train.patience:
        ignored.discard("select_by")
    raw = config_to_dict(cfg)
    raw["train"] = {key: value for key, value in raw["train"].items() if key not in ignored}
    return raw


def _reselect_plan(cfg: Any, label: str, runs: Sequence[str]) -> dict[str, str]:
    """Where each contender of `cfg`'s run `label` comes from: the name of each contender
    of `contest_configs` (or "" for the run itself, where `cfg` holds no contest) and the
    folder of the first of `runs` (earlier runs of the same kind and seed) that trained one as
    `cfg` trains it (`_trains_as`): a trained contender of theirs (or the run itself where it
    held no contest) for a trained one, a hold contender for the hold contender (built from the
    same config as the incumbent, never trained). Raises `ReselectError` naming the first
    contender none of `runs` has."""
    from training.config import load_config
    from training.run.challenger import TRAINED, contest_configs
    from training.run.folder import RunDir

    wanted = contest_configs(cfg, RunDir(Path(runs[0]))) if cfg.train.contested else {"": cfg}
    candidates: dict[bool, list[Any]] = {True: [], False: []}  # built: the hold contenders
    for root in map(RunDir, map(Path, runs)):
        trained = [root.contender(name) for name in TRAINED if root.contender(name).root.is_dir()]
        held = root.contender("hold")
        candidates[False] += trained or ([] if held.root.is_dir() else [root])
        candidates[True] += [held] if held.root.is_dir() else []
    trains_as = {
        folder.root: _trains_as(load_config(folder.config))
        for folders in candidates.values()
        for folder in folders
    }
    plan = {}
    for name, wanted_cfg in wanted.items():
        target = _trains_as(wanted_cfg)
        found = [f for f in candidates[name == "hold"] if trains_as[f.root] == target]
        if not found:
            raise ReselectError(
                f"--reselect: {label}: no run of the reports "
                f"given trained its {name or 'policy'} as this config does (only the keys "
                f"{', '.join(SELECTION_KEYS)} and train.challenger may differ from a trained "
                "contender's); pass the report whose run trained it with --from"
            )
        plan[name] = str(found[0].root)
    return plan


def _reselect_run(
    args: tuple[dict[str, Any], str, tuple[str, ...], int, dict[str, str]],
) -> dict[str, Any]:
    """One run of `reselect`: its folder rebuilt under the new config in `<new_out>/synthetic/`
    from the folders of its `_reselect_plan` (each contender's history rescored, its kept pass's
    checkpoint as its best model, the contest held again), backtested on the tail and scored as
    `run_synthetic` scores."""
    import torch

    from training.config import load_config
    from training.evaluation.backtest import backtest, evaluation_env, write_report
    from training.evaluation.selection import best_pass
    from training.run.challenger import contest_evidence, keep_better_contender
    from training.run.data import RunData
    from training.run.folder import RunDir, load_model

    torch.set_num_threads(1)
    result, new_out, overrides, n_fresh, plan = args
    run = RunDir(Path(result["run"]))
    cfg = load_config(run.config, list(overrides))
    copy = RunDir(Path(new_out) / "synthetic" / run.root.name)
    _take_contenders(cfg, run, copy, plan)
    kind, seed = result["kind"], result["seed"]
    series, split = synthetic_series(kind, seed)
    if cfg.train.contested:
        training = RunData((series.market,), split).ranges("train", 1, cfg.env.window)
        choice = keep_better_contender(copy, cfg.train, contest_evidence(cfg, training))
    else:
        choice = None
    tail = split.splits[0].test
    tested = backtest(load_model(copy.root).policy, evaluation_env(series.market, cfg.env, tail))
    write_report(tested, copy.report, f"{kind} seed {seed}, reselected")
    history = json.loads(copy.validation_history.read_text())
    return {
        **result,
        "run": str(copy.root),
        **tail_figures(tested.metrics["agent"], result["growth_buy_and_hold"],
                       result["growth_ceiling"]),
        "chosen_timesteps": history[best_pass(history) or 0]["timesteps"],
        **contest_fields(choice),
        **score_trained_agent(kind, seed, copy.root, n_fresh),
        **held_by_state(copy.report / "equity.csv", series.state, tail),
    }  # fmt: skip


def _reselect_walk(
    args: tuple[dict[str, Any], str, tuple[str, ...], int, list[dict[str, str]]],
) -> dict[str, Any]:
    """One walk-forward of `reselect`: each fold's folder rebuilt under the new config in
    `<new_out>/real/` from the folders of its `_reselect_plan`, walked forward again without
    training (`walk_forward` of trained folds: each fold's contest held again, its test segment
    traded again) and reported as `run_real` reports."""
    import torch

    from training.cli import one_line_user_warnings
    from training.config import load_config
    from training.run.folder import RunDir
    from training.walkforward import walk_forward

    torch.set_num_threads(1)
    walk, new_out, overrides, configs_tried, plans = args
    source = RunDir(Path(walk["run"]))
    cfg = load_config(source.config, list(overrides))
    copy = Path(new_out) / "real" / source.root.name
    for number, plan in enumerate(plans, start=1):
        fold = f"fold_{number}"
        _take_contenders(cfg, RunDir(source.root / fold), RunDir(copy / fold), plan)
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), one_line_user_warnings():
        run, report = walk_forward(cfg, len(plans), copy, configs_tried, trained=True)
    return real_figures(walk["seed"], run.root, report, time.perf_counter() - started)


def _take_contenders(cfg: Any, source: Any, run: Any, plan: dict[str, str]) -> None:
    """Lay out the new folder `run` (a `RunDir`, reselecting `source`) under `cfg` from the
    folders of its `_reselect_plan`: its config, `source`'s splits, and each contender of
    `contest_configs` in its folder (or, where `cfg` holds no contest, the run itself) as
    `_keep_pass` keeps it."""
    from training.config import save_config
    from training.run.challenger import contest_configs
    from training.run.folder import RunDir

    run.root.mkdir(parents=True)
    save_config(cfg, run.config)
    shutil.copy(source.splits, run.splits)
    select_by = cfg.train.select_by
    if not cfg.train.contested:
        _keep_pass(RunDir(Path(plan[""])), run, cfg, select_by)
        return
    for name, part_cfg in contest_configs(cfg, run).items():
        _keep_pass(RunDir(Path(plan[name])), run.contender(name), part_cfg, select_by)


def _keep_pass(source: Any, target: Any, config: Any, select_by: str) -> None:
    """`source`'s run folder as `target`, run under `config` (written there), had it kept its
    passes by `select_by`: the history rescored, the final model, and as the best model that of
    the best pass: the run's own best model where `select_by` keeps the pass the run kept, else
    the pass's checkpoint (a hold contender's, validated at 0 timesteps, is its final model)."""
    from training.config import save_config
    from training.evaluation.selection import best_pass, validation_score
    from training.run.atomic import write_json_atomic

    target.root.mkdir(parents=True, exist_ok=True)
    save_config(config, target.config)
    shutil.copy(source.final_model, target.final_model)
    history = json.loads(source.validation_history.read_text())
    kept_before = best_pass(history)  # under the run's own scores
    for entry in history:
        entry["score"], entry["score_standard_error"] = validation_score(entry, select_by)
    write_json_atomic(target.validation_history, history)
    best = best_pass(json.loads(target.validation_history.read_text()))  # NaN read back as None
    if best is None:
        return
    timesteps = history[best]["timesteps"]
    if best == kept_before and source.best_model.is_file():
        model = source.best_model  # the same pass: the model the run kept for it
    else:
        model = source.final_model if timesteps == 0 else source.checkpoint(timesteps)
    if not model.is_file():
        raise ReselectError(
            f"--reselect: {model} is missing: train with --set train.checkpoint_every= the "
            "run's train.eval_every, for a checkpoint at every validation pass"
        )
    shutil.copy(model, target.best_model)


def combine(outs: Sequence[Path]) -> int:
    """Print one report pooled from the results of earlier runs (each OUT's ``learning.json``),
    training and writing nothing. A synthetic run (kind, seed) or a real seed held by more than
    one OUT is taken from the last OUT that holds it, so a later run of some seeds replaces an
    earlier one's. Each OUT's config file and overrides are printed with the runs taken from it;
    the file is named by its path, not its content, so a pool of reports from different code
    states is the caller's to account for. Returns 2, with one line naming the file, where an
    OUT holds no readable results."""
    synthetic: dict[tuple[str, int], dict[str, Any]] = {}
    real: dict[int, dict[str, Any]] = {}
    sources, configs_tried = [], 1
    for out in outs:
        path = out / "learning.json"
        try:
            report = json.loads(path.read_text())
            runs, walks = report["synthetic"], report["real"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            reason = f"missing key {error}" if isinstance(error, KeyError) else error
            print(f"benchmarks/learning.py: {path}: no benchmark results ({reason})",
                  file=sys.stderr)  # fmt: skip
            return 2
        synthetic.update({(r["kind"], r["seed"]): r for r in runs})
        real.update({r["seed"]: r for r in walks})
        configs_tried = max(configs_tried, report.get("configs_tried", 1))
        sources.append((path, report, runs, walks))
    print(f"pooled from {len(outs)} reports (a run in several is taken from the last):")
    for path, report, runs, walks in sources:
        taken = [r for r in runs if synthetic[(r["kind"], r["seed"])] is r]
        taken_real = [r for r in walks if real[r["seed"]] is r]
        kinds = dict.fromkeys(r["kind"] for r in taken)
        print(f"  {path}: config {report.get('config', '?')} "
              f"{' '.join(report.get('overrides', []))}")  # fmt: skip
        for kind in kinds:
            print(f"    {kind}: seeds {seed_list([r for r in taken if r['kind'] == kind])}")
        if taken_real:
            print(f"    real: seeds {seed_list(taken_real)}")
    results = sorted(synthetic.values(), key=lambda r: (KINDS.index(r["kind"]), r["seed"]))
    pooled = {"synthetic": results, "real": [real[s] for s in sorted(real)],
              "config": "each pooled report's config", "configs_tried": configs_tried}  # fmt: skip
    print_report(pooled, per_run=False)  # each OUT's own report has its per-run tables
    if results:
        print(f"\nissue #10's targets on every block of {BLOCK} seeds, and over all of them:")
        print(blocks_table(results))
    return 0


def write_and_print(report: dict[str, Any], path: Path) -> int:
    """Write the benchmark's JSON report (atomically) and print its tables."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=2, default=str) + "\n")
    tmp.replace(path)
    print_report(report)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
