"""Same machine, same seed, same thread count: bitwise identical runs.

Two smoke runs of the same config into two folders give bitwise identical model files (every
tensor, the metadata), and byte-identical validation history and test-split report. (A model
file's bytes may differ in the order of its metadata keys, which safetensors writes from a hash
map, so the files are compared by content.) Across machines this does not hold: float
rounding differs between CPU code paths (AVX-512 against AVX2), and a run's result can swing
widely (README, "Reproducibility"). Only the TensorBoard event files differ here (wall times).
"""

import os
import subprocess
import sys
from pathlib import Path

import torch

from training.run.model_file import read_model_file

REPO = Path(__file__).resolve().parents[1]
MODELS = (
    "final_model.safetensors",
    "best_model.safetensors",
    "checkpoints/checkpoint_128_steps.safetensors",
    "checkpoints/checkpoint_256_steps.safetensors",
)
FILES = (
    "validation.json",
    "report/metrics.json",
    "report/equity.csv",
    "report/trades.csv",
    "report/next_order.json",
)


def smoke_run(run: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "training.train", "--config", "configs/smoke.yaml",
         "--run-dir", str(run), "--set", "train.threads=1", "--set", "train.seed=3"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_two_runs_with_the_same_seed_and_threads_are_bitwise_identical(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    smoke_run(first)
    smoke_run(second)
    for name in MODELS:
        one, two = read_model_file(first / name), read_model_file(second / name)
        assert (one.num_timesteps, one.spaces) == (two.num_timesteps, two.spaces), name
        assert one.policy.keys() == two.policy.keys(), name
        assert all(torch.equal(v, two.policy[k]) for k, v in one.policy.items()), name
        assert (one.optimizer is None) == (two.optimizer is None), name
        if one.optimizer is not None and two.optimizer is not None:
            assert one.optimizer["param_groups"] == two.optimizer["param_groups"], name
            for index, entries in one.optimizer["state"].items():
                other = two.optimizer["state"][index]
                assert all(torch.equal(v, other[k]) for k, v in entries.items()), name
    for name in FILES:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
