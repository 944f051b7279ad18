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
     each with its knobs tuned on the training bars (`envs.synthetic.references`) and trading
     at the env's leverage levels, or with `policy.deployed_leverage` at that level alone, the
     only one the agent's saved policy trades at (`learning_scoring.reference_env`);
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
   that line for every seed below a worst-seed target, and `five_seeds_table` gives the
   chance, at each kind's miss rate, that five seeds drawn at random meet every worst-seed
   target (the estimated ceiling's beside it), with a 90% credible interval: pooled with
   `--combine`, the issue's aggregate.
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
        [--out runs/learning-<time> [--resume]] [--real] [--folds 3] [--configs-tried N]
        [--fresh-series 8]
    python benchmarks/learning.py --combine OUT [OUT ...]
    python benchmarks/learning.py --reselect OUT [--from OTHER ...] [--set k=v ...] --out NEW

`--quick` (about 6 minutes on 2 cores under the default): 2 seeds, 40k timesteps, and with
`--real` a walk-forward of real seed 0. With
`--timesteps` (or `--quick`) the config's validation schedule is fitted to the shorter run: ten
passes, the first held back by the same share of the run (`validation_schedule`). Runs go to
`--out`; the tables are printed and written to `<out>/learning.json`, which holds every run's
result from the moment it finishes (`Progress`: the runs still to come under `pending`), so an
interrupted benchmark loses no finished run (Ctrl-C or SIGTERM ends the workers and exits with
130); the same command with `--resume` trains only the runs it lacks, and an `--out` holding
results is otherwise refused. `--rescore OUT` trains
nothing: it scores the agents an earlier run saved in OUT on `--fresh-series` fresh series, and
the estimated ceiling again. `--combine OUT [OUT ...]` trains and writes nothing: it pools
earlier runs' results into one set of tables, with the targets checked on every block of ten
seeds (`blocks_table`), for a seed count no one run reaches. `--reselect OUT --out NEW` trains
nothing either: it keeps, in OUT's synthetic runs and in every fold of its walk-forwards, the
pass and contender that another config (`--set`) would have kept, and scores them into NEW
(`learning_reselect.reselect`; a walk-forward's folds are traded through again). Other selection
keys (`training.config.SELECTION_KEYS`: `train.select_by`, the contest's margins, evidence
levels and prior) need only OUT; a contest of contenders that other runs trained
(`train.challenger` on other overrides, an incumbent on other training keys) takes each from the
`--from OTHER` report whose run of the same kind and seed trained it under the same config.
Exact when those runs kept a checkpoint at every validation pass
(`--set train.checkpoint_every=` the config's `train.eval_every`), or where no contender's best
pass changes.

This file trains and walks forward; its siblings do the rest: `learning_scoring.py` scores what
a run trained (series, references, fresh series, probes), `learning_reselect.py` holds earlier
runs' contests again, and `learning_report.py` checks the targets and prints the tables.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import datetime
from multiprocessing import active_children, get_context
from pathlib import Path
from types import FrameType
from typing import Any

from learning_report import (
    BLOCK,
    blocks_table,
    finite,
    print_report,
    seed_list,
    write_and_print,
    write_report,
)
from learning_reselect import ReselectError, reselect
from learning_scoring import (
    FRESH_SERIES,
    contest_fields,
    estimated_on_own_tail,
    held_by_state,
    real_figures,
    reference_env,
    restart_kept,
    score_trained_agent,
    synthetic_series,
    tail_figures,
    tail_references,
    training_bars_growth,
)
from learning_vote import VoteError, check_vote_args, vote_read

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

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
    env_config = reference_env(cfg)  # what the references trade under
    references = tail_references(series, env_config, splits)
    hold = math.log1p(metrics["buy_and_hold"]["total_return_pct"] / 100.0)
    edge = references["ceiling"] - hold
    estimated = estimated_on_own_tail(job.kind, job.seed, series, tail, env_config, hold, edge)
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
        "restart_kept": restart_kept(run),
        **contest_fields(read_contest(run)),
        "growth_training_bars": training_bars_growth(series.market, splits.train),
        **estimated,
        **scores,
        **by_state,
    }


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
    out, attempt = Path(job.out) / f"seed{job.seed}", 1
    while out.exists():  # an interrupted attempt's folder stays as it was (--resume)
        attempt += 1
        out = Path(job.out) / f"seed{job.seed}-{attempt}"
    started = time.perf_counter()
    # a note on the data (e.g. a file without an adjusted close) as one line, as the CLI prints it
    with contextlib.redirect_stdout(io.StringIO()), one_line_user_warnings():
        run, report = walk_forward(cfg, job.folds, out, job.configs_tried)
    return real_figures(job.seed, run.root, report, time.perf_counter() - started)


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
    parser.add_argument(
        "--resume",
        action="store_true",
        help="finish an interrupted run: train only the runs --out's learning.json lacks "
        "(same --config and --set)",
    )
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
        "--vote",
        type=Path,
        metavar="OUT",
        help="train nothing: where OUT's contests kept a trained policy, score instead the vote "
        "of the restarts and challenger of the same runs of --from (default OUT), into --out",
    )
    parser.add_argument(
        "--vote-kept",
        nargs="+",
        default=["incumbent", "challenger"],
        choices=["incumbent", "challenger"],
        help="with --vote: the contenders a vote replaces where the contest kept them",
    )
    parser.add_argument(
        "--from",
        dest="sources",
        type=Path,
        nargs="+",
        default=[],
        metavar="OTHER",
        help="with --reselect: earlier runs of the same kinds and seeds whose contenders the "
        "contest may take; with --vote: the runs that hold the vote's members",
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
    if args.vote:
        return _vote(args)
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
    try:
        earlier = earlier_report(out, args.resume, args.config, overrides)
    except ResumeError as error:
        print(f"benchmarks/learning.py: {error}", file=sys.stderr)
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
    progress = Progress(out / "learning.json", earlier, {
        "command": " ".join(sys.argv),
        "config": args.config,
        "overrides": overrides,
        "seeds": seeds,
        "configs_tried": args.configs_tried,
    })  # fmt: skip
    jobs = [job for job in jobs if progress.to_do(job_key(job))]
    real_jobs = [job for job in real_jobs if progress.to_do(job_key(job))]
    progress.plan([job_key(job) for job in [*jobs, *real_jobs]])
    synthetic = f" ({', '.join(kinds)}; seeds {' '.join(map(str, seeds))})" if jobs else ""
    print(f"learning benchmark: {len(jobs)} synthetic runs{synthetic}, "
          f"{len(real_jobs)} walk-forwards on real data, config "
          f"{args.config} {' '.join(overrides)}, {args.jobs} at once -> {out}"
          f"{progress.describe_earlier()}", flush=True)  # fmt: skip
    pool = ProcessPoolExecutor(args.jobs, mp_context=get_context("spawn"))
    try:
        with stopped_by_sigterm():
            futures = {pool.submit(run_synthetic, job): job for job in jobs}
            futures.update({pool.submit(run_real, job): job for job in real_jobs})
            for future in as_completed(futures):
                job = futures[future]
                try:
                    result = future.result()
                except Exception as error:  # one failed run is reported, the others go on
                    print(f"  {job_key(job) + ':':<26} FAILED ({error})", flush=True)
                    progress.failed(job_key(job))
                    continue
                progress.finished(job_key(job), result)
                print(f"  {job_key(job) + ':':<26} {describe_result(result)}", flush=True)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (`timeout`): the runs that landed are kept
        pool.shutdown(wait=False, cancel_futures=True)
        for worker in active_children():  # a run half done is dropped, not waited for
            worker.terminate()
        print(f"benchmarks/learning.py: stopped; {progress.describe_stop()}", file=sys.stderr)
        return 130
    pool.shutdown()
    return write_and_print(progress.final(), out / "learning.json")


def _vote(args: argparse.Namespace) -> int:
    """`--vote OUT`: `learning_vote.vote_read`, its user mistakes one line and exit 2."""
    if args.out is None:
        print("benchmarks/learning.py: --vote OUT needs --out NEW", file=sys.stderr)
        return 2
    n_fresh = FRESH_SERIES if args.fresh_series is None else args.fresh_series
    try:
        trained = check_vote_args(args.vote, args.sources)
        return vote_read(args.vote, trained, args.out, args.jobs, n_fresh, args.vote_kept)
    except VoteError as error:
        print(f"benchmarks/learning.py: {error}", file=sys.stderr)
        return 2


@contextlib.contextmanager
def stopped_by_sigterm() -> Iterator[None]:
    """Inside, SIGTERM (what `timeout` and most schedulers send) raises KeyboardInterrupt as
    Ctrl-C does, so that a stopped benchmark ends its workers and says what it kept; the
    previous handler is put back on leaving."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_key(kind: str, seed: int) -> str:
    """How a run is named in the report's ``pending`` and ``failed`` lists: ``"<kind> <seed>"``,
    the kind ``real`` for a walk-forward."""
    return f"{kind} {seed}"


def job_key(job: Job | RealJob) -> str:
    """`run_key` of the run a job trains."""
    return run_key("real" if isinstance(job, RealJob) else job.kind, job.seed)


def describe_result(result: dict[str, Any]) -> str:
    """One finished run's headline figures, as the benchmark prints them when it lands."""
    turnover = f"turnover {result['turnover_per_year']:.0f}/yr, {result['seconds']:.0f} s"
    if "kind" not in result:  # a walk-forward
        return (
            f"Sharpe {result['sharpe']:.2f} (b&h {result['sharpe_buy_and_hold']:.2f}), {turnover}"
        )
    fresh = result.get("share_fresh", math.nan)
    return f"share {result['share']:+.2f} (fresh series {fresh:+.2f}), {turnover}"


def read_results(path: Path) -> dict[str, Any]:
    """The benchmark report at ``path`` (a ``learning.json``, finished or not); a `ValueError`
    saying why where the file holds no results (unreadable, not JSON, no run lists)."""
    try:
        report = json.loads(path.read_text())
        runs, walks = report["synthetic"], report["real"]
    except KeyError as error:
        raise ValueError(f"missing key {error}") from None
    except (OSError, ValueError, TypeError) as error:
        raise ValueError(str(error)) from None
    if not isinstance(runs, list) or not isinstance(walks, list):
        raise ValueError("its runs are not lists")
    return report


class ResumeError(Exception):
    """An --out the benchmark may not write to, or may not resume: one line for the user."""


def earlier_report(
    out: Path, resume: bool, config: str, overrides: Sequence[str]
) -> dict[str, Any] | None:
    """What ``out`` already holds: None for a folder without results; its report where
    ``resume`` asks to finish it. Raises `ResumeError` where ``out`` holds results and
    ``resume`` is not asked (nothing of an earlier run is overwritten), where ``resume`` is
    asked of a folder without a readable report, or where the report's runs were trained under
    another config or other overrides (their results would not pool)."""
    path = out / "learning.json"
    if not path.exists():
        if resume:
            raise ResumeError(f"{path}: nothing to resume (no such file)")
        return None
    if not resume:
        raise ResumeError(
            f"{out} already holds results (learning.json); pass another --out, --resume to "
            "finish it, or --rescore it"
        )
    try:
        report = read_results(path)
    except ValueError as reason:
        raise ResumeError(f"{path}: no benchmark results to resume ({reason})") from None
    trained_under = (report.get("config"), report.get("overrides"))
    if trained_under != (config, list(overrides)):
        raise ResumeError(
            f"{path}: its runs were trained under --config {trained_under[0]} --set "
            f"{' '.join(trained_under[1] or [])}; --resume needs the same --config and --set"
        )
    return report


class Progress:
    """The benchmark's report while its runs finish: ``<out>/learning.json`` is rewritten
    (atomically) as each run lands, with the runs still to come under ``pending`` and those that
    raised under ``failed``, so an interrupted benchmark loses no finished run, and ``--resume``
    (the same command and --out) trains only the runs the report does not hold. The earlier
    report's results, command and seconds are kept; ``resumed`` lists the commands that went
    on with it."""

    def __init__(self, path: Path, earlier: dict[str, Any] | None, header: dict[str, Any]) -> None:
        self.path = path
        self.started = time.perf_counter()
        self.report: dict[str, Any] = {**header, "synthetic": [], "real": [], "seconds": 0.0}
        if earlier is not None:
            resumed = [*earlier.get("resumed", []), header["command"]]
            seeds = sorted({*earlier.get("seeds", []), *header["seeds"]})
            self.report.update(
                earlier, resumed=resumed, seeds=seeds, configs_tried=header["configs_tried"]
            )
        self.before = self.report["seconds"]
        self.done = {run_key(r["kind"], r["seed"]) for r in self.report["synthetic"]}
        self.done |= {run_key("real", r["seed"]) for r in self.report["real"]}

    def to_do(self, key: str) -> bool:
        """Whether the run named ``key`` (`run_key`) still has to be trained."""
        return key not in self.done

    def plan(self, keys: Sequence[str]) -> None:
        """Record the runs this command will train, before the first starts."""
        self.report["pending"] = list(keys)
        self.report["failed"] = []
        self._save()

    def describe_earlier(self) -> str:
        """For the start line: how many runs an earlier command left in the report."""
        if not self.done:
            return ""
        return f" (kept from its earlier commands, not run again: {len(self.done)} of its runs)"

    def finished(self, key: str, result: dict[str, Any]) -> None:
        """Add a finished run's result and write the report."""
        self.report["synthetic" if "kind" in result else "real"].append(result)
        self.report["pending"].remove(key)
        self._save()

    def failed(self, key: str) -> None:
        """Move a run that raised from ``pending`` to ``failed`` (a resume trains it again)."""
        self.report["pending"].remove(key)
        self.report["failed"].append(key)
        self._save()

    def describe_stop(self) -> str:
        """For a benchmark stopped early: what its report holds, and how to go on."""
        finished = len(self.report["synthetic"]) + len(self.report["real"])
        others = len(self.report["pending"]) + len(self.report["failed"])
        return (f"{self.path} holds {finished} finished of {finished + others} runs; the same "
                f"command with --resume trains the other {others}")  # fmt: skip

    def final(self) -> dict[str, Any]:
        """The finished report: no ``pending`` list, and ``failed`` only where a run raised."""
        report = dict(self.report)
        del report["pending"]
        if not report["failed"]:
            del report["failed"]
        return report

    def _save(self) -> None:
        self.report["synthetic"].sort(key=lambda r: (KINDS.index(r["kind"]), r["seed"]))
        self.report["real"].sort(key=lambda r: r["seed"])
        self.report["seconds"] = self.before + time.perf_counter() - self.started
        write_report(self.report, self.path)


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
    """A saved run's scores again: the references and the agent's share on its own tail, the
    estimated ceiling there, and its scores on fresh series and the probe (under the run's
    config, as scored at training, with today's references)."""
    import torch

    from training.config import load_config

    torch.set_num_threads(1)
    kind, seed, hold = result["kind"], result["seed"], result["growth_buy_and_hold"]
    run = Path(result["run"])
    env_config = reference_env(load_config(run / "config.yaml", []))
    series, split = synthetic_series(kind, seed)
    splits = split.splits[0]
    references = tail_references(series, env_config, splits)
    agent = json.loads((run / "report" / "metrics.json").read_text())["agent"]
    edge = references["ceiling"] - hold
    return {
        "growth_ceiling": references["ceiling"],
        "growth_oracle": references["oracle"],
        **tail_figures(agent, hold, references["ceiling"]),
        "growth_training_bars": training_bars_growth(series.market, splits.train),
        **estimated_on_own_tail(kind, seed, series, splits.test, env_config, hold, edge),
        **score_trained_agent(kind, seed, run, n_fresh),
    }


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
            report = read_results(path)
        except ValueError as reason:
            print(f"benchmarks/learning.py: {path}: no benchmark results ({reason})",
                  file=sys.stderr)  # fmt: skip
            return 2
        runs, walks = report["synthetic"], report["real"]
        synthetic.update({(r["kind"], r["seed"]): r for r in runs})
        real.update({r["seed"]: r for r in walks})
        configs_tried = max(configs_tried, report.get("configs_tried", 1))
        sources.append((path, report, runs, walks))
    print(f"pooled from {len(outs)} reports (a run in several is taken from the last):")
    for path, report, runs, walks in sources:
        taken = [r for r in runs if synthetic[(r["kind"], r["seed"])] is r]
        taken_real = [r for r in walks if real[r["seed"]] is r]
        kinds = dict.fromkeys(r["kind"] for r in taken)
        pending = report.get("pending")
        unfinished = f" (unfinished: {len(pending)} of its runs pending)" if pending else ""
        print(f"  {path}: config {report.get('config', '?')} "
              f"{' '.join(report.get('overrides', []))}{unfinished}")  # fmt: skip
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


if __name__ == "__main__":
    sys.exit(main())
