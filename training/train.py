"""Train the multi-head agent with PPO: `python -m training.train [--config ...] [options]`.

Reads top to bottom: config -> data -> envs -> model -> learn -> save -> backtest -> summary.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from stable_baselines3.common.callbacks import BaseCallback

from agent import policy_of
from envs import MarketData, TradingEnv
from envs.market_data import DataError
from training.cli import INTERRUPTED_STATUS, reports_user_errors
from training.config import (
    REPO_ROOT,
    ConfigError,
    RunConfig,
    add_config_arguments,
    config_to_dict,
    load_config,
    resolve_config,
    save_config,
)
from training.evaluation.backtest import backtest, evaluation_env, format_comparison
from training.evaluation.portfolio import (
    combined_metrics,
    describe_span,
    format_next_orders,
    instruments_table,
    write_reports,
)
from training.evaluation.validation import (
    deployed,
    describe_pass,
    generalization_summary,
    never_beat_flat,
    read_validation_history,
    validate_policy,
)
from training.run.atomic import write_bytes_atomic, write_json_atomic
from training.run.callbacks import (
    AtomicCheckpoint,
    HeadImportanceCallback,
    HyperParameters,
    ValidationCallback,
    flatten,
)
from training.run.challenger import (
    CONTENDERS,
    TRAINED,
    contender_configs,
    contest_evidence,
    keep_better_contender,
    prepare_hold,
    read_contest,
)
from training.run.contest_report import format_contest, log_contest, spoken_list
from training.run.data import RunData, instrument_name, with_bars_per_year
from training.run.folder import ModelError, RunDir
from training.run.model_file import write_model_file
from training.run.restarts import (
    RestartState,
    format_restarts,
    keep_best_restart,
    log_restarts,
    restart_config,
    restart_state,
)
from training.run.session import fit, prepare_torch
from training.run.vote import load_trained

MIN_EVALUATION_STEPS = 20  # an instrument is validated / tested on a range of this many decisions


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options; `--set section.key=value` overrides any config key."""
    parser = argparse.ArgumentParser(prog="python -m training.train", description=__doc__)
    add_config_arguments(parser)
    parser.add_argument(
        "--data", nargs="+", help="OHLCV CSVs or globs to train on (sets data.path)"
    )
    parser.add_argument(
        "--ticker", nargs="+", help="tickers to take from multi-ticker CSVs (data.ticker)"
    )
    parser.add_argument("--run-dir", type=Path, help="output folder (default runs/<name>-<time>)")
    parser.add_argument(
        "--resume",
        type=Path,
        metavar="RUN_DIR",
        help="continue a run from its newest checkpoint, with its saved config "
        "(plus any --set, e.g. train.total_timesteps)",
    )
    return parser.parse_args(argv)


def new_run_dir(cfg: RunConfig) -> RunDir:
    """The configured run folder (`train.run_dir`), or a fresh `runs/<name>-<time>`.

    A configured folder that already holds a run is refused (`RunDir.claim`, one line): a second
    run there would mix its models and validation history with the first one's.
    """
    if cfg.train.run_dir:
        root = Path(cfg.train.run_dir)
        return RunDir.claim(root, f"continue it with --resume {root}, or pass another --run-dir")
    return RunDir.new(REPO_ROOT / "runs", cfg.train.name)


def train(
    cfg: RunConfig, run: RunDir, resume: bool, data: RunData | None = None
) -> dict[str, Path]:
    """Train (or continue) the run; return where the outputs are.

    `data` None loads and splits the config's instruments; benchmarks pass their own (e.g.
    generated series, `training.run.data.RunData`).
    """
    prepare_torch(cfg)
    data = RunData.load(cfg) if data is None else data
    cfg = with_bars_per_year(cfg, data)  # a resumed run's config holds it already
    window = cfg.env.window
    train_ranges = data.ranges("train", 1, window)
    if not train_ranges:
        raise DataError(f"{run.root}: no instrument has training bars before the validation dates")
    validation_envs = evaluation_envs(data.ranges("validation", MIN_EVALUATION_STEPS, window), cfg)
    test_envs = evaluation_envs(data.ranges("test", MIN_EVALUATION_STEPS, window), cfg)
    if cfg.train.restarts > 1 and not validation_envs:
        raise ConfigError(
            f"train.restarts: {cfg.train.restarts} restarts are chosen between on validation, "
            f"and no instrument has {MIN_EVALUATION_STEPS} decisions of validation bars "
            "(data.validation)"
        )
    if cfg.train.challenger and not validation_envs:
        raise ConfigError(
            "train.challenger: the challenger is chosen on validation, and no instrument has "
            f"{MIN_EVALUATION_STEPS} decisions of validation bars (data.validation)"
        )
    interval = cfg.env.decision_interval
    steps = f"{cfg.train.total_timesteps:,} timesteps"
    if interval > 1:
        steps += f" (one decision each, every {interval} bars)"
    print(
        f"training {run.root}: {len(data.markets)} instrument(s), "
        f"{steps}, {cfg.env.bars_per_year:,.1f} bars a year, "
        f"device {cfg.policy.device}, torch CPU threads {torch.get_num_threads()}\n"
        f"{data.describe()}"
    )
    if cfg.train.resampled_paths:
        how = str(cfg.train.resample_method)
        keys = "train.resampled_paths, train.resample_block, train.resample_method"
        if cfg.train.resample_detrend:
            how += f", {cfg.train.resample_detrend:.0%} of the drift taken out"
            keys += ", train.resample_detrend"
        print(
            f"  and {cfg.train.resampled_paths} resampled path(s) of each training range: blocks "
            f"of {cfg.train.resample_block} bars, {how} ({keys})"
        )
    if not resume:
        save_config(cfg, run.config)
        write_json_atomic(run.splits, data.to_dict())
    learn(cfg, run, resume, train_ranges, validation_envs)

    # What `python -m training.backtest --model RUN_DIR` trades: the vote of vote.json where the
    # run ships one, else best_model, else final_model.
    trained = load_trained(run.root).trained
    results = {name: backtest(trained, env) for name, env in test_envs.items()}
    print(f"\n{generalization_report(run, cfg)}")
    if not results:
        print("no instrument has enough test bars: no test backtest")
        return _outputs(run, None, cfg)
    report = write_reports(results, run.report, f"{run.root.name} on the test split")
    print(f"\nbacktest of the test split ({describe_span(results)}), agent vs baselines:")
    print(format_comparison(results.values(), combined_metrics(results)))
    if len(results) > 1:
        print(f"\neach instrument (the table above combines their accounts):\n"
              f"{instruments_table(results)}")  # fmt: skip
    print(f"\n{format_next_orders(results)}")
    return _outputs(run, report, cfg)


def generalization_report(run: RunDir, cfg: RunConfig) -> str:
    """The end of training's view of the gap: `generalization_summary` of the run's model, or in
    a contest of each trained contender (the kept one marked; holding trains nothing, so where
    it is kept it has no gap to show), then `never_beat_flat` of the model the run kept."""
    kept_history = read_validation_history(run)
    if not cfg.train.contested:
        lines = [generalization_summary(kept_history)]
    else:
        kept = (read_contest(run) or {}).get("kept")
        lines = [
            generalization_summary(
                read_validation_history(run.contender(name)),
                f"{name} (kept)" if name == kept else name,
                str(run.contender(name).validation_history.relative_to(run.root)),
            )
            for name in TRAINED
            if run.contender(name).root.is_dir()
        ]
        if kept == "hold" and kept_history:
            lines.append(
                f"the run keeps holding, which trains nothing and has no gap: "
                f"{describe_pass(kept_history[0])}"
            )
    warning = never_beat_flat(kept_history)
    return "\n".join(lines + ([f"  {warning}"] if warning else []))


def learn(
    cfg: RunConfig,
    run: RunDir,
    resume: bool,
    train_ranges: list[tuple[MarketData, range]],
    validation_envs: dict[str, TradingEnv],
) -> None:
    """One training run into `run`: PPO with checkpoints and validation passes (the best one
    kept), continued from the newest checkpoint on `resume`; the final model saved.

    With `train.restarts` > 1, that many such runs from different seeds, each in its own folder,
    and the one that validates best kept as the run's model (`training.run.restarts`); with
    `train.challenger`, an incumbent and a challenger trained so, and the challenger kept only
    when it validates better by the margin (with `train.challenger_evidence`, only where the
    training bars' momentum predicts returns at that p-value); with `train.hold_margin`,
    holding kept instead when it validates better than that by its margin (with
    `train.hold_evidence`, holding is the prior where the training bars' momentum does not
    predict returns at that p-value: the policy kept only when it validates better than holding
    by `train.policy_margin`; `training.run.challenger`). On `resume`, finished ones are kept
    and the others continue from their newest checkpoint.
    """
    if cfg.train.contested:
        for name, contender_cfg in contender_configs(cfg, run).items():
            contender = run.contender(name)
            train = contender_cfg.train
            state = restart_state(contender, train.total_timesteps, resume, train.restarts)
            print(f"\n{name}: {_RESTART_STATES[state]} {contender.root}")
            _learn_part(contender_cfg, contender, state, run, train_ranges, validation_envs)
        if cfg.train.hold_margin is not None:
            written = prepare_hold(cfg, run, validation_envs)
            done = "validated" if written else "validated already:"
            print(
                f"\nhold (always long at the leverage nearest 1x, widest stop): {done} "
                f"{run.contender('hold').root}"
            )
        contest = keep_better_contender(run, cfg.train, contest_evidence(cfg, train_ranges))
        log_contest(run, contest)
        print(f"\n{format_contest(contest)}")
        return
    if cfg.train.restarts > 1:
        for number in range(1, cfg.train.restarts + 1):
            restart, restart_cfg = run.restart(number), restart_config(cfg, run, number)
            state = restart_state(restart, cfg.train.total_timesteps, resume)
            print(
                f"\nrestart {number}/{cfg.train.restarts}, seed {restart_cfg.train.seed}: "
                f"{_RESTART_STATES[state]} {restart.root}"
            )
            _learn_part(restart_cfg, restart, state, run, train_ranges, validation_envs)
        choice = keep_best_restart(run, cfg.train.restarts, cfg.train.seed, cfg.train.select_by)
        log_restarts(run, choice)
        print(f"\n{format_restarts(choice)}")
        return
    callbacks: list[BaseCallback] = [HyperParameters(flatten(config_to_dict(cfg)))]
    if cfg.train.checkpoint_every:
        callbacks.append(AtomicCheckpoint(run, cfg.train.checkpoint_every))
    if cfg.train.importance_every:
        callbacks.append(HeadImportanceCallback(cfg.train.importance_every))
    if cfg.train.eval_every and validation_envs:
        train = cfg.train
        callbacks.append(
            ValidationCallback(
                validation_envs, run, train.eval_every, train.patience, train.eval_start,
                train.select_by, cfg.deployed_leverage_index,
            )
        )  # fmt: skip
    checkpoint = run.latest_checkpoint() if resume else None
    model = fit(cfg, train_ranges, run, callbacks=callbacks, checkpoint=checkpoint)
    # The final model as deployed too (checkpoints keep the policy as it trains, for --resume)
    final = deployed(policy_of(model), cfg.deployed_leverage_index)
    write_model_file(run.final_model, final, model.num_timesteps)
    if not run.best_model.exists() and validation_envs:  # no pass saved one: validate the final
        validate_policy(
            final, model.num_timesteps, validation_envs, run, select_by=cfg.train.select_by
        )


def _learn_part(
    cfg: RunConfig,
    part: RunDir,
    state: RestartState,
    run: RunDir,
    train_ranges: list[tuple[MarketData, range]],
    validation_envs: dict[str, TradingEnv],
) -> None:
    """Train (or continue, or leave when `state` is "finished") one restart or contender of
    `run` in its folder `part`, with its own config `cfg`."""
    if state == "finished":
        return
    if state == "new":
        save_config(cfg, part.config)
        write_bytes_atomic(part.splits, run.splits.read_bytes())
    prepare_torch(cfg)
    learn(cfg, part, state == "resume", train_ranges, validation_envs)


_RESTART_STATES = {
    "new": "training",
    "resume": "continuing from its newest checkpoint",
    "finished": "trained already,",
}


def checkpoints(run: RunDir, cfg: RunConfig) -> list[Path]:
    """The newest checkpoint of the run, or of each of its restarts or contenders (and each
    restart of a restarted incumbent) that has one."""
    return [found for part in _trained_parts(run, cfg) if (found := part.latest_checkpoint())]


def _trained_parts(run: RunDir, cfg: RunConfig) -> list[RunDir]:
    """The folders PPO trains in for `run` under `cfg`: the run itself, its restarts, or its
    contenders' own (`_trained_parts` of each)."""
    if cfg.train.contested:
        configs = contender_configs(cfg, run)
        return [
            part for name, c in configs.items() for part in _trained_parts(run.contender(name), c)
        ]
    if cfg.train.restarts > 1:
        return [run.restart(n) for n in range(1, cfg.train.restarts + 1)]
    return [run]


def _outputs(run: RunDir, report: Path | None, cfg: RunConfig) -> dict[str, Path]:
    model = run.best_model if run.best_model.is_file() else run.final_model
    if cfg.train.contested:
        names = [name for name in CONTENDERS if run.contender(name).root.is_dir()]
        contest = read_contest(run) or {}
        kept, members = contest.get("kept"), contest.get("vote")
        if members:  # `training.run.vote`: the incumbent ships as a vote
            kept = f"{kept}: a vote of {len(members)} policies"
            model = run.vote
        outputs = {
            f"model (the contest kept the {kept})" if kept else "model": model,
            f"{spoken_list(names)} compared": run.contest,
            "each one's models and TensorBoard logs": run.root / f"<{'|'.join(names)}>",
        }
    elif cfg.train.restarts > 1:
        outputs = {
            f"model (best validation Sharpe of {cfg.train.restarts} restarts)": model,
            "restarts compared": run.restart_choice,
            "each restart's models and TensorBoard logs": run.root / "restart_<n>",
        }
    else:
        outputs = {
            "final model": run.final_model,
            "best model (validation Sharpe)": run.best_model,
            "TensorBoard logs": run.tensorboard,
        }
    if report is not None:
        outputs["backtest report (test split)"] = report
    return outputs


def evaluation_envs(
    ranges: list[tuple[MarketData, range]], cfg: RunConfig
) -> dict[str, TradingEnv]:
    """One evaluation env per instrument range, by instrument name."""
    return {instrument_name(m): evaluation_env(m, cfg.env, bars) for m, bars in ranges}


@reports_user_errors(ModelError)
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: train, then print where everything is. User mistakes exit 2, one line."""
    args = parse_args(argv)
    if args.resume is not None:  # the run's own config; --set may extend it (total_timesteps)
        run = RunDir(args.resume)
        cfg = load_config(run.config, args.overrides)
        if not checkpoints(run, cfg):
            raise ConfigError(
                f"{run.root}: no checkpoint to resume from (checkpoints/checkpoint_<timesteps>"
                "_steps.safetensors); start a new run in another folder"
            )
    else:
        cfg = resolve_config(
            args.config, args.overrides, data=args.data, ticker=args.ticker, run_dir=args.run_dir
        )
        run = new_run_dir(cfg)
    try:
        outputs = train(cfg, run, resume=args.resume is not None)
    except KeyboardInterrupt:
        found = checkpoints(run, cfg)
        saved = f"newest checkpoint {found[-1]}" if found else "no checkpoint yet"
        print(
            f"\ninterrupted ({saved}); continue with: python -m training.train --resume {run.root}",
            file=sys.stderr,
        )
        return INTERRUPTED_STATUS
    width = max(len(name) for name in outputs)
    print(f"\nrun finished: {run.root}")
    for name, path in outputs.items():
        print(f"  {name:<{width}}  {path}")
    print(f"  {'watch it':<{width}}  tensorboard --logdir {run.root.parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
