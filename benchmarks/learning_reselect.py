"""`benchmarks/learning.py --reselect`: hold earlier runs' contests again under another config,
training nothing.

A run's contenders train to the bit alike whatever keeps them, so a config that only chooses
differently among trained contenders (`training.config.SELECTION_KEYS`), or a contest whose
contenders other runs trained (`--from`), is read exactly off the runs (`reselect`): each synthetic
run's folder and each fold of a real walk-forward are laid out again from the contenders' folders,
the contest is held again, and the result scored as the benchmark scores its own
(`learning_scoring`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import shutil
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from learning_report import write_and_print
from learning_scoring import (
    contest_fields,
    held_by_state,
    real_figures,
    restart_kept,
    score_trained_agent,
    synthetic_series,
    tail_figures,
)


class ReselectError(ValueError):
    """An earlier run that `--reselect` cannot judge (one line: what, and what to do)."""


def job_map(workers: contextlib.ExitStack, jobs: int) -> Any:
    """A `map` that runs `jobs` calls at once, each in a worker process (spawned, and shut down
    when `workers` closes); with one job, the builtin `map`, in this process: no worker to
    start."""
    if jobs <= 1:
        return map
    return workers.enter_context(ProcessPoolExecutor(jobs, mp_context=get_context("spawn"))).map


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
    ``<new_out>/learning.json`` and print them. `jobs` runs at once, each in a worker process
    of one torch thread; with one, in this process.

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
    args = [
        (r, str(new_out), tuple(overrides), n_fresh, plan)
        for r, plan in zip(results, plans, strict=True)
    ]
    walk_args = [
        (w, str(new_out), tuple(overrides), tried, fold_plans)
        for w, fold_plans in zip(walks, walk_plans, strict=True)
    ]
    with contextlib.ExitStack() as workers:
        mapping = job_map(workers, jobs)
        walking = mapping(_reselect_walk, walk_args)  # a pool's start now, beside the runs below
        reselected = list(mapping(_reselect_run, args))
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
    from training.config import SELECTION_KEYS, config_to_dict

    ignored = {"run_dir", "challenger", *(key.split(".", 1)[1] for key in SELECTION_KEYS)}
    if cfg.train.patience:
        ignored.discard("select_by")
    raw = config_to_dict(cfg)
    raw["train"] = {key: value for key, value in raw["train"].items() if key not in ignored}
    return raw


def _reads_as(cfg: Any) -> list[dict[str, Any]]:
    """Each config a run trained under `cfg` can be read as, by `_trains_as`: `cfg`, and with
    `train.restarts` R > 2, `cfg` with each fewer restarts down to two (its first k restarts
    chosen between again, `_keep_pass`; one restart is its folder `restart_1`)."""
    most = cfg.train.restarts
    return [
        _trains_as(dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, restarts=k)))
        for k in [most, *range(most - 1, 1, -1)]
    ]


def _builds_as(trains_as: dict[str, Any], built: bool) -> dict[str, Any]:
    """What of `trains_as` (`_trains_as`) decides a contender: all of it for a trained one; for
    a built one (the hold contender, `training.run.challenger.prepare_hold`) every section but
    `train`, since no training key changes the hold action it always takes (its validation is
    ranked by `train.select_by`, a selection key, rescored by `_keep_pass`)."""
    return trains_as if not built else {k: v for k, v in trains_as.items() if k != "train"}


def _reselect_plan(cfg: Any, label: str, runs: Sequence[str]) -> dict[str, str]:
    """Where each contender of `cfg`'s run `label` comes from: the name of each contender
    of `contest_configs` (or "" for the run itself, where `cfg` holds no contest) and the
    folder of the first of `runs` (earlier runs of the same kind and seed) that trained one as
    `cfg` trains it (`_trains_as`, or as it can be read, `_reads_as`): a trained contender of
    theirs (or the run itself where it held no contest), or a restart of one, for a trained one
    (so restart 1 of a restarted incumbent is the incumbent of the same config with one
    training, and an incumbent of three restarts that of two, its first two), a hold contender
    for the hold contender (built from the same config as the incumbent, never trained: its
    train keys aside, `_builds_as`). Raises `ReselectError` naming the first contender none of
    `runs` has."""
    from training.config import SELECTION_KEYS, load_config
    from training.run.challenger import TRAINED, contest_configs
    from training.run.folder import RunDir

    wanted = contest_configs(cfg, RunDir(Path(runs[0]))) if cfg.train.contested else {"": cfg}
    candidates: dict[bool, list[Any]] = {True: [], False: []}  # built: the hold contenders
    for root in map(RunDir, map(Path, runs)):
        trained = [root.contender(name) for name in TRAINED if root.contender(name).root.is_dir()]
        held = root.contender("hold")
        trained = trained or ([] if held.root.is_dir() else [root])
        candidates[False] += [*trained, *(r for folder in trained for r in folder.restarts())]
        candidates[True] += [held] if held.root.is_dir() else []
    trains_as = {
        folder.root: _reads_as(load_config(folder.config))
        for folders in candidates.values()
        for folder in folders
    }
    plan = {}
    for name, wanted_cfg in wanted.items():
        built = name == "hold"
        target = _builds_as(_trains_as(wanted_cfg), built)
        found = [
            f
            for f in candidates[built]
            if any(_builds_as(each, built) == target for each in trains_as[f.root])
        ]
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
    from training.run.folder import RunDir
    from training.run.vote import load_trained

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
    tested = backtest(load_trained(copy.root).trained, evaluation_env(series.market, cfg.env, tail))
    write_report(tested, copy.report, f"{kind} seed {seed}, reselected")
    history = json.loads(copy.validation_history.read_text())
    return {
        **result,
        "run": str(copy.root),
        **tail_figures(tested.metrics["agent"], result["growth_buy_and_hold"],
                       result["growth_ceiling"]),
        "chosen_timesteps": history[best_pass(history) or 0]["timesteps"],
        "restart_kept": restart_kept(copy),
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
    the pass's checkpoint (a hold contender's, validated at 0 timesteps, is its final model).
    A restarted `source` (a restarts run of its own) keeps the restart it kept, or under fewer
    restarts (`config`'s `train.restarts`) the one its first restarts' choice keeps
    (`kept_restart`), whose passes are then rescored: its restarts were chosen between by the
    run's own `train.select_by`, and another is refused (`ReselectError`). Those restarts are
    laid out in `target` too (`_take_restarts`), so that the new folder reads as a finished
    restarts run where it is resumed (`walk_forward` of trained folds)."""
    from training.config import save_config
    from training.evaluation.selection import best_pass, validation_score
    from training.run.atomic import write_json_atomic
    from training.run.restarts import kept_restart

    if source.restart_choice.is_file():
        choice = json.loads(source.restart_choice.read_text())
        chosen_by = choice.get("select_by", "sharpe")
        if chosen_by != select_by:
            raise ReselectError(
                f"--reselect: {source.root}: its restarts were chosen between by "
                f"train.select_by {chosen_by}, not {select_by}; train it again"
            )
        rows = choice["restarts"][: config.train.restarts]
        choice = {**choice, "kept": kept_restart(rows)["restart"], "restarts": rows}
        _take_restarts(source, target, choice)
        source = source.restart(choice["kept"])
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


def _take_restarts(source: Any, target: Any, choice: dict[str, Any]) -> None:
    """Copy the restarts of the restarts run `source` (a `RunDir`) that `choice` chose between
    (as `source.restart_choice` holds it, or its first restarts') to `target`: the choice and
    each restart's config, validation history and models, without checkpoints; what
    `restart_state` reads as finished."""
    from training.run.atomic import write_json_atomic

    for row in choice["restarts"]:
        restart, copy = source.restart(row["restart"]), target.restart(row["restart"])
        copy.root.mkdir(parents=True)
        shutil.copy(restart.config, copy.config)
        shutil.copy(restart.final_model, copy.final_model)
        for path in (restart.validation_history, restart.best_model):
            if path.is_file():
                shutil.copy(path, copy.root / path.name)
    write_json_atomic(target.restart_choice, choice)
