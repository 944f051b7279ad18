"""Restarts: one run trains `train.restarts` models from different seeds and keeps the one that
validates best.

PPO on a few thousand bars ends in quite different places from one seed to the next: trained on
one and the same trend-regime series of the learning benchmark, three seeds captured from 0.22
to 0.93 of the fair ceiling's edge on fresh series (benchmarks/RESULTS.md). Validation already
picks the best pass of one training run (`training.evaluation.validation`); restarts let it pick
among the passes of several.

Restart n (from 1) is an ordinary run folder, `<run>/restart_<n>/` (`RunDir.restart`), trained
with seed ``train.seed + SEED_STRIDE * (n - 1)`` (`restart_config`): restart 1 is the run that
``train.restarts: 1`` makes. Once all have trained, `keep_best_restart` copies the best model of
the restart whose best validation pass has the highest score (`train.select_by`) to the run's own
`best_model.safetensors`, and that restart's validation history to the run's `validation.json`,
so the run reads like a single one (backtests, `--resume`, the benchmarks); `restarts.json`
records every restart's seed and best pass, and which one was kept, and `log_restarts` shows the
same in TensorBoard.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

from stable_baselines3.common.logger import configure

from training.config import RunConfig, SelectBy
from training.evaluation.selection import best_pass, describe_best_pass, pass_score
from training.evaluation.validation import read_validation_history
from training.run.atomic import write_bytes_atomic, write_json_atomic
from training.run.folder import RunDir
from training.run.model_file import read_model_file

SEED_STRIDE = 1000  # restart n trains with seed train.seed + SEED_STRIDE * (n - 1)

RestartState = Literal["finished", "resume", "new"]


def restart_seed(seed: int, number: int) -> int:
    """The seed of restart `number` (from 1) of a run with `train.seed` `seed`."""
    return seed + SEED_STRIDE * (number - 1)


def restart_config(cfg: RunConfig, run: RunDir, number: int) -> RunConfig:
    """The config of restart `number` (from 1) of `run`: its own seed and folder, one restart."""
    train = dataclasses.replace(
        cfg.train,
        seed=restart_seed(cfg.train.seed, number),
        restarts=1,
        run_dir=str(run.restart(number).root),
    )
    return dataclasses.replace(cfg, train=train)


def restart_state(
    part: RunDir, total_timesteps: int, resume: bool, restarts: int = 1
) -> RestartState:
    """What training the folder `part` (a restart, a contender or a run) needs.

    On `resume`: "finished" when its final model has `total_timesteps`, else "resume" when it
    has a checkpoint. Otherwise "new", and the folder must hold no run: a run stopped before
    its first checkpoint cannot be continued, and is refused (a `ConfigError` of one line)
    rather than mixed with a fresh one. With `restarts` > 1, `part` is a restarts run of its own
    (a contest's incumbent): on `resume` "finished" once every restart is and one was kept,
    else "resume" once it was started (each restart's state is then its own).
    """
    if resume and restarts > 1 and part.config.is_file():
        done = part.restart_choice.is_file() and all(
            _finished(part.restart(n), total_timesteps) for n in range(1, restarts + 1)
        )
        return "finished" if done else "resume"
    if resume and restarts == 1:
        if _finished(part, total_timesteps):
            return "finished"
        if part.latest_checkpoint() is not None:
            return "resume"
    RunDir.claim(part.root, "it stopped before its first checkpoint: delete it to retrain it")
    return "new"


def _finished(part: RunDir, total_timesteps: int) -> bool:
    """Whether `part`'s final model was trained for `total_timesteps`."""
    final = part.final_model
    return final.is_file() and read_model_file(final).num_timesteps >= total_timesteps


def keep_best_restart(
    run: RunDir, restarts: int, seed: int, select_by: SelectBy = "sharpe"
) -> dict[str, Any]:
    """Give `run` the best model and validation history of its best restart; returns (and
    writes to `run.restart_choice`) what was compared.

    The best restart has the highest finite best-pass validation score (`train.select_by`, as
    the passes recorded it; the first of equals); when none has one, restart 1 is kept and its
    final model becomes the run's final model.
    """
    rows: list[dict[str, Any]] = []
    histories = [read_validation_history(run.restart(n)) for n in range(1, restarts + 1)]
    for number, history in enumerate(histories, start=1):
        best = best_pass(history)
        rows.append({
            "restart": number,
            "seed": restart_seed(seed, number),
            "best_validation_score": None if best is None else pass_score(history[best]),
            "best_validation_sharpe": None if best is None else history[best]["sharpe"],
            "timesteps": None if best is None else history[best]["timesteps"],
            "validation_passes": len(history),
        })  # fmt: skip
    kept = kept_restart(rows)
    adopt(run, run.restart(kept["restart"]), histories[kept["restart"] - 1])
    choice = {"kept": kept["restart"], "select_by": select_by, "restarts": rows}
    write_json_atomic(run.restart_choice, choice)
    return choice


def kept_restart(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The row of the restart a run keeps, of `rows` (`keep_best_restart`'s, one a restart, by
    number): the highest finite `best_validation_score`, the first of equals; when none has
    one, the first."""
    scored = [row for row in rows if row["best_validation_score"] is not None]
    return max(scored, key=lambda row: row["best_validation_score"]) if scored else rows[0]


def adopt(run: RunDir, source: RunDir, history: list[dict[str, Any]]) -> None:
    """Make `source`'s model `run`'s, and its validation `history` the run's, so that the run
    reads like a single one: its best model when it has one, else its final model (and no best
    model of an earlier choice left to shadow it: the run's models are copies)."""
    if source.best_model.is_file():
        write_bytes_atomic(run.best_model, source.best_model.read_bytes())
    else:
        write_bytes_atomic(run.final_model, source.final_model.read_bytes())
        run.best_model.unlink(missing_ok=True)
    write_json_atomic(run.validation_history, history)


def format_restarts(choice: dict[str, Any]) -> str:
    """The restarts compared by `keep_best_restart`, one line each, the kept one marked."""
    lines = [f"restarts, by their best validation pass (the run keeps restart {choice['kept']}):"]
    select_by = choice.get("select_by", "sharpe")
    for row in choice["restarts"]:
        score = row.get("best_validation_score", row["best_validation_sharpe"])
        best = describe_best_pass(score, row["timesteps"], select_by)
        mark = "  <- kept" if row["restart"] == choice["kept"] else ""
        lines.append(f"  restart {row['restart']} (seed {row['seed']}): {best}{mark}")
    return "\n".join(lines)


def log_restarts(run: RunDir, choice: dict[str, Any]) -> None:
    """Log the restarts compared by `keep_best_restart` to TensorBoard in `run`'s own folder,
    `<run>/tb/restarts`, next to each restart's training logs (`<run>/restart_<n>/tb`): at step
    n, restart n's best validation score (`restarts/best_validation_score`, when finite) and
    the number of the kept one (`restarts/kept`)."""
    logger = configure(str(run.tensorboard / "restarts"), ["tensorboard"])
    for row in choice["restarts"]:
        score = row["best_validation_score"]
        if score is not None and math.isfinite(score):
            logger.record("restarts/best_validation_score", score)
        logger.record("restarts/kept", choice["kept"])
        logger.dump(step=row["restart"])
    logger.close()
