"""`training.walkforward`: fold ranges, chaining of test segments, and the CLI end to end."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from training.evaluation.metrics import compute_metrics
from training.evaluation.walkforward import chain_records, fold_ranges
from training.walkforward import main

REPO = Path(__file__).resolve().parents[1]
STRATEGIES = {"agent", "buy_and_hold", "flat", "ma_crossover"}


def test_folds_test_consecutive_equal_segments_after_an_expanding_train_window():
    folds = fold_ranges(103, 3)  # 4 parts of 25 bars; the first training window takes the rest
    assert folds == [
        (range(0, 28), range(28, 53)),
        (range(0, 53), range(53, 78)),
        (range(0, 78), range(78, 103)),
    ]


def record(equity: list[float], position: list[float]) -> pd.DataFrame:
    n = len(equity)
    return pd.DataFrame(
        {
            "timestamp": pd.date_range("2020-01-01", periods=n),
            "price": 10.0,
            "equity": equity,
            "position": position,
            "exposure": 0.5,
            "traded_notional": [0.0] + [100.0] * (n - 1),
            "commission": 0.0,
            "slippage": 0.0,
            "financing": 0.0,
            "borrow": 0.0,
            "costs": [0.0] + [1.0] * (n - 1),
            "stop_hit": False,
            "liquidated": False,
        }
    )


def test_chained_segments_continue_from_the_previous_equity():
    first = record([100.0, 110.0, 120.0], [0.0, 5.0, 5.0])
    second = record([100.0, 90.0, 99.0], [0.0, 4.0, 0.0])
    trades = pd.DataFrame({"pnl": [20.0]}), pd.DataFrame({"pnl": [-1.0]})
    chained, chained_trades = chain_records([first, second], list(trades))
    # The second segment starts at 120 instead of 100: its money columns scale by 1.2.
    np.testing.assert_allclose(chained["equity"], [100.0, 110.0, 120.0, 108.0, 118.8])
    np.testing.assert_allclose(chained["position"], [0.0, 5.0, 5.0, 4.8, 0.0])
    np.testing.assert_allclose(chained["costs"], [0.0, 1.0, 1.0, 1.2, 1.2])
    assert chained["exposure"].eq(0.5).all()  # a ratio: unchanged
    np.testing.assert_allclose(chained_trades["pnl"], [20.0, -1.2])
    metrics = compute_metrics(chained, chained_trades, bars_per_year=252)
    assert metrics["total_return_pct"] == pytest.approx((1.2 * 0.99 - 1) * 100)
    assert metrics["bars"] == 4


def test_cli_walks_forward_two_folds_with_the_smoke_config(tmp_path):
    out = tmp_path / "wf"
    result = subprocess.run(
        [sys.executable, "-m", "training.walkforward", "--config", "configs/smoke.yaml",
         "--folds", "2", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "aggregate out-of-sample" in result.stdout and "fold 2/2" in result.stdout
    report = json.loads((out / "walkforward.json").read_text())
    first, second = report["folds"]
    assert second["train"]["bars"] == first["train"]["bars"] + first["test"]["bars"]
    assert first["test"]["bars"] == second["test"]["bars"]
    assert first["train"]["last"] < first["test"]["first"] <= first["test"]["last"]
    assert first["test"]["last"] < second["test"]["first"]
    assert set(report["aggregate"]) == set(first["metrics"]) == STRATEGIES
    for name in STRATEGIES:  # the chained account compounds the folds' returns
        returns = [fold["metrics"][name]["total_return_pct"] for fold in report["folds"]]
        growth = np.prod([1 + r / 100 for r in returns])
        assert report["aggregate"][name]["total_return_pct"] == pytest.approx((growth - 1) * 100)
    for fold in ("fold_1", "fold_2"):
        assert (out / fold / "final_model.zip").is_file() and (out / fold / "config.yaml").is_file()
    # the decision after the data: fold 2's model, on the last bar of its test segment
    assert report["next_order"]["decided_at"] == second["test"]["last"]
    assert "fold 2's model, on the account of its test segment:\nnext order" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--folds", "0"], "--folds: expected an integer >= 1"),
        (["--folds", "2000"], "leave no step with window=16"),
        (["--folds", "2", "--set", "ppo.n_step=3"], "unknown key 'ppo.n_step'"),
    ],
)
def test_user_mistakes_exit_2_with_one_line_before_training(args, message, tmp_path, capsys):
    code = main(["--config", "configs/smoke.yaml", "--out", str(tmp_path / "wf"), *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "wf").exists()  # nothing was trained or written
