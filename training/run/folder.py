"""The run folder: where a training run keeps its config, logs, checkpoints, models, reports.

Every file is written atomically (a temporary file in the same folder, then `os.replace`), so a
run killed at any moment leaves either the old file or the new one, never half of one. Models are
saved here (`save_model_atomic`) and loaded back with their run's config (`load_model`), from a
run folder or from a model zip next to (or, in `checkpoints/`, below) its run's `config.yaml`.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from stable_baselines3 import PPO
from stable_baselines3.common.base_class import BaseAlgorithm

from agent import MultiHeadPolicy, policy_of
from training.config import RunConfig, load_config
from training.run.atomic import write_atomic

MODEL_NAMES = ("best_model.zip", "final_model.zip")  # in a run folder, in order of preference
_CHECKPOINT = re.compile(r"checkpoint_(\d+)_steps\.zip$")


class ModelError(ValueError):
    """A path that is not a model saved by `training.train` with its run's config (one line)."""


def save_model_atomic(model: BaseAlgorithm, path: Path) -> Path:
    """Save an SB3 model zip atomically."""
    return write_atomic(path, model.save)


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
        """Periodic checkpoints `checkpoint_<timesteps>_steps.zip`."""
        return self.root / "checkpoints"

    @property
    def best_model(self) -> Path:
        """The model with the best validation Sharpe so far."""
        return self.root / "best_model.zip"

    @property
    def final_model(self) -> Path:
        """The model at the end of training."""
        return self.root / "final_model.zip"

    @property
    def validation_history(self) -> Path:
        """Validation metrics of every evaluation, as JSON."""
        return self.root / "validation.json"

    @property
    def report(self) -> Path:
        """The backtest of the test split written at the end of training."""
        return self.root / "report"

    def checkpoint(self, timesteps: int) -> Path:
        """Path of the checkpoint taken at `timesteps`."""
        return self.checkpoints / f"checkpoint_{timesteps}_steps.zip"

    def latest_checkpoint(self) -> Path | None:
        """The checkpoint with the most timesteps, or None."""
        found = [
            (int(m.group(1)), p)
            for p in self.checkpoints.glob("checkpoint_*_steps.zip")
            if (m := _CHECKPOINT.search(p.name))
        ]
        return max(found)[1] if found else None


@dataclass(frozen=True)
class LoadedModel:
    """A trained agent with the config of the run that made it."""

    model: PPO
    config: RunConfig
    path: Path  # the model zip
    run_dir: Path  # the folder holding the run's config.yaml

    @property
    def policy(self) -> MultiHeadPolicy:
        """The model's policy (checked by `load_model`)."""
        return policy_of(self.model)


def locate_model(path: Path) -> tuple[Path, Path]:
    """(model zip, the folder holding its run's config.yaml) for a run folder or a model zip."""
    if path.is_dir():
        for name in MODEL_NAMES:
            if (path / name).is_file():
                return path / name, path
        raise ModelError(f"{path}: no {' or '.join(MODEL_NAMES)} in this run folder")
    if not path.is_file():
        raise ModelError(f"{path}: no such model file or run folder")
    folders = [path.parent] + ([path.parent.parent] if path.parent.name == "checkpoints" else [])
    for folder in folders:
        if RunDir(folder).config.is_file():
            return path, folder
    raise ModelError(
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
        raise ModelError(f"{model_path}: not a model saved by training.train ({cause})") from None
    if not isinstance(model.policy, MultiHeadPolicy):
        raise ModelError(
            f"{model_path}: a {type(model.policy).__name__} model, not a multi-head trading agent "
            "(agent.MultiHeadPolicy) saved by training.train"
        )
    return LoadedModel(model, config, model_path, run_dir)
