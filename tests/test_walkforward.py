"""`training.walkforward`: segments on one calendar, one account traded through them, the CLI."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from envs import EnvConfig
from envs.market_data import load_market_data
from training.evaluation.backtest import evaluation_env
from training.evaluation.fast_inference import FastPolicy
from training.evaluation.walkforward import segment_starts, segments, trade_through
from training.run.folder import load_model
from training.walkforward import main

REPO = Path(__file__).resolve().parents[1]
GOOGL = REPO / "data" / "gymanytrading_GOOGL_daily.csv"
STRATEGIES = {"agent", "buy_and_hold", "flat", "ma_crossover"}


def test_test_segments_are_equal_parts_at_the_end_of_the_calendar():
    dates = np.arange(np.datetime64("2020-01-01"), np.datetime64("2020-04-13"))  # 103 days
    starts = segment_starts(dates, 3)  # 4 parts of 25 dates; the first training part takes the rest
    assert [int((s - dates[0]).astype(int)) for s in starts] == [28, 53, 78]


def test_consecutive_segments_share_the_bar_where_the_next_model_takes_over():
    market = load_market_data(GOOGL)
    starts = [market.timestamps[1000], market.timestamps[1500]]
    assert segments(market, starts) == [(0, range(1000, 1501)), (1, range(1500, 2335))]
    late = [market.timestamps[0] - np.timedelta64(400, "D"), market.timestamps[100]]
    assert segments(market, late) == [(0, range(0, 101)), (1, range(100, 2335))]


def test_one_account_trades_through_the_segments_as_through_one_range(smoke_run):
    """With the same policy in both folds, the walk-forward account equals one backtest of the
    whole span: the position carries over, nothing is closed or skipped at the boundary."""
    policy = load_model(smoke_run).policy
    market = load_market_data(GOOGL)
    config = EnvConfig(window=16, episode_length=64)
    starts = [market.timestamps[1800], market.timestamps[2000]]
    through = trade_through([policy, policy], market, config, starts)
    whole = FastPolicy(policy, evaluation_env(market, config, range(1800, 2335)).core)
    expected = whole.record_episode()
    pd.testing.assert_frame_equal(through.records["agent"], expected)
    assert through.metrics["buy_and_hold"]["trades"] == 1  # bought once, held, over the span


def test_cli_walks_forward_two_folds_on_several_instruments(tmp_path):
    out = tmp_path / "wf"
    data = ["data/gymanytrading_GOOGL_daily.csv", "data/wiki_AAPL_FB_GOOG_IBM_MSFT_daily.csv"]
    result = subprocess.run(
        [sys.executable, "-m", "training.walkforward", "--config", "configs/smoke.yaml",
         "--folds", "2", "--out", str(out), "--data", *data, "--ticker", "AAPL", "IBM",
         "--configs-tried", "7"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "fold 2/2" in result.stdout and "out of sample: 2 instrument(s)" in result.stdout
    report = json.loads((out / "walkforward.json").read_text())
    first, second = report["folds"]
    assert first["train"]["last"] < first["validation"]["first"] <= first["validation"]["last"]
    assert first["validation"]["last"] < first["test"]["first"] <= first["test"]["last"]
    assert first["test"]["last"] < second["test"]["first"]
    assert set(report["aggregate"]) == STRATEGIES == set(report["instruments"]["AAPL"])
    assert set(report["instruments"]) == {"AAPL", "IBM"}  # GOOGL was not picked
    assert report["edge"]["configs_tried"] == 7 and 0 <= report["edge"]["noise_probability"] <= 1
    for fold in ("fold_1", "fold_2"):  # ordinary run folders
        for name in ("config.yaml", "final_model.safetensors", "splits.json", "report"):
            assert (out / fold / name).exists(), (fold, name)
    assert set(report["next_orders"]) == {"AAPL", "IBM"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--folds", "0"], "--folds: expected an integer >= 1"),
        (["--folds", "2000"], "--folds 2000: 2,335 calendar dates give test segments of 1 dates"),
        (["--folds", "2", "--set", "ppo.n_step=3"], "unknown key 'ppo.n_step'"),
        (["--folds", "2", "--configs-tried", "0"], "--configs-tried: expected an integer >= 1"),
    ],
)
def test_user_mistakes_exit_2_with_one_line_before_training(args, message, tmp_path, capsys):
    code = main(["--config", "configs/smoke.yaml", "--out", str(tmp_path / "wf"), *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "wf").exists()  # nothing was trained or written
