"""`python -m training.sweep`: search spaces, plans, resume, summaries, selection statistics,
and one real local sweep through Ray Tune."""

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest
import yaml

from training import sweep
from training.config import load_config
from training.evaluation.selection import (
    deflated_sharpe_ratio,
    expected_max_sharpe,
    probabilistic_sharpe_ratio,
    probability_of_backtest_overfitting,
)
from training.experiments.plan import build_plan, fresh_run_dir, read_plan
from training.experiments.space import SpaceError, read_space, sample_configs
from training.experiments.summary import (
    FIGURES,
    aggregate,
    collect,
    read_run,
    render,
    selection_text,
    write_outputs,
)

REPO = Path(__file__).resolve().parents[1]
SMOKE = REPO / "configs" / "smoke.yaml"


def write_space(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


# --- search spaces ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ppo.learnig_rate: {uniform: [0.1, 0.2]}", "unknown config key 'ppo.learnig_rate'"),
        ("ppo: {choice: [1, 2]}", "unknown config key 'ppo'"),  # a section, not a key
        ("ppo.gamma: {normal: [0.9, 0.01]}", "ppo.gamma: expected one of"),
        ("ppo.gamma: [0.9, 0.99]", "ppo.gamma: expected one of"),
        ("ppo.gamma: {uniform: [0.99, 0.9]}", "ppo.gamma: uniform: expected lo < hi"),
        ("ppo.gamma: {uniform: [0.9]}", "ppo.gamma: uniform: expected [lo, hi] numbers"),
        ("ppo.learning_rate: {loguniform: [0, 1]}", "loguniform: expected 0 < lo < hi"),
        ("ppo.n_epochs: {randint: [1.5, 4]}", "ppo.n_epochs: randint: expected [lo, hi] integers"),
        ("ppo.n_epochs: {choice: []}", "ppo.n_epochs: choice: expected a non-empty list"),
        ("ppo.n_steps: {choice: [32, abc]}", "ppo.n_steps: choice value 'abc': expected int"),
        ("ppo.gamma: {uniform: [0.5, 1.5]}", "ppo.gamma: uniform value 1.5"),  # out of range
        ("[1, 2]", "expected a mapping of dotted config keys"),
    ],
)
def test_a_bad_space_is_one_line_naming_the_key(tmp_path, text, expected):
    with pytest.raises(SpaceError) as error:
        read_space(write_space(tmp_path, text), SMOKE)
    assert expected in str(error.value)
    assert "\n" not in str(error.value)


def test_unknown_key_suggests_the_closest(tmp_path):
    space = write_space(tmp_path, "ppo.learnig_rate: {uniform: [0.1, 0.2]}")
    with pytest.raises(SpaceError, match=r"did you mean 'ppo\.learning_rate'"):
        read_space(space, SMOKE)


def test_the_cli_prints_one_line_and_exits_2_on_a_bad_space(tmp_path, capsys):
    space = write_space(tmp_path, "trunk.n_layer: {choice: [1, 2]}")
    out = tmp_path / "sweep"
    status = sweep.main(["--config", str(SMOKE), "--search", str(space), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert err.startswith("error: ") and "trunk.n_layer" in err and "\n" not in err
    assert not (out / "plan.json").exists()  # nothing planned from a bad space


def test_resume_rejects_new_sweep_options_and_a_missing_plan(tmp_path, capsys):
    assert sweep.main(["--resume", str(tmp_path), "--seeds", "2"]) == 2
    assert "drop --seeds" in capsys.readouterr().err
    assert sweep.main(["--resume", str(tmp_path)]) == 2
    assert "no sweep plan here" in capsys.readouterr().err


def test_example_space_parses_and_its_draws_load():
    space = read_space(REPO / "configs" / "search_example.yaml", REPO / "configs" / "default.yaml")
    for params in sample_configs(space, 20, seed=3):
        for key, value in params.items():
            low_high = space[key].bounds()
            if space[key].kind == "choice":
                assert value in low_high
            else:
                assert low_high[0] <= value <= low_high[1]


# --- plans and resume -------------------------------------------------------------------------


def make_plan(tmp_path: Path, seed: int = 0, samples: int = 3, seeds: int = 2):
    space = read_space(
        write_space(
            tmp_path,
            "ppo.learning_rate: {loguniform: [1.0e-5, 1.0e-2]}\n"
            "ppo.n_epochs: {randint: [1, 4]}\n"
            "trunk.n_layers: {choice: [1, 2]}\n",
        ),
        SMOKE,
    )
    return build_plan(SMOKE, None, ["train.total_timesteps=128"], space, samples, seeds, seed)


def test_no_trial_is_stopped_before_its_first_validation_pass(tmp_path, monkeypatch):
    space = read_space(write_space(tmp_path, "ppo.n_epochs: {randint: [1, 4]}\n"), SMOKE)
    sets = ["train.total_timesteps=512", "train.eval_every=128", "train.eval_start=300"]
    plan = build_plan(SMOKE, None, sets, space, 2, 1, 0)
    monkeypatch.setattr(sweep.ray_trials, "asha", lambda longest, grace: (longest, grace))
    assert sweep.asha_for(plan) == (512, 384)  # passes at 384 and 512 only


def test_the_plan_is_reproducible_from_the_sampler_seed(tmp_path):
    first, again = make_plan(tmp_path, seed=7), make_plan(tmp_path, seed=7)
    assert first == again
    assert make_plan(tmp_path, seed=8).configs != first.configs
    assert [t.trial_id for t in first.trials] == [
        "c00-s0",
        "c00-s1",
        "c01-s0",
        "c01-s1",
        "c02-s0",
        "c02-s1",
    ]
    for trial in first.trials:  # every trial's overrides load, with its seed
        cfg = load_config(SMOKE, first.trial_overrides(trial))
        assert cfg.train.seed == trial.seed
        assert cfg.ppo.learning_rate == trial.params["ppo.learning_rate"]
        assert cfg.train.total_timesteps == 128


def test_the_plan_round_trips_through_plan_json(tmp_path):
    plan = make_plan(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "plan.json").write_text(json.dumps(plan.to_dict()))
    assert read_plan(tmp_path / "out") == plan


def finish(run_dir: Path, test_sharpe: float = 0.5, validation: float = 0.2) -> Path:
    """A hand-made finished run folder."""
    (run_dir / "report").mkdir(parents=True)
    (run_dir / "validation.json").write_text(
        json.dumps([{"timesteps": 128, "sharpe": validation, "total_return_pct": 1.0}])
    )
    metrics = {
        "agent": {"sharpe": test_sharpe, "total_return_pct": 3.0, "bars": 253, "years": 1.0},
        "buy_and_hold": {"sharpe": 1.0, "total_return_pct": 20.0},
    }
    (run_dir / "report" / "metrics.json").write_text(json.dumps(metrics))
    return run_dir


def test_resume_skips_finished_trials_and_never_reuses_an_unfinished_folder(tmp_path, capsys):
    plan = build_plan(SMOKE, None, [], None, 1, 4, 0)
    out = tmp_path / "out"
    finish(out / "trials" / "c00-s0")
    (out / "trials" / "c00-s1" / "tb").mkdir(parents=True)  # killed halfway
    (out / "trials" / "c00-s3").mkdir(parents=True)  # stopped early by the scheduler
    (out / "status.json").write_text(json.dumps({"c00-s3": {"status": "stopped"}}))
    jobs = sweep.pending_jobs(plan, out, 1)
    assert [job.trial_id for job in jobs] == ["c00-s1", "c00-s2"]
    assert [Path(job.run_dir).name for job in jobs] == ["c00-s1.retry1", "c00-s2"]
    assert "c00-s1: unfinished run" in capsys.readouterr().out
    args = jobs[0].args
    assert args[args.index("--run-dir") + 1] == jobs[0].run_dir
    assert {"train.seed=1", "train.threads=1", "train.progress_bar=false"} <= set(args)
    (out / "trials" / "c00-s1.retry1").mkdir()
    assert fresh_run_dir(out, "c00-s1").name == "c00-s1.retry2"


# --- summaries --------------------------------------------------------------------------------


def test_read_run_takes_the_best_validation_entry_and_the_return_moments(tmp_path):
    run = finish(tmp_path / "run", test_sharpe=0.7)
    history = [
        {"timesteps": 128, "sharpe": 0.1, "total_return_pct": 1.0},
        {
            "timesteps": 256,
            "sharpe": 0.4,
            "total_return_pct": 2.0,
            "train_episode_sharpe": 1.5,
            "generalization_gap": 1.1,
        },
        {"timesteps": 384, "sharpe": None},
    ]
    (run / "validation.json").write_text(json.dumps(history))
    equity = 100.0 * np.cumprod([1.0, 1.01, 0.99, 1.03, 0.98, 1.0])
    pd.DataFrame({"equity": equity}).to_csv(run / "report" / "equity.csv", index=False)
    figures, returns = read_run(run)
    assert set(figures) == set(FIGURES)
    assert figures["validation_sharpe"] == 0.4 and figures["validation_timesteps"] == 256
    assert figures["generalization_gap"] == 1.1 and figures["train_episode_sharpe"] == 1.5
    assert figures["test_sharpe"] == 0.7 and figures["buy_and_hold_test_sharpe"] == 1.0
    np.testing.assert_allclose(returns, [0.01, -0.01, 0.03, -0.02, 0.0], atol=1e-12)
    centred = returns - returns.mean()
    expected_skew = np.mean(centred**3) / np.mean(centred**2) ** 1.5
    assert figures["test_return_skew"] == pytest.approx(expected_skew)
    assert math.isnan(read_run(tmp_path / "missing")[0]["test_sharpe"])


def trial_row(cid, seed, validation, test, ret=0.0, status="done"):
    row = dict.fromkeys(FIGURES, math.nan)
    if status == "done":
        row.update(
            validation_sharpe=validation,
            test_sharpe=test,
            test_return_pct=ret,
            buy_and_hold_test_sharpe=1.2,
            buy_and_hold_test_return_pct=20.0,
            test_bars=253,
            test_years=1.0,
            test_return_skew=0.0,
            test_return_kurtosis=3.0,
        )
    return {"trial_id": f"{cid}-s{seed}", "config_id": cid, "seed": seed, "status": status, **row}


ROWS = [
    # c00 has the best test Sharpe but not the best validation: it must not be chosen.
    trial_row("c00", 0, 0.1, 1.0, 10.0),
    trial_row("c00", 1, 0.3, 3.0, 30.0),
    trial_row("c01", 0, 0.5, 0.5, -5.0),
    trial_row("c01", 1, 0.7, 1.5, 15.0),
    trial_row("c02", 0, 0.2, 0.0, 0.0),
    trial_row("c02", 1, math.nan, math.nan, status="failed"),
]
CONFIGS = {"c00": {"ppo.gamma": 0.9}, "c01": {"ppo.gamma": 0.95}, "c02": {"ppo.gamma": 0.99}}


def test_aggregate_chooses_on_validation_and_reports_test_separately():
    summary = aggregate(ROWS, CONFIGS, [0, 1])
    assert summary["configs_tried"] == 3
    assert summary["trials"] == {
        "planned": 6,
        "done": 5,
        "failed": 1,
        "stopped": 0,
        "not run": 0,
    }
    c00 = summary["configs"]["c00"]
    assert c00["test_sharpe"]["median"] == 2.0
    assert c00["test_sharpe"]["iqr"] == 1.0  # 75th (2.5) minus 25th (1.5) percentile
    assert c00["test_sharpe"]["worst"] == 1.0
    assert c00["test_return_pct"]["worst"] == 10.0
    assert summary["configs"]["c02"]["seeds_done"] == 1
    best = summary["best"]
    assert best["config"] == "c01"  # median validation 0.6 beats c00's 0.2 and c02's 0.2
    assert best["validation_sharpe_median"] == pytest.approx(0.6)
    assert best["test"]["sharpe"]["median"] == 1.0 and best["test"]["sharpe"]["worst"] == 0.5
    assert best["test"]["return_pct"]["worst"] == -5.0
    assert best["test"]["buy_and_hold_sharpe"] == 1.2


def test_aggregate_deflates_the_chosen_sharpe_by_hand():
    dsr = aggregate(ROWS, CONFIGS, [0, 1])["best"]["deflated_sharpe"]
    # Per-bar Sharpes: annualised / sqrt(253 bars a year). Configs' medians 2, 1 and 0 have
    # variance 1 (ddof=1), so 1/253 per bar; the chosen c01 has median 1.
    normal, gamma = NormalDist(), 0.5772156649015329
    z = (1 - gamma) * normal.inv_cdf(1 - 1 / 3) + gamma * normal.inv_cdf(1 - 1 / (3 * math.e))
    sr0, sr = z / math.sqrt(253), 1 / math.sqrt(253)
    expected = normal.cdf((sr - sr0) * math.sqrt(251) / math.sqrt(1 + 0.5 * sr**2))
    assert dsr["sharpe_variance_per_bar"] == pytest.approx(1 / 253)
    assert dsr["returns"] == 252 and dsr["configs"] == 3
    assert dsr["dsr"] == pytest.approx(expected)
    assert dsr["dsr"] == pytest.approx(0.558, abs=1e-3)


def test_selection_text_says_what_was_tried_and_chosen():
    text = selection_text(aggregate(ROWS, CONFIGS, [0, 1]))
    assert text.startswith("3 configs x 2 seeds tried (5 done, 1 failed); best on validation: c01")
    assert "its test: Sharpe median 1.00 worst 0.50" in text
    assert "return median 5.0% worst -5.0%" in text
    assert "DSR 0.56 for 3 configs" in text


def test_summary_files_from_run_folders_and_the_status_ledger(tmp_path):
    plan = build_plan(SMOKE, None, [], None, 1, 2, 0)
    out = tmp_path / "out"
    finish(out / "trials" / "c00-s0", test_sharpe=0.8)
    (out / "trials" / "c00-s1").mkdir()
    failed = {"status": "failed", "run_dir": str(out / "trials" / "c00-s1"), "error": "boom"}
    rows, returns = collect(plan, out, {"c00-s1": failed})
    assert [r["status"] for r in rows] == ["done", "failed"]
    assert rows[1]["error"] == "boom" and rows[0]["test_sharpe"] == 0.8
    summary = aggregate(rows, plan.configs, plan.seeds, returns)
    write_outputs(out, rows, summary)
    table = pd.read_csv(out / "summary.csv")
    assert list(table["trial_id"]) == ["c00-s0", "c00-s1"]
    assert json.loads((out / "summary.json").read_text())["trials"]["failed"] == 1
    assert (out / "summary.png").read_bytes()[:4] == b"\x89PNG"
    assert len(render(summary).axes) == 2


# --- selection statistics ---------------------------------------------------------------------


def test_deflated_sharpe_matches_the_papers_example():
    # Bailey and Lopez de Prado (2014), section 3: 100 trials, variance of their annualised
    # Sharpes 1/2, the best 2.5 annualised over 5 years of daily returns (1,250), skewness -3,
    # kurtosis 10: expected maximum Sharpe 0.1132 per day, DSR 0.9004.
    variance = 0.5 / 250
    assert expected_max_sharpe(100, variance) == pytest.approx(0.1132, abs=1e-4)
    dsr = deflated_sharpe_ratio(2.5 / math.sqrt(250), variance, 100, 1250, -3.0, 10.0)
    assert dsr == pytest.approx(0.9004, abs=1e-4)


def test_one_trial_is_not_deflated_and_psr_is_a_half_at_the_benchmark():
    assert expected_max_sharpe(1, 0.3) == 0.0
    assert deflated_sharpe_ratio(0.1, 0.0, 1, 500) == probabilistic_sharpe_ratio(0.1, 0.0, 500)
    assert probabilistic_sharpe_ratio(0.05, 0.05, 300, skew=-1.0, kurtosis=6.0) == 0.5
    assert math.isnan(probabilistic_sharpe_ratio(math.nan, 0.0, 300))


def test_pbo_is_zero_for_a_dominant_strategy_and_one_for_a_reversal():
    noise = np.random.default_rng(0).normal(0.0, 0.01, 64)
    dominant = np.column_stack([noise + 0.005, noise])
    assert probability_of_backtest_overfitting(dominant, n_blocks=8) == 0.0
    up = np.array([0.02, 0.01, 0.03, 0.02])
    first = np.concatenate([up, -up])  # wins the first half, loses the second
    assert probability_of_backtest_overfitting(np.column_stack([first, -first]), 2) == 1.0
    with pytest.raises(ValueError, match="even"):
        probability_of_backtest_overfitting(dominant, n_blocks=3)


# --- a real sweep -----------------------------------------------------------------------------


def session_processes(sid: int) -> list[str]:
    """The command lines of the live processes of session `sid` (none once all have ended)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # fields: state, ppid, pgrp, session
            found.append(f"{stat.parent.name} {cmdline.strip()}")
    return found


def run_alone(args: list[str], out: Path, timeout: float, **kwargs) -> tuple[int, str, str]:
    """Run `args` in a session of its own, its output in files (a pipe would keep a test waiting
    on any child holding it); (exit status, stdout, stderr). Fails when it runs past `timeout`
    or leaves a process behind (Ray's or a trial's): those are killed first."""
    stdout, stderr = out.with_suffix(".out"), out.with_suffix(".err")
    with stdout.open("w") as o, stderr.open("w") as e:
        process = subprocess.Popen(args, stdout=o, stderr=e, start_new_session=True, **kwargs)
    try:
        status: int | None = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        status = None
    deadline = time.monotonic() + (15 if status is not None else 0)  # a few seconds to end
    while (left := session_processes(process.pid)) and time.monotonic() < deadline:
        time.sleep(0.5)
    for line in session_processes(process.pid):  # the command itself too when it ran past
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split()[0]), signal.SIGKILL)
    process.wait()
    text = stderr.read_text()[-3000:]
    assert status is not None, f"{' '.join(args[1:3])} ran past {timeout} s:\n{text}"
    assert not left, "left behind:\n" + "\n".join(left)
    return status, stdout.read_text(), stderr.read_text()


def test_a_local_ray_sweep_of_two_seeds_writes_ordinary_runs_and_a_summary(tmp_path):
    out = tmp_path / "sweep"
    command = [sys.executable, "-m", "training.sweep", "--config", str(SMOKE), "--seeds", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)  # a local Ray, whatever the machine has
    status, stdout, stderr = run_alone(
        [*command, "--out", str(out)],
        tmp_path / "sweep-log",
        timeout=400,
        cwd=tmp_path,  # not the repo root: every path the trials get is absolute
        env=env,
    )
    assert status == 0, stderr[-3000:]
    assert "Traceback" not in stderr
    assert "c00-s0 done" in stdout and "c00-s1 done" in stdout
    assert "1 config x 2 seeds tried (2 done); best on validation: c00" in stdout
    for seed in (0, 1):
        run = out / "trials" / f"c00-s{seed}"
        for name in ("config.yaml", "validation.json", "best_model.safetensors",
                     "final_model.safetensors"):  # fmt: skip
            assert (run / name).is_file()
        assert (run / "report" / "metrics.json").is_file() and (run / "tb").is_dir()
        saved = yaml.safe_load((run / "config.yaml").read_text())
        assert saved["train"]["seed"] == seed and saved["train"]["threads"] == 1
    table = pd.read_csv(out / "summary.csv")
    assert list(table["status"]) == ["done", "done"]
    assert table["test_sharpe"].notna().all() and table["validation_sharpe"].notna().all()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best"]["config"] == "c00" and summary["seeds"] == [0, 1]
    assert (out / "summary.png").is_file() and (out / "plan.json").is_file()
    # Resuming a finished sweep runs nothing (no Ray) and rewrites the same summary.
    status, stdout, stderr = run_alone(
        [sys.executable, "-m", "training.sweep", "--resume", str(out)],
        tmp_path / "resume-log",
        timeout=120,
        env=env,
    )
    assert status == 0, stderr[-3000:]
    assert "(2 finished already, 0 to run)" in stdout
    assert "Ray" not in stdout
