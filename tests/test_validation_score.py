"""`train.select_by`: validation ranks passes by their Sharpe ratio or by their log growth."""

import json
import math

import pytest

from training import train
from training.evaluation.selection import best_pass, best_score, pass_score, validation_score
from training.run.model_file import read_model_file

FOUR_YEARS = {"years": 4.0, "volatility_ann_pct": 20.0}


def test_each_score_comes_with_its_standard_error():
    metrics = {"sharpe": 1.5, "cagr_pct": 10.0, **FOUR_YEARS}
    assert validation_score(metrics, "sharpe") == (1.5, 0.5)  # 1 / sqrt(4 years)
    growth, error = validation_score(metrics, "growth")
    assert growth == pytest.approx(math.log(1.1)) and error == pytest.approx(0.2 / 2)
    flat = {"sharpe": None, "cagr_pct": 0.0, "years": 4.0, "volatility_ann_pct": 0.0}
    assert math.isnan(validation_score(flat, "sharpe")[0])  # no Sharpe ratio without moves
    assert validation_score(flat, "growth") == (0.0, 0.0)  # standing aside grows by nothing
    ruined = {"sharpe": -3.0, "cagr_pct": -100.0, **FOUR_YEARS}
    assert math.isnan(validation_score(ruined, "growth")[0])


def test_the_best_pass_is_the_best_recorded_score():
    # A policy that mostly stands aside has the best Sharpe ratio, holding the best growth.
    history = [
        {"sharpe": 2.8, "score": 0.05},
        {"sharpe": 1.9, "score": 0.30},
        {"sharpe": None, "score": None},
    ]
    assert best_pass(history) == 1 and best_score(history) == 0.30
    assert pass_score({"sharpe": 2.8}) == 2.8  # a history written before scores: its Sharpe
    assert best_pass([{"sharpe": 2.8}, {"sharpe": 1.9}]) == 0
    assert best_pass([{"sharpe": None}]) is None and best_score([]) == -math.inf


def test_a_run_by_growth_keeps_the_pass_that_grew_most(tmp_path):
    run = tmp_path / "run"
    args = ["--config", "configs/smoke.yaml", "--run-dir", str(run), "--set",
            "train.total_timesteps=512", "--set", "train.select_by=growth"]  # fmt: skip
    assert train.main(args) == 0  # eval_every 128: four passes
    history = json.loads((run / "validation.json").read_text())
    assert len(history) == 4
    for entry in history:
        growth, error = validation_score(entry, "growth")
        assert entry["score"] == pytest.approx(growth)
        assert entry["score_standard_error"] == pytest.approx(error)
    best = max(range(4), key=lambda i: (history[i]["score"], -i))  # the first of equals
    assert (
        read_model_file(run / "best_model.safetensors").num_timesteps == history[best]["timesteps"]
    )
