"""The plan of a sweep: which configs and seeds run, their trial ids and their run folders.

The plan is fixed, and written to `OUT/plan.json`, before any trial starts; `--resume OUT`
reads it back, so a resumed sweep runs exactly the trials it first planned.

Trial `c03-s1` is config 3 with seed 1. Its run folder is `OUT/trials/c03-s1`; a later attempt
at a trial whose folder holds an unfinished run (a crash, Ctrl-C) goes to a fresh folder
`c03-s1.retry1`, `c03-s1.retry2`, ... and the unfinished one is left as it was. A run is
finished when its `report/metrics.json` exists (training writes it last but for the pictures).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from training.experiments.space import Distribution, override, sample_configs

PLAN_VERSION = 1
_ATTEMPT = re.compile(r"\.retry(\d+)$")


@dataclass(frozen=True)
class Trial:
    """One training run of the sweep: a config (its sampled keys) with one seed."""

    trial_id: str  # 'c03-s1': config 3, seed 1
    config_id: str  # 'c03'
    seed: int  # train.seed
    params: dict[str, Any]  # the config's sampled keys (empty for a seeds-only sweep)


@dataclass(frozen=True)
class Plan:
    """Everything needed to run, resume and summarise the sweep (written as `plan.json`)."""

    config: str  # absolute path of the base config file
    data: str | None  # absolute path of --data, or None (the config's data.path)
    overrides: list[str]  # --set overrides of every trial (before the sampled keys)
    space: dict[str, Any] | None  # the search space as given ({key: {kind: args}}), or None
    sampler_seed: int  # seed of the draws from the space
    seeds: list[int]  # train.seed values; every config runs each
    configs: dict[str, dict[str, Any]]  # config id -> its sampled keys
    trials: list[Trial] = field(default_factory=list)

    def trial_overrides(self, trial: Trial) -> list[str]:
        """The `--set` strings of `trial`: the base overrides, its sampled keys, its seed."""
        sampled = [override(k, v) for k, v in trial.params.items()]
        return [*self.overrides, *sampled, f"train.seed={trial.seed}"]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of `plan.json`."""
        return {"version": PLAN_VERSION, **asdict(self)}


def build_plan(
    config: Path,
    data: Path | None,
    overrides: Sequence[str],
    space: Mapping[str, Distribution] | None,
    samples: int,
    seeds: int,
    sampler_seed: int,
) -> Plan:
    """The plan of `seeds` seeds (0 .. seeds-1) of `samples` configs drawn from `space` (one
    config, the base one, when `space` is None)."""
    drawn = sample_configs(space, samples, sampler_seed) if space else [{}]
    configs = {f"c{i:02d}": params for i, params in enumerate(drawn)}
    trials = [
        Trial(f"{cid}-s{seed}", cid, seed, params)
        for cid, params in configs.items()
        for seed in range(seeds)
    ]
    return Plan(
        config=str(config.expanduser().absolute()),
        data=str(data.expanduser().absolute()) if data else None,
        overrides=list(overrides),
        space={k: d.to_dict() for k, d in space.items()} if space else None,
        sampler_seed=sampler_seed,
        seeds=list(range(seeds)),
        configs=configs,
        trials=trials,
    )


def plan_from_dict(raw: Mapping[str, Any]) -> Plan:
    """The plan written by `Plan.to_dict` (raises KeyError/TypeError on a foreign file)."""
    fields = {k: v for k, v in raw.items() if k not in ("version", "trials")}
    return Plan(**fields, trials=[Trial(**t) for t in raw["trials"]])


class PlanError(ValueError):
    """`--resume OUT` where OUT holds no sweep plan of this version (one line)."""


def read_plan(out: Path) -> Plan:
    """`out/plan.json`; `PlanError` (one line) when it is missing or not a sweep plan."""
    path = out / "plan.json"
    try:
        raw = json.loads(path.read_text())
        if raw.get("version") != PLAN_VERSION:
            raise ValueError
        return plan_from_dict(raw)
    except FileNotFoundError:
        raise PlanError(f"{path}: no sweep plan here (is {out} a sweep's --out?)") from None
    except (ValueError, KeyError, TypeError, AttributeError):
        raise PlanError(f"{path}: not a sweep plan of this version") from None


# --- run folders ------------------------------------------------------------------------------


def trials_dir(out: Path) -> Path:
    """Where the trials' run folders live."""
    return out / "trials"


def is_finished(run_dir: Path) -> bool:
    """Whether `run_dir` holds a finished run (its test report's metrics.json)."""
    return (run_dir / "report" / "metrics.json").is_file()


def attempts(out: Path, trial_id: str) -> list[Path]:
    """The run folders of `trial_id` that exist, first attempt first."""
    root = trials_dir(out)
    found = [root / trial_id] if (root / trial_id).is_dir() else []
    numbered = [
        (int(m.group(1)), p)
        for p in root.glob(f"{trial_id}.retry*")
        if (m := _ATTEMPT.search(p.name)) and p.name == f"{trial_id}.retry{m.group(1)}"
    ]
    return found + [p for _, p in sorted(numbered)]


def finished_run(out: Path, trial_id: str) -> Path | None:
    """The newest finished run folder of `trial_id`, or None."""
    done = [p for p in attempts(out, trial_id) if is_finished(p)]
    return done[-1] if done else None


def fresh_run_dir(out: Path, trial_id: str) -> Path:
    """A run folder for a new attempt at `trial_id` that does not exist yet."""
    tried = attempts(out, trial_id)
    if not tried:
        return trials_dir(out) / trial_id
    last = _ATTEMPT.search(tried[-1].name)
    return trials_dir(out) / f"{trial_id}.retry{int(last.group(1)) + 1 if last else 1}"
