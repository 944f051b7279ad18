"""`train.restarts`: several seeds trained in one run, the one that validates best kept."""

import json
import shutil
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from training.config import load_config
from training.run.folder import RunDir, load_model
from training.run.model_file import read_model_file
from training.train import main

SMOKE = ["--config", "configs/smoke.yaml"]


def train(run: Path, *args: str) -> int:
    return main([*SMOKE, "--run-dir", str(run), *args])


@pytest.fixture(scope="module")
def restarted(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("restarts") / "run"
    assert train(run, "--set", "train.restarts=3") == 0
    return run


def best_sharpe(run: Path) -> float:
    history = json.loads((run / "validation.json").read_text())
    return max(entry["sharpe"] for entry in history)


def test_each_restart_is_an_ordinary_run_with_its_own_seed(restarted):
    for number, seed in ((1, 0), (2, 1000), (3, 2000)):
        restart = restarted / f"restart_{number}"
        cfg = load_config(restart / "config.yaml")
        assert cfg.train.seed == seed and cfg.train.restarts == 1
        assert load_model(restart).num_timesteps in (128, 256)  # its best pass, as in any run
        assert (restart / "splits.json").read_bytes() == (restarted / "splits.json").read_bytes()
        assert RunDir(restart).latest_checkpoint() is not None
    assert load_config(restarted / "config.yaml").train.restarts == 3


def test_the_run_keeps_the_restart_with_the_best_validation_pass(restarted):
    choice = json.loads((restarted / "restarts.json").read_text())
    scores = [best_sharpe(restarted / f"restart_{n}") for n in (1, 2, 3)]
    assert [row["best_validation_sharpe"] for row in choice["restarts"]] == scores
    assert [row["best_validation_score"] for row in choice["restarts"]] == scores  # by Sharpe
    kept = choice["kept"]
    assert scores[kept - 1] == max(scores)
    source = restarted / f"restart_{kept}"
    assert (restarted / "best_model.safetensors").read_bytes() == (
        source / "best_model.safetensors"
    ).read_bytes()
    assert (restarted / "validation.json").read_text() == (source / "validation.json").read_text()
    assert load_model(restarted).path == restarted / "best_model.safetensors"
    assert (restarted / "report" / "metrics.json").is_file()  # the test backtest of the kept one
    events = EventAccumulator(str(restarted / "tb" / "restarts"))  # TensorBoard shows the choice
    events.Reload()
    logged = events.Scalars("restarts/best_validation_score")
    assert [(e.step, e.value) for e in logged] == [
        (n, pytest.approx(scores[n - 1])) for n in (1, 2, 3)
    ]
    assert {e.value for e in events.Scalars("restarts/kept")} == {kept}


def test_restart_1_is_the_run_a_single_seed_makes(restarted, tmp_path):
    single = tmp_path / "single"
    assert train(single) == 0
    for name in ("best_model.safetensors", "final_model.safetensors"):
        ours = read_model_file(single / name)
        theirs = read_model_file(restarted / "restart_1" / name)
        assert ours.policy.keys() == theirs.policy.keys()
        assert all(ours.policy[k].equal(theirs.policy[k]) for k in ours.policy)


def test_resume_keeps_finished_restarts_and_retrains_a_missing_one(restarted, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(restarted, run)
    kept = (run / "restart_1" / "final_model.safetensors").read_bytes()
    shutil.rmtree(run / "restart_3")  # as if stopped before restart 3 began
    capsys.readouterr()
    assert main(["--resume", str(run)]) == 0
    out = capsys.readouterr().out
    assert "restart 1/3, seed 0: trained already," in out
    assert "restart 3/3, seed 2000: training" in out
    assert (run / "restart_1" / "final_model.safetensors").read_bytes() == kept
    assert read_model_file(run / "restart_3" / "final_model.safetensors").num_timesteps == 256


def test_resume_refuses_a_restart_stopped_before_its_first_checkpoint(restarted, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(restarted, run)
    shutil.rmtree(run / "restart_2" / "checkpoints")
    (run / "restart_2" / "final_model.safetensors").unlink()
    capsys.readouterr()
    assert main(["--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{run / 'restart_2'}: already holds a run" in err and "delete it to retrain" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_restarts_without_validation_bars_are_refused_in_one_line(tmp_path, capsys):
    code = train(tmp_path / "r", "--set", "train.restarts=2", "--set", "data.validation=0")
    err = capsys.readouterr().err
    assert code == 2 and "train.restarts: 2 restarts are chosen between on validation" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r" / "config.yaml").exists()  # refused before anything is written
