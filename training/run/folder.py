"""The run folder: where a training run keeps its config, logs, checkpoints, models, reports.

Every file is written atomically (a temporary file in the same folder, then `os.replace`), so a
run killed at any moment leaves either the old file or the new one, never half of one.

Models are safetensors files of tensors and plain metadata (`training.run.model_file`): reading
one runs no code from it. They are saved here (`save_model_atomic`) and loaded back with their
run's config (`load_model`): the policy is built in code from the run's `config.yaml`
(`build_policy`, as `training.run.session.build_model` builds it for training), then only its
tensors are read in. A model is found from a run folder or as a file next to (or, in
`checkpoints/`, below) its run's config.yaml. A run that ships a vote (`train.vote`) names its
members' model files in `vote.json` (`vote_members`): `training.run.vote.load_trained` loads what
a run ships, a policy or such a vote, for the commands that trade it (backtest, walk-forward);
`load_model` loads one policy, for those that read one (attention, heads, export), and refuses a
vote's run folder by name, listing its members. `restore_checkpoint` continues a PPO model from a
checkpoint: weights, optimizer state and timestep count. SB3 zips of earlier versions are found
only to be refused by name: they hold pickled objects.

A new run needs a folder that holds no run yet (`RunDir.claim`); an existing run is continued
with `--resume`, never overwritten.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.utils import FloatSchedule

from agent import MultiHeadPolicy, policy_of
from envs.core import env_spaces
from training.config import ConfigError, RunConfig, load_config
from training.run.model_file import (
    SUFFIX,
    ModelError,
    load_optimizer_state,
    load_policy_tensors,
    read_model_file,
    write_model_file,
)

MODEL_NAMES = ("best_model", "final_model")  # in a run folder, in order of preference
LEGACY_SUFFIX = ".zip"  # SB3 zips of earlier versions: found, to be refused by name
_CHECKPOINT = re.compile(r"checkpoint_(\d+)_steps\.(safetensors|zip)$")
# What a folder holding a training or walk-forward run has (`run_entries`).
_RUN_ENTRY = re.compile(
    r"config\.yaml|validation\.json|walkforward\.json|restarts\.json|challenger\.json|vote\.json"
    r"|checkpoints"
    r"|tb|report|fold_\d+|restart_\d+|incumbent|challenger|hold"
    r"|(best|final)_model\.(safetensors|zip)"
)


def save_model_atomic(model: BaseAlgorithm, path: Path, *, with_optimizer: bool = False) -> Path:
    """Save `model`'s policy tensors and timestep count as a model file, atomically.

    `with_optimizer` adds the optimizer state: what a checkpoint needs to be resumed.
    """
    return write_model_file(
        path, policy_of(model), model.num_timesteps, with_optimizer=with_optimizer
    )


def policy_kwargs(cfg: RunConfig) -> dict[str, Any]:
    """The `MultiHeadPolicy` arguments a run's config gives (besides the spaces)."""
    return dict(
        trunk=dataclasses.asdict(cfg.trunk),
        flat_direction_index=cfg.env.flat_direction_index,
        conditional_heads=cfg.policy.conditional_heads,
        head_hidden=cfg.policy.head_hidden,
        account_dim=cfg.policy.account_dim,
        use_bf16=cfg.policy.bf16,
    )


def build_policy(cfg: RunConfig) -> MultiHeadPolicy:
    """The run's policy, built in code from its config, on the CPU, freshly initialised.

    As PPO builds it in `training.run.session.build_model`, from the same `policy_kwargs`; its
    random init draws leave the global random state alone.
    """
    observation_space, action_space = env_spaces(cfg.env)
    with torch.random.fork_rng(devices=[]):
        return MultiHeadPolicy(
            observation_space,
            action_space,
            FloatSchedule(cfg.ppo.learning_rate),
            **policy_kwargs(cfg),
        )


def run_entries(root: Path) -> list[str]:
    """Names in `root` that belong to a run (config, models, validation, checkpoints, logs,
    reports, walk-forward folds), sorted; [] for an empty or missing folder."""
    if not root.is_dir():
        return []
    return sorted(path.name for path in root.iterdir() if _RUN_ENTRY.fullmatch(path.name))


@dataclass(frozen=True)
class RunDir:
    """Paths inside one run folder."""

    root: Path

    @classmethod
    def new(cls, base: Path, name: str) -> RunDir:
        """A fresh folder `base/<name>-<YYYYmmdd-HHMMSS>` (a suffix keeps it unique)."""
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        root = base / f"{name}-{stamp}"
        n = 1
        while root.exists():
            n += 1
            root = base / f"{name}-{stamp}-{n}"
        root.mkdir(parents=True)
        return cls(root)

    @classmethod
    def claim(cls, root: Path, instead: str) -> RunDir:
        """`root` for a new run, created if missing; a `ConfigError` if it holds a run already.

        The error is one line naming the folder and what it holds, then `instead` (what to do).
        An existing empty folder, or one holding other files only, is fine.
        """
        found = run_entries(root)
        if found:
            raise ConfigError(f"{root}: already holds a run ({', '.join(found)}); {instead}")
        root.mkdir(parents=True, exist_ok=True)
        return cls(root)

    @property
    def config(self) -> Path:
        """The resolved config of the run."""
        return self.root / "config.yaml"

    @property
    def tensorboard(self) -> Path:
        """TensorBoard event files (one subfolder, continued on resume)."""
        return self.root / "tb"

    @property
    def checkpoints(self) -> Path:
        """Periodic checkpoints `checkpoint_<timesteps>_steps.safetensors`."""
        return self.root / "checkpoints"

    @property
    def best_model(self) -> Path:
        """The model with the best validation Sharpe so far."""
        return self.root / f"best_model{SUFFIX}"

    @property
    def final_model(self) -> Path:
        """The model at the end of training."""
        return self.root / f"final_model{SUFFIX}"

    @property
    def validation_history(self) -> Path:
        """Validation metrics of every evaluation, as JSON."""
        return self.root / "validation.json"

    @property
    def splits(self) -> Path:
        """The run's instruments and calendar split dates, as JSON (`training.run.data`)."""
        return self.root / "splits.json"

    @property
    def report(self) -> Path:
        """The backtest of the test split written at the end of training."""
        return self.root / "report"

    @property
    def restart_choice(self) -> Path:
        """With `train.restarts` > 1: each restart's seed and best validation pass, and which one
        the run kept, as JSON (`training.run.restarts`)."""
        return self.root / "restarts.json"

    @property
    def contest(self) -> Path:
        """With `train.challenger`: both trainings' best validation passes, the margin, and
        which one the run kept, as JSON (`training.run.challenger`)."""
        return self.root / "challenger.json"

    @property
    def vote(self) -> Path:
        """With `train.vote`, where the contest kept the incumbent: the model files of the vote
        the run ships, relative to the run's folder, as JSON (`training.run.vote`)."""
        return self.root / "vote.json"

    def contender(self, name: str) -> RunDir:
        """The folder of contender `name` ("incumbent", "challenger" or "hold") of a run with
        a contest (`train.challenger`, `train.hold_margin`): an ordinary run folder of its own."""
        return RunDir(self.root / name)

    def restart(self, number: int) -> RunDir:
        """The folder of restart `number` (from 1) of a run with `train.restarts` > 1: an
        ordinary run folder of its own."""
        return RunDir(self.root / f"restart_{number}")

    def restarts(self) -> list[RunDir]:
        """The restart folders this run holds (`restart`), by number; [] without restarts."""
        found = (path for path in self.root.glob("restart_*") if path.name[8:].isdigit())
        return [RunDir(path) for path in sorted(found, key=lambda path: int(path.name[8:]))]

    def checkpoint(self, timesteps: int) -> Path:
        """Path of the checkpoint taken at `timesteps`."""
        return self.checkpoints / f"checkpoint_{timesteps}_steps{SUFFIX}"

    def latest_checkpoint(self) -> Path | None:
        """The checkpoint with the most timesteps (an earlier version's SB3 zip too), or None."""
        found = [
            (int(m.group(1)), p)
            for p in self.checkpoints.glob("checkpoint_*_steps.*")
            if (m := _CHECKPOINT.fullmatch(p.name))
        ]
        return max(found)[1] if found else None


@dataclass(frozen=True)
class LoadedModel:
    """A trained agent's policy with the config of the run that made it."""

    policy: MultiHeadPolicy  # built from `config`, its tensors loaded; CPU, evaluation mode
    config: RunConfig
    path: Path  # the model file
    run_dir: Path  # the folder holding the run's config.yaml
    num_timesteps: int  # environment steps it was trained for


def locate_model(path: Path) -> tuple[Path, Path]:
    """(model file, the folder holding its run's config.yaml) for a run folder or a model file."""
    if path.is_dir():
        for suffix in (SUFFIX, LEGACY_SUFFIX):
            for name in MODEL_NAMES:
                if (path / f"{name}{suffix}").is_file():
                    return path / f"{name}{suffix}", path
        names = " or ".join(f"{name}{SUFFIX}" for name in MODEL_NAMES)
        raise ModelError(f"{path}: no {names} in this run folder")
    if not path.is_file():
        raise ModelError(f"{path}: no such model file or run folder")
    folders = [path.parent] + ([path.parent.parent] if path.parent.name == "checkpoints" else [])
    for folder in folders:
        if RunDir(folder).config.is_file():
            return path, folder
    raise ModelError(
        f"{path}: no config.yaml next to the model; the policy and the env settings (window, "
        "levels, costs) come from the run's config.yaml: pass the run folder, or copy its "
        "config.yaml here"
    )


def vote_members(root: Path) -> list[Path] | None:
    """The model files of the vote that run folder `root` ships (its `vote.json`), or None
    where it ships no vote. A listed file that is missing is a `ModelError` naming it."""
    listed = RunDir(root).vote
    if not listed.is_file():
        return None
    try:
        members = [root / name for name in json.loads(listed.read_text())["members"]]
    except (ValueError, KeyError, TypeError) as error:
        raise ModelError(f"{listed}: not a vote's member list ({error})") from None
    missing = [str(path) for path in members if not path.is_file()]
    if missing or not members:
        raise ModelError(f"{listed}: lists member model files that are missing: {missing}")
    return members


def load_model(path: Path) -> LoadedModel:
    """Load a model saved by `training.train` (a run folder or a model file) with its config.

    The policy is built from the config (`build_policy`) and the file's tensors are loaded into
    it after checking them (`training.run.model_file`); nothing in the file is run. Any file that
    is not such a model, or does not fit the config, is a `ModelError` naming it, and so is a run
    folder that ships a vote (`training.run.vote.load_trained` loads that): the error lists its
    members, each a model file to pass instead.
    """
    members = vote_members(path) if path.is_dir() else None
    if members is not None:
        raise ModelError(
            f"{path}: ships a vote of {len(members)} policies (vote.json), and this reads one "
            f"policy: pass one of its members, {', '.join(str(m) for m in members)}"
        )
    model_path, run_dir = locate_model(path)
    saved = read_model_file(model_path)  # refuses anything but our format before building
    config = load_config(RunDir(run_dir).config)
    policy = build_policy(config)
    load_policy_tensors(policy, saved, model_path)
    policy.set_training_mode(False)
    return LoadedModel(policy, config, model_path, run_dir, saved.num_timesteps)


def restore_checkpoint(model: BaseAlgorithm, path: Path) -> None:
    """Continue `model` (built by `build_model` from the run's config) from a checkpoint file:
    its policy tensors, its optimizer state and its timestep count."""
    saved = read_model_file(path)
    policy = policy_of(model)
    load_policy_tensors(policy, saved, path)
    load_optimizer_state(policy.optimizer, saved, path)
    model.num_timesteps = saved.num_timesteps
