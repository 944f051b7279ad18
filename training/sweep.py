"""Many seeds, many configs: `python -m training.sweep --config CFG --seeds N --out OUT`.

Every trial is an ordinary `python -m training.train` run in `OUT/trials/<trial id>`, run by Ray
Tune (a local Ray started here, or the cluster at `--address` / `RAY_ADDRESS`), one trial per
`--trial-cpus` cores. `--search SPACE.yaml --samples M` draws M configs from a search space
(`training.experiments.space`), each run with the N seeds. Reads top to bottom:
plan (OUT/plan.json) -> trials to run -> Ray Tune -> summary (OUT/summary.csv, .json, .png) ->
the verdict: the best config chosen on validation, its test figures and deflated Sharpe ratio.

Ctrl-C ends the sweep with one line naming the finished trials (exit 130); `--resume OUT`
continues it from OUT/plan.json, skipping finished trials and running unfinished ones again in
fresh run folders. A failed trial is reported with the last line of its stderr and counted in the
summary; the others go on (exit status 1 when any failed).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from training.cli import INTERRUPTED_STATUS, reports_user_errors
from training.config import DEFAULT_CONFIG_PATH, ConfigError, load_config
from training.experiments import trials as ray_trials
from training.experiments.files import read_status, write_plan, write_status
from training.experiments.plan import (
    Plan,
    PlanError,
    attempts,
    build_plan,
    finished_run,
    fresh_run_dir,
    read_plan,
)
from training.experiments.space import read_space
from training.experiments.summary import (
    aggregate,
    collect,
    plural,
    selection_text,
    write_outputs,
)
from training.run.callbacks import due_after
from training.run.data import data_files

RUN_AGAIN = "python -m training.sweep --resume"
SEEDS = 3  # default seeds per config
SAMPLES = 8  # default configs drawn from a search space


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options (see `--help`)."""
    parser = argparse.ArgumentParser(prog="python -m training.sweep", description=__doc__)
    plan = parser.add_argument_group("what to run (a new sweep)")
    plan.add_argument(
        "--config", type=Path, help=f"base YAML config (default {DEFAULT_CONFIG_PATH})"
    )
    plan.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key in every trial (repeatable)",
    )
    plan.add_argument("--data", type=Path, help="OHLCV CSV of every trial (sets data.path)")
    plan.add_argument("--ticker", help="ticker to select in a multi-ticker CSV (data.ticker)")
    plan.add_argument("--seeds", type=int, help=f"seeds per config: 0 .. N-1 (default {SEEDS})")
    plan.add_argument("--search", type=Path, metavar="SPACE.yaml", help="search space to draw from")
    plan.add_argument(
        "--samples", type=int, help=f"configs drawn from --search (default {SAMPLES})"
    )
    plan.add_argument("--sampler-seed", type=int, help="seed of the draws (default 0)")
    plan.add_argument("--out", type=Path, help="sweep folder: plan, trials, summary")
    parser.add_argument("--resume", type=Path, metavar="OUT", help="continue the sweep in OUT")
    run = parser.add_argument_group("how to run it")
    run.add_argument("--trial-cpus", type=float, default=1, help="CPU cores per trial")
    run.add_argument("--trial-gpus", type=float, default=0, help="GPUs per trial")
    run.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS, else local)")
    run.add_argument(
        "--scheduler",
        choices=("fifo", "asha"),
        default="fifo",
        help="asha: stop trials early on validation Sharpe",
    )
    return parser.parse_args(argv)


def make_plan(args: argparse.Namespace) -> tuple[Plan, Path]:
    """The plan to run and OUT: read back for `--resume`, else built and written to OUT."""
    new_sweep_options: tuple[str, ...] = ("config", "data", "ticker", "search", "out", "seeds")
    new_sweep_options += ("samples", "sampler_seed")
    if args.resume is not None:
        given = [
            "--" + name.replace("_", "-")
            for name in new_sweep_options
            if getattr(args, name) is not None
        ]
        if given or args.overrides:
            drop = ", ".join(given) or "--set"
            raise PlanError(f"--resume reads its plan from OUT/plan.json; drop {drop}")
        return read_plan(args.resume), args.resume
    if args.out is None:
        raise PlanError("--out OUT is required for a new sweep (or --resume OUT)")
    if (args.out / "plan.json").exists():
        raise PlanError(f"{args.out} already holds a sweep: continue it with --resume {args.out}")
    seeds = SEEDS if args.seeds is None else args.seeds
    samples = SAMPLES if args.samples is None else args.samples
    if seeds < 1 or samples < 1:
        raise PlanError("--seeds and --samples must be >= 1")
    if args.search is None and args.samples is not None:
        raise PlanError("--samples draws configs from a search space: give --search SPACE.yaml")
    config = args.config or DEFAULT_CONFIG_PATH
    overrides = list(args.overrides) + ([f"data.ticker={args.ticker}"] if args.ticker else [])
    data = args.data.expanduser().absolute() if args.data else None
    base = load_config(config, [*overrides, *([f"data.path={data}"] if data else [])])
    for path in data_files(base.data):  # a glob matching nothing is a DataError already
        if not path.is_file():
            raise ConfigError(f"{path}: data file not found")
    space = read_space(args.search, config, overrides) if args.search else None
    plan = build_plan(config, data, overrides, space, samples, seeds, args.sampler_seed or 0)
    write_plan(args.out, plan)
    return plan, args.out


def pending_jobs(plan: Plan, out: Path, cpus: float) -> list[ray_trials.Job]:
    """A job for every trial with no finished run (nor one stopped early by the scheduler),
    each in a fresh run folder; an unfinished folder of an earlier attempt is named and kept."""
    status = read_status(out)
    jobs = []
    for trial in plan.trials:
        stopped = status.get(trial.trial_id, {}).get("status") == "stopped"
        if stopped or finished_run(out, trial.trial_id):
            continue
        run_dir = fresh_run_dir(out, trial.trial_id).absolute()
        if earlier := attempts(out, trial.trial_id):
            print(
                f"{trial.trial_id}: unfinished run {earlier[-1]} kept; running again in {run_dir}"
            )
        sets = [
            *plan.trial_overrides(trial),
            f"train.threads={max(1, int(cpus))}",
            "train.progress_bar=false",
        ]
        args = ["--config", plan.config, *(["--data", plan.data] if plan.data else [])]
        args += ["--run-dir", str(run_dir), *[a for s in sets for a in ("--set", s)]]
        log = (out / "logs" / run_dir.name).absolute()
        jobs.append(ray_trials.Job(trial.trial_id, str(run_dir), args, str(log)))
    return jobs


def asha_for(plan: Plan) -> Any:
    """ASHA up to the plan's longest run; no trial stops before its first validation (the
    earliest first pass of the plan, from `train.eval_every` and `train.eval_start`, is the
    grace period)."""
    data = [f"data.path={plan.data}"] if plan.data else []
    cfgs = [load_config(plan.config, [*data, *plan.trial_overrides(t)]) for t in plan.trials]
    longest = max(c.train.total_timesteps for c in cfgs)
    firsts = [
        due_after(0, c.train.eval_every, c.train.eval_start) for c in cfgs if c.train.eval_every
    ]
    grace = min(firsts, default=longest)
    return ray_trials.asha(longest, grace)


@reports_user_errors(PlanError, ray_trials.ClusterError)
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: plan, run the trials under Ray Tune, summarise, print the verdict."""
    args = parse_args(argv)
    plan, out = make_plan(args)
    jobs = pending_jobs(plan, out, args.trial_cpus)
    n_configs, n_seeds = len(plan.configs), len(plan.seeds)
    print(
        f"sweep {out}: {plural(n_configs, 'config')} x {plural(n_seeds, 'seed')} = "
        f"{plural(len(plan.trials), 'trial')} "
        f"({len(plan.trials) - len(jobs)} finished already, {len(jobs)} to run)"
    )
    status = read_status(out)

    def record(outcome: ray_trials.Outcome) -> None:
        status[outcome.trial_id] = {k: v for k, v in asdict(outcome).items() if k != "trial_id"}
        write_status(out, status)

    if jobs:
        try:
            with ray_trials.ray_session(args.address) as where:
                print(f"{where}; {args.trial_cpus:g} CPUs and {args.trial_gpus:g} GPUs per trial")
                ray_trials.run_jobs(
                    jobs,
                    out / "ray",
                    args.trial_cpus,
                    args.trial_gpus,
                    asha_for(plan) if args.scheduler == "asha" else None,
                    record,
                )
        except KeyboardInterrupt:
            done = [t.trial_id for t in plan.trials if finished_run(out, t.trial_id)]
            print(
                f"\ninterrupted: {len(done)} of {len(plan.trials)} trials finished "
                f"({', '.join(done) or 'none'}); continue with: {RUN_AGAIN} {out}",
                file=sys.stderr,
            )
            return INTERRUPTED_STATUS

    rows, returns = collect(plan, out, status)
    summary = aggregate(rows, plan.configs, plan.seeds, returns)
    write_outputs(out, rows, summary)
    for row in rows:
        if row["status"] == "failed":
            print(f"failed: {row['trial_id']} ({row['run_dir']}): {row['error']}")
    print(f"\n{selection_text(summary)}")
    print(f"\nsummary: {out / 'summary.csv'}, {out / 'summary.json'}, {out / 'summary.png'}")
    return 1 if summary["trials"]["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
