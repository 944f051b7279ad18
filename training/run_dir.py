"""The run directory: where a training run keeps its config, logs, checkpoints, models, reports.

Every file is written atomically (a temporary file in the same folder, then `os.replace`), so a
run killed at any moment leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from stable_baselines3.common.base_class import BaseAlgorithm

from training.atomic import write_atomic

_CHECKPOINT = re.compile(r"checkpoint_(\d+)_steps\.zip$")


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
