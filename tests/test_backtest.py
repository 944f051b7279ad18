"""`training.backtest`: fast inference == `policy.predict`, baselines by hand, the CLI, bad input.

One smoke model is trained per test session (`smoke_run`). Torch runs on one thread here: the
suite runs on 2 cores with 2 pytest workers, and more threads only make them fight.
"""

import dataclasses
import json
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import run_module
from safetensors.torch import save as safetensors_bytes
from stable_baselines3 import PPO

from agent import MultiHeadPolicy
from envs import TradingEnv, load_market_data
from training.backtest import main
from training.config import load_config, save_config
from training.evaluation import fast_inference
from training.evaluation.backtest import (
    BacktestResult,
    backtest,
    format_comparison,
    format_next_order,
    holding_note,
    in_sample,
    record_strategy,
    with_baselines,
)
from training.evaluation.baselines import (
    baseline_env,
    baseline_policies,
    buy_and_hold,
    moving_average_crossover,
    sized_baseline_env,
)
from training.evaluation.fast_inference import FastPolicy
from training.evaluation.metrics import compute_metrics, trades_from_record
from training.evaluation.rollout import RECORD_COLUMNS, record_episode
from training.run.data import split_run_market
from training.run.folder import RunDir, load_model

REPO = Path(__file__).resolve().parents[1]
GOOGL = REPO / "data" / "gymanytrading_GOOGL_daily.csv"
STRATEGIES = {"agent", "buy_and_hold", "flat", "ma_crossover"}
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def whole_range_env(data, config, **kwargs) -> TradingEnv:
    return TradingEnv(data, config, random_start=False, episode_length=None, **kwargs)


# --- fast inference ---------------------------------------------------------------------------


def smoke_policy(run: Path, logit_scale: float = 1.0) -> MultiHeadPolicy:
    """The smoke run's best policy with its logits layers scaled by `logit_scale`.

    The smoke model is barely trained, so its logits are nearly uniform (scale 0.01); scaling
    them by 300 gives a decisive policy whose actions change with the state.
    """
    policy = load_model(run).policy
    with torch.no_grad():
        for head in (policy.decision_heads.direction, policy.decision_heads.leverage,
                     policy.decision_heads.risk):  # fmt: skip
            head.logits.weight.mul_(logit_scale)
    return policy


def predict_record(policy: MultiHeadPolicy, env: TradingEnv) -> pd.DataFrame:
    """The reference: `record_episode` with `policy.predict` deciding every step."""
    return record_episode(env, lambda obs: policy.predict(obs, deterministic=True)[0])


@pytest.mark.parametrize("logit_scale", [1.0, 300.0])
def test_fast_policy_equals_model_predict_on_real_data(smoke_run, logit_scale):
    """Identical records over the whole GOOGL file, from the compiled episode and step by step."""
    policy = smoke_policy(smoke_run, logit_scale)
    env = whole_range_env(GOOGL, load_config(smoke_run / "config.yaml").env)

    reference = predict_record(policy, env)
    fast = FastPolicy(policy, env.core)
    record = fast.record_episode()
    as_env_policy = record_strategy(env, FastPolicy(policy, env.core))

    steps = len(record) - 1
    assert steps == env.core.end_bar - env.core.first_bar > 2000
    pd.testing.assert_frame_equal(record, reference)
    pd.testing.assert_frame_equal(as_env_policy, reference)
    assert fast.fallbacks < 0.02 * steps  # the fast path did the work, not the fallback
    assert record["direction"].iloc[1:].nunique() >= 2  # not a constant policy


def test_fast_policy_episode_through_the_fallback_and_a_liquidation(smoke_run, monkeypatch):
    """Every step a near tie (a huge tolerance): the compiled loop hands each one to
    `policy.predict` and resumes. At leverage 4-19 with far stops the account is liquidated
    early: the episode ends there, as the env's does."""
    policy = smoke_policy(smoke_run, 300.0)
    config = dataclasses.replace(
        load_config(smoke_run / "config.yaml").env,
        leverage_levels=(4.0, 8.0, 12.0, 19.0),
        risk_levels=(0.5, 0.8, 0.9, 0.95),
    )
    env = whole_range_env(GOOGL, config)
    reference = predict_record(policy, env)
    monkeypatch.setattr(fast_inference, "TIE_TOLERANCE", 1e9)
    fast = FastPolicy(policy, env.core)
    record = fast.record_episode()

    pd.testing.assert_frame_equal(record, reference)
    assert record["liquidated"].iloc[-1] or record["bankrupt"].iloc[-1]
    assert fast.fallbacks == len(record) - 1 < 200
    assert fast.final_accounts is None  # no next order from a liquidated account
    result = backtest(policy, env)
    assert result.next_order is None
    when = str(record["timestamp"].iloc[-1].date())
    assert format_next_order(result).startswith("next order: none, the agent's account was ")
    assert format_next_order(result).endswith(f" on {when}")


def test_fast_policy_decides_every_decision_interval_bars(smoke_run):
    """With `decision_interval=3` the per-bar record decides on every third bar and holds the
    bars between; at each decision it is where a `policy.predict` episode of the env (one step a
    decision) is, and the next order waits for the next decision bar."""
    policy = smoke_policy(smoke_run, 300.0)
    config = dataclasses.replace(load_config(smoke_run / "config.yaml").env, decision_interval=3)
    env = whole_range_env(GOOGL, config)
    record = FastPolicy(policy, env.core).record_episode()
    reference = predict_record(policy, env)  # row j: after decision j

    steps = len(record) - 1
    assert len(reference) == 1 + -(-steps // 3)
    at_decisions = [*range(0, steps, 3), steps]  # each decision's record row, and the end
    columns = ["timestamp", "equity", "position", "direction", "leverage", "risk"]
    pd.testing.assert_frame_equal(
        record.iloc[at_decisions][columns].reset_index(drop=True), reference[columns]
    )
    ordered = np.flatnonzero(record["order_fill"].notna().to_numpy())  # rows after an order
    assert len(ordered) > 10 and ((ordered - 1) % 3 == 0).all()
    actions = record[["direction", "leverage", "risk"]].iloc[1:].reset_index(drop=True)
    in_force = actions.iloc[np.arange(steps) // 3 * 3].reset_index(drop=True)  # each decision's
    pd.testing.assert_frame_equal(actions, in_force)
    first = config.window - 1
    for steps_done, waits in ((30, False), (31, True)):  # ending on a decision bar, or after it
        short = whole_range_env(GOOGL, config, bars=range(first, first + steps_done + 1))
        order = backtest(policy, short).next_order
        assert order.order.startswith("none: the agent decides every 3 bars") == waits


def test_the_next_order_is_the_decision_policy_predict_takes_on_the_last_bar(smoke_run):
    """On ranges ending short, long and flat: the account the backtest leaves is the env's after
    a `policy.predict` episode, and the next order is `policy.predict` on that last observation."""
    policy = smoke_policy(smoke_run, 300.0)
    config = load_config(smoke_run / "config.yaml").env
    market = load_market_data(GOOGL)
    whole = backtest(policy, whole_range_env(market, config)).records["agent"]
    first_bar = config.window - 1  # row k of the record is bar first_bar + k
    sides = np.sign(whole["position"].to_numpy())
    last_rows = [np.flatnonzero(sides == side)[-1] for side in (-1, 1)] + [len(whole) - 1]
    held = []
    for row in last_rows:
        env = whole_range_env(market, config, bars=range(first_bar, first_bar + row + 1))
        obs, info = env.reset()
        truncated = False
        while not truncated:
            obs, _, terminated, truncated, info = env.step(
                policy.predict(obs, deterministic=True)[0]
            )
            assert not terminated
        order = backtest(policy, env).next_order
        assert order.action == env.core.action_names(policy.predict(obs, deterministic=True)[0])
        assert (order.held.units, order.held.equity) == (info["position"], info["equity"])
        assert order.decided_at == str(pd.Timestamp(info["timestamp"]).date())
        assert order.close == info["price"]
        assert all(0.0 < p <= 1.0 for p in order.probability.values())
        held.append(order.held.direction)
    assert held[:2] == ["short", "long"]


def test_fast_policy_refuses_a_composition_it_does_not_reproduce():
    env = whole_range_env(GOOGL, None, window=8)
    kwargs = dict(trunk=dict(d_model=8, n_heads=2, n_layers=1), flat_direction_index=1,
                  net_arch=dict(pi=[8], vf=[8]))  # fmt: skip
    model = PPO(MultiHeadPolicy, env, policy_kwargs=kwargs, n_steps=8, batch_size=8, device="cpu")
    with pytest.raises(ValueError, match="policy layers between features and heads"):
        FastPolicy(model.policy, env.core)


# --- baselines, by hand -----------------------------------------------------------------------

CLOSES = [100.0, 100.0, 100.0, 104.0, 108.0, 105.0, 101.0, 97.0, 110.0]


def small_market() -> pd.DataFrame:
    """9 daily bars; each opens at the previous close; high/low 1% outside open and close."""
    close = np.array(CLOSES)
    open_ = np.concatenate([[100.0], close[:-1]])
    return pd.DataFrame(
        {
            "Date": pd.date_range("2020-01-01", periods=len(close), freq="D"),
            "Open": open_,
            "High": np.maximum(open_, close) * 1.01,
            "Low": np.minimum(open_, close) * 0.99,
            "Close": close,
            "Volume": 1e6,
        }
    )


@pytest.fixture
def small_env() -> TradingEnv:
    """Window 2: decisions at bars 1..7; 2 bp commission, 1 bp slippage, no carrying costs."""
    return whole_range_env(
        small_market(),
        None,
        window=2,
        commission_bps=2.0,
        slippage_bps=1.0,
        financing_rate_annual=0.0,
        borrow_fee_annual=0.0,
    )


def baseline_record(env: TradingEnv, name: str) -> pd.DataFrame:
    """The record of baseline `name` over `env`'s bars, as `backtest` runs it."""
    baselines = baseline_env(env)
    return record_strategy(baselines, baseline_policies(baselines)[name])


def buy_and_hold_equity(closes: list[float]) -> list[float]:
    """Equity of one long bought at 1x at bar 2's open (100, plus 1 bp slippage and 2 bp
    commission), held to the end and marked at every close: the fills' arithmetic."""
    equity0, commission, slippage = 100_000.0, 2e-4, 1e-4
    units = equity0 / 100.0  # target = leverage 1 * equity at the open / open
    fill = 100.0 * (1 + slippage)
    cash = equity0 - units * fill - units * fill * commission
    return [equity0, *(cash + units * c for c in closes[2:])]


def test_buy_and_hold_pays_entry_costs_then_follows_the_price(small_env):
    record = baseline_record(small_env, "buy_and_hold")
    np.testing.assert_allclose(record["equity"], buy_and_hold_equity(CLOSES), rtol=1e-12)
    trades = trades_from_record(record)
    assert len(trades) == 1 and trades["exit_reason"].iloc[0] == "end"
    assert trades["entry_price"].iloc[0] == pytest.approx(100.0 * (1 + 1e-4))
    assert (record["leverage"].iloc[1:] == 1.0).all()
    assert np.isinf(record["risk"].iloc[1:]).all()  # no stop
    # An agent sized by a volatility target leaves buy-and-hold at 1x.
    config = dataclasses.replace(small_env.core.config, volatility_target=1e-3)
    sized = whole_range_env(small_market(), config)
    assert sized.core.scale[1:].max() < 1.0  # the agent's levels would be sized down
    record = baseline_record(sized, "buy_and_hold")
    np.testing.assert_allclose(record["equity"], buy_and_hold_equity(CLOSES), rtol=1e-12)


def test_sized_hold_holds_the_volatility_scale_of_its_equity(small_env):
    """With a volatility target and no band, `sized_hold` resizes at every open to the decision
    bar's scale times the equity there, whenever the scale moved. Each bar opens at the previous
    close, so its units are ``scale[t] * equity / close`` of the bar before; its level stays 1x.
    The backtest lists it beside the other baselines only when the agent has a target."""
    assert sized_baseline_env(small_env) is None
    config = dataclasses.replace(small_env.core.config, volatility_target=1e-3)
    env = whole_range_env(small_market(), config)
    sized = sized_baseline_env(env)
    assert sized is not None
    record = record_strategy(sized, buy_and_hold(sized.core.config))
    scale, first = env.core.scale, env.core.first_bar
    assert len(set(scale[first:].round(6))) > 3  # the scale moves from bar to bar
    for k in range(1, len(record)):
        t = first + k - 1  # the decision bar
        if k > 1 and scale[t] == scale[t - 1]:  # the first flat bars: nothing to resize
            assert np.isnan(record["order_fill"].iloc[k])
            continue
        units = scale[t] * record["equity"].iloc[k - 1] / record["price"].iloc[k - 1]
        assert record["position"].iloc[k] == pytest.approx(units, rel=1e-12)
    assert (record["leverage"].iloc[1:] == 1.0).all()
    assert set(with_baselines(record, None, env).metrics) == STRATEGIES | {"sized_hold"}
    assert set(with_baselines(record, None, small_env).metrics) == STRATEGIES


def test_buy_and_hold_holds_through_a_dip_below_the_widest_stop(small_env):
    """The closes fall 25% below the entry, far through the widest stop (10% at 1x), and recover:
    buy-and-hold is one position from the first open to the last close, with no stop."""
    closes = [100.0, 100.0, 100.0, 92.0, 80.0, 75.0, 85.0, 100.0, 112.0]
    market = small_market()
    market["Close"] = closes
    market["Open"] = [100.0, *closes[:-1]]
    market["High"] = market[["Open", "Close"]].max(axis=1) * 1.01
    market["Low"] = market[["Open", "Close"]].min(axis=1) * 0.99
    env = whole_range_env(market, small_env.core.config)
    assert max(env.core.config.risk_levels) == 0.1 and min(market["Low"]) < 0.9 * 100.0
    record = baseline_record(env, "buy_and_hold")
    np.testing.assert_allclose(record["equity"], buy_and_hold_equity(closes), rtol=1e-12)
    assert (record["position"].iloc[1:] == 1000.0).all()  # bought once, never sold
    trades = trades_from_record(record)
    metrics = compute_metrics(record, trades, bars_per_year=252)
    assert (metrics["trades"], metrics["stops_hit"], metrics["liquidations"]) == (1, 0, 0)
    assert all(np.isfinite(metrics[key]) for key in ("total_return_pct", "sharpe", "fees_paid"))
    assert record["order_fill"].notna().sum() == 1 and record["exit_fill"].isna().all()


def test_flat_never_trades(small_env):
    record = baseline_record(small_env, "flat")
    assert (record["equity"] == 100_000.0).all() and (record["position"] == 0).all()
    metrics = compute_metrics(record, trades_from_record(record), bars_per_year=252)
    assert metrics["trades"] == 0 and metrics["fees_paid"] == 0 and metrics["total_return_pct"] == 0


def test_moving_average_crossover_uses_closes_up_to_each_bar(small_env):
    baselines = baseline_env(small_env)
    config = baselines.core.config
    policy = moving_average_crossover(config, np.array(CLOSES), fast=2, slow=3)
    # bar: 2-bar mean vs 3-bar mean of the closes up to it
    # 0, 1: no 3-bar mean yet -> flat; 2: 100 vs 100 -> flat; 3: 102 vs 101.33 -> long;
    # 4: 106 vs 104 -> long; 5: 106.5 vs 105.67 -> long; 6: 103 vs 104.67 -> flat;
    # 7: 99 vs 101 -> flat; 8: 103.5 vs 102.67 -> long.
    expected = ["flat", "flat", "flat", "long", "long", "long", "flat", "flat", "long"]
    chosen = [config.direction_names[policy({}, bar)[0]] for bar in range(len(CLOSES))]
    assert chosen == expected
    record = record_strategy(baselines, policy)
    # Row k holds the action decided at bar k (first decision bar 1), filled at bar k + 1.
    assert record["direction"].iloc[1:].tolist() == expected[1:8]
    assert (record["position"].iloc[1:] > 0).tolist() == [e == "long" for e in expected[1:8]]


# --- the CLI on real files --------------------------------------------------------------------

SHARED = REPO.parent / "shared" / "data"
# Each file format once. The shared GOOGL and wiki files are byte-identical to the bundled ones.
FILES = [  # (file, options, default output folder name)
    pytest.param(GOOGL, ["--start", "2017-01-01", "--end", "2017-12-31"],
                 "gymanytrading_GOOGL_daily-2017-01-01-to-2017-12-31", id="googl-iso-dates"),
    pytest.param(REPO / "data" / "wiki_AAPL_FB_GOOG_IBM_MSFT_daily.csv", ["--ticker", "AAPL"],
                 "wiki_AAPL_FB_GOOG_IBM_MSFT_daily-AAPL", id="wiki-long-unadjusted-splits"),
    pytest.param(SHARED / "gymanytrading_EURUSD_1h_ask.csv", [], "gymanytrading_EURUSD_1h_ask",
                 id="eurusd-hourly-day-first"),
    pytest.param(SHARED / "arch_SP500_index_daily.csv", [], "arch_SP500_index_daily",
                 id="sp500-month-first"),
]  # fmt: skip


@pytest.mark.parametrize(("data", "extra", "name"), FILES)
def test_cli_writes_the_report_for_each_file(smoke_run, data, extra, name):
    if not data.is_file():
        pytest.skip(f"{data} is not here")
    result = run_module("training.backtest", "--model", str(smoke_run), "--data", str(data), *extra)
    assert result.returncode == 0, result.stderr
    out = smoke_run / "backtest" / name
    assert f"report: {out}" in result.stdout
    assert "buy_and_hold" in result.stdout and "sharpe" in result.stdout  # the table
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == STRATEGIES
    equity = pd.read_csv(out / "equity.csv", parse_dates=["timestamp"])
    assert list(equity.columns[: len(RECORD_COLUMNS)]) == list(RECORD_COLUMNS)
    # one row per bar; an agent liquidated early leaves the later rows to the baselines
    assert len(equity) == metrics["buy_and_hold"]["bars"] + 1
    assert equity["equity"].notna().sum() == metrics["agent"]["bars"] + 1
    assert (out / "trades.csv").is_file()
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.glob("*.tmp"))
    next_order = json.loads((out / "next_order.json").read_text())
    if next_order is None:  # the smoke agent's account was liquidated (e.g. on AAPL's split day)
        assert "next order: none, the agent's account was" in result.stdout
    else:
        last_close = equity["timestamp"].iloc[-1]
        assert next_order["decided_at"] in (
            str(last_close.date()),
            last_close.strftime("%Y-%m-%d %H:%M"),
        )
        assert f"next order, decided on the close of {next_order['decided_at']}" in result.stdout
        assert f"  order      {next_order['order']}" in result.stdout
    if "--start" in extra:  # earlier bars only fill the first window
        assert equity["timestamp"].iloc[0] >= pd.Timestamp("2017-01-01")
        assert equity["timestamp"].iloc[-1] <= pd.Timestamp("2017-12-31")


def test_training_ends_with_the_full_report_of_the_test_split(smoke_run):
    report = smoke_run / "report"
    assert set(json.loads((report / "metrics.json").read_text())) == STRATEGIES
    assert (report / "report.png").is_file() and (report / "trades.csv").is_file()
    assert json.loads((report / "next_order.json").read_text())["decided_at"] == "2018-08-29"


# --- bad input --------------------------------------------------------------------------------


@pytest.fixture
def model_folder(smoke_run, tmp_path) -> Path:
    """An empty folder holding a copy of the smoke run's config.yaml."""
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(smoke_run / "config.yaml", folder / "config.yaml")
    return folder


def _random_zip(folder: Path) -> Path:
    path = folder / "model.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("notes.txt", "not a model")
    return path


def _text_file(folder: Path) -> Path:
    path = folder / "model.safetensors"
    path.write_text("hello")
    return path


def _sb3_mlp_model(folder: Path) -> Path:
    path = folder / "mlp.zip"
    PPO("MlpPolicy", "CartPole-v1", n_steps=64, device="cpu").save(path)
    return path


def _foreign_safetensors(folder: Path) -> Path:
    path = folder / "model.safetensors"
    path.write_bytes(safetensors_bytes({"weight": torch.zeros(2, 2)}, {"format": "pt"}))
    return path


def _other_window(folder: Path) -> Path:
    cfg = load_config(folder / "config.yaml")
    cfg.env.window = 32
    save_config(cfg, folder / "config.yaml")
    return folder / "model.safetensors"


def _other_width(folder: Path) -> Path:
    cfg = load_config(folder / "config.yaml")
    cfg.trunk.d_model = 32
    save_config(cfg, folder / "config.yaml")
    return folder / "model.safetensors"


PICKLED = "pickled Python objects that run code when loaded"
MODELS = {
    "random-zip": (_random_zip, PICKLED),
    "not-safetensors": (_text_file, "not a safetensors file"),
    "sb3-mlp-policy": (_sb3_mlp_model, PICKLED),
    "foreign-safetensors": (_foreign_safetensors, "not a model written by training.train"),
    "config-window-differs": (_other_window, "was trained for observation shapes"),
    "config-width-differs": (_other_width, "its tensors do not fit the policy"),
}


@pytest.mark.parametrize("case", list(MODELS))
def test_a_model_that_is_not_ours_exits_2_with_one_line(case, smoke_run, model_folder, capsys):
    make, message = MODELS[case]
    model = make(model_folder)
    if not model.exists():
        shutil.copy(smoke_run / "best_model.safetensors", model)
    out = model_folder / "out"
    code = main(["--model", str(model), "--data", str(GOOGL), "--out", str(out)])
    assert_one_line_error(code, capsys.readouterr().err, message)
    assert not out.exists()


def test_backtest_on_the_training_bars_warns_that_it_is_in_sample(smoke_run, tmp_path, capsys):
    """The smoke run trained on GOOGL with 15% validation and 15% test: a backtest of the whole
    file is mostly in-sample; one from the test split's first bar is not."""
    cfg = load_config(smoke_run / "config.yaml")
    splits = split_run_market(load_market_data(GOOGL), cfg.data)
    whole = whole_range_env(GOOGL, cfg.env)
    run = RunDir(smoke_run)
    seen = in_sample(run, whole)
    first = whole.core.first_bar  # the first window's last bar
    assert (seen.train, seen.validation) == (splits.train.stop - first, len(splits.validation))
    assert seen.decisions == whole.core.end_bar - first
    labelled = whole_range_env(load_market_data(GOOGL, ticker="GOOGL"), cfg.env)
    assert in_sample(run, labelled) is None  # another instrument label: not the run's own
    test_env = whole_range_env(GOOGL, cfg.env, bars=splits.test)
    assert in_sample(run, test_env) is None

    assert main(["--model", str(smoke_run), "--data", str(GOOGL), "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    start = seen.test_start.strftime("%Y-%m-%d")
    assert f"{seen.count:,} of the {seen.decisions:,} decisions are in-sample" in err
    assert f"(--start {start})" in err
    out = tmp_path / "held-out"
    assert main(["--model", str(smoke_run), "--data", str(GOOGL), "--start", start,
                 "--out", str(out)]) == 0  # fmt: skip
    assert "in-sample" not in capsys.readouterr().err


def test_a_model_file_without_its_config_exits_2(smoke_run, tmp_path, capsys):
    shutil.copy(smoke_run / "best_model.safetensors", tmp_path / "model.safetensors")
    code = main(["--model", str(tmp_path / "model.safetensors"), "--data", str(GOOGL)])
    assert_one_line_error(code, capsys.readouterr().err, "no config.yaml next to the model")


def test_data_that_does_not_fit_exits_2(smoke_run, tmp_path, capsys):
    short = tmp_path / "short.csv"
    pd.read_csv(GOOGL).head(12).to_csv(short, index=False)  # fewer bars than window 16 + 1
    cases = [
        (short, [], "12 data rows, expected at least"),
        (GOOGL, ["--start", "2018-08-29"], "--start 2018-08-29 selects 1 bar of"),
        (GOOGL, ["--start", "2030-01-01"], "--start 2030-01-01 selects 0 bars"),
        (GOOGL, ["--end", "not-a-date"], "--end: expected a date"),
        (tmp_path / "missing.csv", [], "missing.csv"),
    ]
    for data, extra, message in cases:
        out = tmp_path / "out"
        code = main(["--model", str(smoke_run), "--data", str(data), "--out", str(out), *extra])
        assert_one_line_error(code, capsys.readouterr().err, message)
        assert not out.exists()


def test_cli_subprocess_exit_code_and_no_traceback(smoke_run, model_folder):
    model = _sb3_mlp_model(model_folder)
    result = run_module("training.backtest", "--model", str(model), "--data", str(GOOGL))
    assert_one_line_error(result.returncode, result.stderr, PICKLED)


def assert_one_line_error(code: int, err: str, message: str) -> None:
    assert code == 2, err
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def agent_result(positions: list[float], decision_interval: int = 1) -> BacktestResult:
    """A backtest whose agent closes bars 1.. in `positions` (row 0 is the flat start)."""
    record = pd.DataFrame({"position": [0.0, *positions]})
    return BacktestResult({"agent": record}, {}, {}, None, 252.0, decision_interval)


def test_a_note_says_when_the_agent_held_rather_than_timed():
    sharpes = {"agent": {"sharpe": 1.28}, "buy_and_hold": {"sharpe": 1.16}}
    sized = {**sharpes, "sized_hold": {"sharpe": 1.31}}
    held = agent_result([5.0] * 200)
    assert holding_note([held], sized) == (
        "the agent was long at 100% of the closes: it held the market rather than timed it; "
        "Sharpe 1.28 against sized_hold's 1.31 (buy-and-hold sized by the same volatility budget)"
    )
    assert holding_note([held], sharpes).endswith("Sharpe 1.28 against buy_and_hold's 1.16")
    # An agent deciding every 5 bars resizes to the budget only then; sized_hold on any bar.
    weekly = agent_result([5.0] * 200, decision_interval=5)
    assert holding_note([weekly], sized).endswith(
        "Sharpe 1.28 against sized_hold's 1.31 (buy-and-hold sized by the same volatility budget, "
        "resized on any bar; the agent resizes only on its decisions, every 5)"
    )
    assert holding_note(iter([weekly]), sized) == holding_note([weekly], sized)  # read once
    assert holding_note([weekly], sharpes).endswith("Sharpe 1.28 against buy_and_hold's 1.16")
    # Pooled over instruments: 200 + 98 long closes of 300 is 99%.
    pooled = [held, agent_result([0.0, 0.0, *[3.0] * 98])]
    assert holding_note(pooled, sized).startswith("the agent was long at 99% of the closes")
    short = agent_result([-2.0] * 100)
    assert holding_note([short], sized).startswith("the agent was short at 100% of the closes")
    flat = agent_result([0.0] * 199 + [1.0])
    assert holding_note([flat], sized) == (
        "the agent held a position at 0% of the closes: it stood aside, "
        "and its figures are nearly flat's"
    )
    timed = agent_result([1.0, 0.0] * 100)  # long half the time: it timed the market
    assert holding_note([timed], sized) is None
    assert holding_note([agent_result([1.0] * 97 + [0.0] * 3)], sized) is None  # 97% long
    table = format_comparison([timed], sized)
    assert table.splitlines()[0].split() == ["metric", "agent", "buy_and_hold", "sized_hold"]
    assert "held the market" not in table
    assert format_comparison([held], sized).splitlines()[-1] == holding_note([held], sized)
