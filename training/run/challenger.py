"""A challenger: a second training with other settings, kept only when validation shows it better.

A learner that is better on some series and worse on others (the every-direction loss of
`training.run.outcomes`: it rescues a trend agent whose direction head collapsed to always-long,
and makes random-walk agents trade their noise, benchmarks/RESULTS.md) cannot simply replace the
default. Validation can tell the two cases apart only where the difference is large: 1,000
validation bars measure a Sharpe ratio to about +-0.5. So the run trains both and keeps the
challenger only when its best validation pass beats the incumbent's by `train.challenger_margin`
standard errors of a Sharpe ratio over the validation bars, ``margin / sqrt(years)`` (the
standard error of an annualised Sharpe near zero over `years` of returns, Lo 2002), and the
incumbent otherwise: the usual model, unless the evidence against it is clear.

The incumbent is the config without `train.challenger`; the challenger is that config with the
overrides in `train.challenger` (`training.config.challenger_config`), the same seed. Each trains
as an ordinary run folder, `<run>/incumbent/` and `<run>/challenger/` (`RunDir.contender`); then
`keep_better_contender` copies the kept one's best model and validation history to the run's own
(so the run reads like a single one: backtests, `--resume`, the benchmarks), and writes what was
compared to `challenger.json`; `log_contest` shows the same in TensorBoard.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from stable_baselines3.common.logger import configure

from training.config import RunConfig, challenger_config
from training.evaluation.selection import best_pass
from training.evaluation.validation import read_validation_history
from training.run.atomic import write_json_atomic
from training.run.folder import RunDir
from training.run.restarts import adopt

CONTENDERS = ("incumbent", "challenger")  # in the order they train; the first is the default


def contender_configs(cfg: RunConfig, run: RunDir) -> dict[str, RunConfig]:
    """The configs of `run`'s contenders by name (`CONTENDERS`): the incumbent (`cfg` without
    its challenger) and the challenger (`challenger_config`), each in its own folder."""
    incumbent = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, challenger=()))
    configs = {"incumbent": incumbent, "challenger": challenger_config(cfg)}
    return {
        name: dataclasses.replace(
            config,
            train=dataclasses.replace(config.train, run_dir=str(run.contender(name).root)),
        )
        for name, config in configs.items()
    }


def keep_better_contender(run: RunDir, margin: float) -> dict[str, Any]:
    """Give `run` the model and validation history of the contender it keeps; returns (and
    writes to `run.contest`) what was compared.

    The challenger is kept when its best pass's validation Sharpe exceeds the incumbent's by
    more than ``margin / sqrt(years)``, years the length of the validation bars. An incumbent
    without a finite best pass (it never held a position, or never validated) counts as flat,
    Sharpe 0; a challenger without one is never kept.
    """
    rows: list[dict[str, Any]] = []
    histories = [read_validation_history(run.contender(name)) for name in CONTENDERS]
    for name, history in zip(CONTENDERS, histories, strict=True):
        best = best_pass(history)
        rows.append({
            "contender": name,
            "best_validation_sharpe": None if best is None else history[best]["sharpe"],
            "timesteps": None if best is None else history[best]["timesteps"],
            "validation_passes": len(history),
        })  # fmt: skip
    incumbent, challenger = rows
    years = next((entry["years"] for entry in histories[0] + histories[1] if entry["years"]), None)
    needed = margin / math.sqrt(years) if years else math.inf
    bar = (incumbent["best_validation_sharpe"] or 0.0) + needed
    sharpe = challenger["best_validation_sharpe"]
    kept = 1 if sharpe is not None and sharpe > bar else 0
    adopt(run, run.contender(CONTENDERS[kept]), histories[kept])
    choice = {
        "kept": CONTENDERS[kept],
        "margin_standard_errors": margin,
        "sharpe_to_beat": bar if math.isfinite(bar) else None,
        "contenders": rows,
    }
    write_json_atomic(run.contest, choice)
    return choice


def format_contest(choice: dict[str, Any]) -> str:
    """The contenders compared by `keep_better_contender`, one line each, the kept one marked."""
    to_beat = choice["sharpe_to_beat"]
    bar = "no validation years" if to_beat is None else f"Sharpe {to_beat:+.2f}"
    lines = [
        f"incumbent and challenger, by their best validation pass (the challenger had to beat "
        f"{bar}, {choice['margin_standard_errors']:g} standard errors above the incumbent; "
        f"the run keeps the {choice['kept']}):"
    ]
    for row in choice["contenders"]:
        sharpe = row["best_validation_sharpe"]
        best = (
            "no finite validation Sharpe"
            if sharpe is None
            else f"Sharpe {sharpe:+.2f} at {row['timesteps']:,} timesteps"
        )
        mark = "  <- kept" if row["contender"] == choice["kept"] else ""
        lines.append(f"  {row['contender']}: {best}{mark}")
    return "\n".join(lines)


def log_contest(run: RunDir, choice: dict[str, Any]) -> None:
    """Log the contest to TensorBoard in `run`'s own folder, `<run>/tb/challenger`, next to each
    contender's training logs (`<run>/<contender>/tb`): at step 1 the incumbent's and at step 2
    the challenger's best validation Sharpe (`challenger/best_validation_sharpe`, when finite),
    and `challenger/kept` (1 incumbent, 2 challenger)."""
    logger = configure(str(run.tensorboard / "challenger"), ["tensorboard"])
    kept = CONTENDERS.index(choice["kept"]) + 1
    for step, row in enumerate(choice["contenders"], start=1):
        if row["best_validation_sharpe"] is not None:
            logger.record("challenger/best_validation_sharpe", row["best_validation_sharpe"])
        logger.record("challenger/kept", kept)
        logger.dump(step=step)
    logger.close()
