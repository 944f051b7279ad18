"""Run folders: a folder that already holds a run is refused unless the run is resumed.

Before, a second `training.train --run-dir DIR` into a finished run's folder trained again, kept
the first run's `best_model` whenever the second never beat its validation Sharpe, reported that
model's test backtest and appended to the first run's `validation.json`.
"""

import subprocess
import sys
from pathlib import Path

import pytest

from training.config import ConfigError
from training.run.folder import RunDir, run_entries
from training.train import main as train_main
from training.walkforward import main as walkforward_main

REPO = Path(__file__).resolve().parents[1]
SMOKE = str(REPO / "configs" / "smoke.yaml")
QUICK = ["--set", "train.total_timesteps=128", "--set", "train.checkpoint_every=0"]


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A folder holding a finished smoke run (128 steps, one validation pass)."""
    run = tmp_path_factory.mktemp("finished") / "run"
    result = subprocess.run(
        [sys.executable, "-m", "training.train", "--config", SMOKE, "--run-dir", str(run), *QUICK],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return run


def test_training_into_a_folder_holding_a_run_is_refused_and_changes_nothing(finished_run, capsys):
    before = {p: p.read_bytes() for p in finished_run.rglob("*") if p.is_file()}
    code = train_main(["--config", SMOKE, "--run-dir", str(finished_run), *QUICK])
    err = one_line_error(capsys)
    assert code == 2
    assert f"{finished_run}: already holds a run (best_model.safetensors, config.yaml" in err
    assert f"continue it with --resume {finished_run}, or pass another --run-dir" in err
    after = {p: p.read_bytes() for p in finished_run.rglob("*") if p.is_file()}
    assert after == before


@pytest.mark.parametrize("entry", ["config.yaml", "validation.json", "tb", "checkpoints",
                                   "final_model.safetensors", "best_model.zip"])  # fmt: skip
def test_any_part_of_a_run_makes_a_folder_taken(tmp_path, entry):
    (tmp_path / entry).mkdir() if "." not in entry else (tmp_path / entry).write_text("x")
    (tmp_path / "notes.txt").write_text("mine")  # other files do not count
    assert run_entries(tmp_path) == [entry]
    with pytest.raises(ConfigError, match=f"already holds a run \\({entry}\\); do this"):
        RunDir.claim(tmp_path, "do this")


def test_an_empty_or_missing_folder_is_claimed(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert RunDir.claim(empty, "").root == empty
    missing = tmp_path / "a" / "b"
    assert RunDir.claim(missing, "").root == missing and missing.is_dir()


def test_training_into_an_existing_empty_folder_works(tmp_path):
    run = tmp_path / "empty"
    run.mkdir()
    assert train_main(["--config", SMOKE, "--run-dir", str(run), *QUICK,
                       "--set", "train.eval_every=0"]) == 0  # fmt: skip
    assert (run / "final_model.safetensors").is_file()


def test_resume_without_a_checkpoint_is_refused(finished_run, capsys):
    code = train_main(["--resume", str(finished_run)])  # checkpoint_every=0: none written
    err = one_line_error(capsys)
    assert code == 2 and f"{finished_run}: no checkpoint to resume from" in err


def test_walkforward_into_a_folder_holding_a_run_is_refused(tmp_path, capsys):
    out = tmp_path / "wf"
    out.mkdir()
    (out / "walkforward.json").write_text("{}")
    (out / "fold_1").mkdir()
    code = walkforward_main(["--config", SMOKE, "--folds", "2", "--out", str(out), *QUICK])
    err = one_line_error(capsys)
    assert code == 2
    assert f"{out}: already holds a run (fold_1, walkforward.json); pass another --out" in err
    assert sorted(p.name for p in out.iterdir()) == ["fold_1", "walkforward.json"]
