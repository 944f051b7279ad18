"""`benchmarks/learning.py`: an --out that holds results is refused; a run scores the agent and
the estimated ceiling on its tail and on fresh series, and probes the heads' use of volatility."""

import contextlib
import importlib.util
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
# The default's one rollout (ppo.n_envs * ppo.n_steps), the least PPO trains: the shortest
# benchmark run, with a validation pass every tenth of it (fewer timesteps train as much and
# validate far more often).
ONE_ROLLOUT = "2048"


def test_an_out_folder_with_results_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    results = tmp_path / "learning.json"
    results.write_text('{"kept": true}\n')
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "learning.py"),
            "--quick",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"benchmarks/learning.py: {tmp_path} already holds results (learning.json); pass another "
        "--out, --resume to finish it, or --rescore it"
    ]
    assert results.read_text() == '{"kept": true}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["learning.json"]


def _walk(seed: int, growth: float = 0.0) -> dict:
    """A finished random-walk run's result (log growth `growth` over buy-and-hold), as far as
    the report's tables read it."""
    growths = {f"growth_{k}": 0.5 for k in ("buy_and_hold", "ceiling", "oracle")}
    return {"kind": "random_walk", "seed": seed, "excess_growth": growth, "share": 0.0,
            "growth_agent": 0.5 + growth, "turnover_per_year": 1.0, "seconds": 1.0,
            **growths}  # fmt: skip


def test_the_report_holds_each_run_as_it_lands_and_a_resume_trains_only_the_rest(
    tmp_path: Path,
) -> None:
    learning = learning_module()
    path = tmp_path / "learning.json"
    header = {"command": "first", "config": "c.yaml", "overrides": ["a=1"], "seeds": [0, 1, 2],
              "configs_tried": 3}  # fmt: skip
    progress = learning.Progress(path, None, header)
    progress.plan(["random_walk 0", "random_walk 1", "random_walk 2", "real 0"])
    on_disk = json.loads(path.read_text())
    assert on_disk["pending"] == ["random_walk 0", "random_walk 1", "random_walk 2", "real 0"]
    assert on_disk["synthetic"] == [] and on_disk["failed"] == []
    progress.finished("random_walk 2", _walk(2))
    progress.finished("random_walk 0", _walk(0))
    progress.failed("real 0")
    # interrupted here: what landed is on disk, in seed order, and so is what was left
    on_disk = json.loads(path.read_text())
    assert [r["seed"] for r in on_disk["synthetic"]] == [0, 2]
    assert on_disk["pending"] == ["random_walk 1"] and on_disk["failed"] == ["real 0"]

    earlier = learning.earlier_report(tmp_path, True, "c.yaml", ["a=1"])
    resumed = learning.Progress(path, earlier, {**header, "command": "second", "seeds": [1, 3]})
    assert [key for key in ("random_walk 0", "random_walk 1", "random_walk 3", "real 0")
            if resumed.to_do(key)] == ["random_walk 1", "random_walk 3", "real 0"]  # fmt: skip
    resumed.plan(["random_walk 1", "random_walk 3", "real 0"])
    for seed in (3, 1):
        resumed.finished(f"random_walk {seed}", _walk(seed))
    resumed.finished("real 0", {"seed": 0, "sharpe": 1.0})
    final = resumed.final()
    assert [r["seed"] for r in final["synthetic"]] == [0, 1, 2, 3]
    assert final["real"] == [{"seed": 0, "sharpe": 1.0}]
    assert final["command"] == "first" and final["resumed"] == ["second"]
    assert final["seeds"] == [0, 1, 2, 3]
    assert "pending" not in final and "failed" not in final


def _stat(pid: str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command's name (state, parent, ...), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _children(pid: int) -> list[str]:
    """The processes whose parent is `pid`."""
    found = [p.name for p in Path("/proc").iterdir() if p.name.isdigit()]
    return [child for child in found if (_stat(child) or ["", ""])[1] == str(pid)]


def _running(pid: str) -> bool:
    """Whether process `pid` runs (a zombie that no parent reaped yet has ended)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def test_sigterm_keeps_the_runs_that_landed_and_ends_the_workers(tmp_path: Path) -> None:
    out = tmp_path / "out"
    command = [sys.executable, str(REPO / "benchmarks" / "learning.py"), "--kinds",
               "random_walk", "--seeds", "0", "1", "2", "--timesteps", ONE_ROLLOUT,
               "--fresh-series", "0", "--jobs", "1", "--set", "train.restarts=1",
               "--set", "train.vote=false",
               "--out", str(out)]  # fmt: skip
    benchmark = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # until the first run's result has landed
            with contextlib.suppress(OSError, ValueError):
                if json.loads((out / "learning.json").read_text())["synthetic"]:
                    break
            assert benchmark.poll() is None, benchmark.stderr.read() if benchmark.stderr else ""
            time.sleep(0.5)
        workers = _children(benchmark.pid)
        assert workers  # the pool's worker, on the second run now
        benchmark.terminate()  # SIGTERM, as `timeout` sends
        _, stderr = benchmark.communicate(timeout=60)
    finally:
        benchmark.kill()
    assert benchmark.returncode == 130
    assert stderr.strip().splitlines() == [
        f"benchmarks/learning.py: stopped; {out / 'learning.json'} holds 1 finished of 3 runs; "
        "the same command with --resume trains the other 2"
    ]
    time.sleep(1)
    assert not [pid for pid in workers if _running(pid)]
    report = json.loads((out / "learning.json").read_text())
    assert [r["seed"] for r in report["synthetic"]] == [0]
    assert report["pending"] == ["random_walk 1", "random_walk 2"]


def test_resume_refuses_a_folder_without_results_or_of_another_config(tmp_path: Path) -> None:
    learning = learning_module()
    with pytest.raises(learning.ResumeError, match="nothing to resume"):
        learning.earlier_report(tmp_path, True, "c.yaml", [])
    assert learning.earlier_report(tmp_path, False, "c.yaml", []) is None
    _report(tmp_path / "out", [_walk(0)], [], ["a=1"])
    with pytest.raises(learning.ResumeError, match=r"trained under --config configs/default.yaml"
                       r" --set a=1; --resume needs the same --config and --set"):  # fmt: skip
        learning.earlier_report(tmp_path / "out", True, "configs/default.yaml", ["a=2"])
    (tmp_path / "out" / "learning.json").write_text("{")
    with pytest.raises(learning.ResumeError, match="no benchmark results to resume"):
        learning.earlier_report(tmp_path / "out", True, "configs/default.yaml", ["a=1"])


def test_a_resume_of_a_finished_report_trains_nothing_and_keeps_every_result(
    tmp_path: Path, capsys
) -> None:
    learning = learning_module()
    config = str(REPO / "configs" / "default.yaml")
    out = tmp_path / "out"
    out.mkdir()
    report = {"command": "first", "config": config, "seeds": [0, 1], "configs_tried": 2,
              "overrides": ["train.checkpoint_every=0"], "synthetic": [_walk(0), _walk(1)],
              "real": [], "seconds": 5.0}  # fmt: skip
    (out / "learning.json").write_text(json.dumps(report))
    argv = ["--kinds", "random_walk", "--seeds", "0", "1", "--out", str(out), "--resume",
            "--config", config, "--configs-tried", "2"]  # fmt: skip
    assert learning.main(argv) == 0
    printed = capsys.readouterr().out
    assert "learning benchmark: 0 synthetic runs" in printed
    assert "(kept from its earlier commands, not run again: 2 of its runs)" in printed
    final = json.loads((out / "learning.json").read_text())
    assert final["synthetic"] == report["synthetic"] and final["command"] == "first"
    assert len(final["resumed"]) == 1 and final["seconds"] >= 5.0
    assert sorted(p.name for p in out.iterdir()) == ["learning.json"]


def test_runs_score_the_agent_the_estimated_ceiling_and_the_heads_probes(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "learning.py"),
            "--quick",
            "--kinds",
            "trend_regimes",
            "volatility_regimes",
            "--seeds",
            "0",
            "--timesteps",
            ONE_ROLLOUT,
            "--fresh-series",
            "1",
            "--jobs",
            "1",
            "--set",
            "env.volatility_target=0.3",
            "--set",
            "train.restarts=1",
            "--set",
            "train.vote=false",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    result, volatility = json.loads((tmp_path / "learning.json").read_text())["synthetic"]
    # Buy-and-hold sized like the agent: the 30% budget binds in the 48% turbulent spells only.
    sized = volatility["growth_sized_hold_fresh"][0] - volatility["growth_buy_and_hold_fresh"][0]
    assert volatility["excess_growth_sized_hold_fresh"] == pytest.approx(sized) != 0.0
    assert result["growth_sized_hold_fresh"] == result["growth_buy_and_hold_fresh"]  # 16%: unsized
    assert "sized hold, fresh, expected g" in done.stdout
    hold = result["growth_buy_and_hold"]
    assert result["excess_growth_estimated"] == pytest.approx(result["growth_estimated"] - hold)
    fresh_hold = result["growth_buy_and_hold_fresh"][0]
    assert result["excess_growth_estimated_fresh"] == pytest.approx(
        result["growth_estimated_fresh"][0] - fresh_hold
    )
    assert result["excess_growth_fresh"] == pytest.approx(
        result["growth_agent_fresh"][0] - fresh_hold
    )
    # Expected growth given the exposures held, on the same fresh series: a share of its own.
    expected = {rule: result[f"expected_{rule}_fresh"][0] for rule in ("agent", "buy_and_hold")}
    assert result["excess_growth_expected_fresh"] == pytest.approx(
        expected["agent"] - expected["buy_and_hold"]
    )
    edge = result["expected_ceiling_fresh"][0] - expected["buy_and_hold"]
    if edge > 0:
        assert result["share_expected_fresh"] == pytest.approx(
            result["excess_growth_expected_fresh"] / edge
        )
    assert "share, fresh, expected g" in done.stdout
    # Fitted to series 0's training bars: two trends of opposite sign, neither the true +-0.0015.
    down, up = result["estimated_params"]["drift"]
    assert down < 0 < up and (down, up) != (-0.0015, 0.0015)
    assert "est. ceiling, fresh" in done.stdout
    # benchmarks/statistician.py scores the same statistician with no agent: the same figures.
    from training.config import DEFAULT_CONFIG_PATH, load_config

    scoring_module()  # puts benchmarks/ on the path
    statistician = importlib.import_module("statistician")
    cfg = load_config(DEFAULT_CONFIG_PATH, ["env.volatility_target=0.3"])
    figures = statistician.seed_figures("trend_regimes", 0, 1, cfg)
    assert figures.statistician == result["share_estimated_fresh"]
    assert figures.holding == result["share_sized_hold_fresh"]  # what the run's sized hold took
    # The probe: the default's leverage levels are 0.5 and 1x; one figure per regime.
    for k in (0, 1):
        assert 0.5 <= volatility[f"probe_leverage_state{k}"] <= 1.0
        assert 0.0 <= volatility[f"probe_flat_state{k}"] <= 1.0
    assert "probe_leverage_state0" not in result  # trend: no volatility levels to probe
    assert "volatility probe" in done.stdout
    # The direction probe, on the trend run only: a share and an AUC, both in [0, 1].
    assert 0.0 <= result["probe_long_share"] <= 1.0 and 0.0 <= result["probe_long_auc"] <= 1.0
    assert "probe_long_share" not in volatility
    assert "direction probe" in done.stdout
    # Which way the training bars went, for each run: series 0's own, in the per-run table.
    scoring = scoring_module()
    series, split = scoring.synthetic_series("trend_regimes", 0)
    growth = scoring.training_bars_growth(series.market, split.splits[0].train)
    assert result["growth_training_bars"] == growth
    assert "training bars: g_bh" in done.stdout


def test_the_references_trade_only_at_the_leverage_the_agent_is_deployed_at() -> None:
    """With `policy.deployed_leverage` the agent's saved policy trades at that level alone, so
    the ceiling it is measured against is tuned over that level, not over the levels its head
    explored in training; without it, over the env's."""
    from training.config import DEFAULT_CONFIG_PATH, load_config

    scoring = scoring_module()
    both, deployed, one = (
        load_config(DEFAULT_CONFIG_PATH, sets)
        for sets in (
            ["env.leverage_levels=[0.5,1]"],
            ["env.leverage_levels=[0.5,1]", "policy.deployed_leverage=1"],
            ["env.leverage_levels=[1]"],
        )
    )
    assert scoring.reference_env(both) is both.env
    assert scoring.reference_env(deployed) == one.env
    series, split = scoring.synthetic_series("turbulence_regimes", 0)
    at_one = scoring.tail_references(series, scoring.reference_env(deployed), split.splits[0])
    assert at_one == scoring.tail_references(series, one.env, split.splits[0])
    with_half = scoring.tail_references(series, both.env, split.splits[0])
    assert with_half["ceiling"] != at_one["ceiling"]  # it holds 0.5x in turbulent spells


def report_module():
    """benchmarks/learning_report.py, the benchmark's tables, as a module."""
    learning_module()  # puts benchmarks/ on the path
    import learning_report

    return learning_report


def scoring_module():
    """benchmarks/learning_scoring.py, how the benchmark scores a run, as a module."""
    learning_module()  # puts benchmarks/ on the path
    import learning_scoring

    return learning_scoring


def learning_module():
    """benchmarks/learning.py as a module (benchmarks/ is not a package: its scripts import
    their sibling modules from their own folder, as when run)."""
    if str(REPO / "benchmarks") not in sys.path:
        sys.path.insert(0, str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location("learning", REPO / "benchmarks" / "learning.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_shorter_run_keeps_the_configs_validation_schedule(tmp_path: Path, capsys) -> None:
    learning = learning_module()
    default = str(REPO / "configs" / "default.yaml")  # passes every 15k of 150k, from 60k on
    assert learning.validation_schedule(default, [], 40_000) == [
        "train.total_timesteps=40000",
        "train.eval_every=4000",
        "train.eval_start=16000",
    ]
    started = learning.validation_schedule(default, ["train.eval_start=0"], 40_000)
    assert started[-1] == "train.eval_start=0"
    wrong = ["--quick", "--set", "train.eval_start=-1", "--out", str(tmp_path)]
    assert learning.main(wrong) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("benchmarks/learning.py: ") and "train.eval_start" in line


def test_the_run_table_shows_which_way_each_runs_training_bars_went() -> None:
    scoring = scoring_module()
    report = report_module()
    series, split = scoring.synthetic_series("trend_regimes", 16)
    train, validation = split.splits[0].train, split.splits[0].validation
    close = series.market.close  # [7000] training, validation, tail in that order
    growth = scoring.training_bars_growth(series.market, train)
    # First to last close of the training bars: the sum of their close-to-close log returns.
    assert growth == pytest.approx(np.diff(np.log(close[train.start : train.stop])).sum())
    assert train.stop <= validation.start  # nothing after the training bars is read
    assert growth < -1.5  # the trend series whose training bars fell by 86% (RESULTS, C57)
    fresh = {"share_fresh": 0.72, "share_estimated_fresh": math.nan}  # no estimated ceiling
    contest = scoring.contest_fields({"kept": "hold", "evidence_p_value": 0.4567})
    runs = [
        {"kind": "trend_regimes", "seed": 16, "growth_training_bars": growth, **fresh, **contest},
        {"kind": "random_walk", "seed": 3},  # an older report: none of the figures, no contest
    ]
    header, _, trend, walk = report.run_table(runs).splitlines()
    assert "training bars: g_bh" in header and "extreme moves p" in header
    # The momentum's p read, the other tests' not (a contest from before them)
    assert trend.split()[:8] == ["trend_regimes", "16", f"{growth:+.2f}", "0.457", "nan", "nan",
                                 "hold", "nan"]  # fmt: skip
    assert trend.split()[-2:] == ["+0.72", "nan"]
    assert walk.split()[2:] == ["nan"] * 4 + ["-"] + ["nan"] * 4
    assert scoring.contest_fields(None) == {
        "contender_kept": None, "evidence_momentum_p": None, "evidence_tail_p": None,
        "evidence_persistence_p": None, "evidence_halves_p": None,
        "evidence_momentum_reversal_p": None,
    }  # fmt: skip


def test_the_targets_table_tells_the_learners_misses_from_those_the_bars_mislead() -> None:
    report = report_module()
    trend = [  # (seed, agent's share, estimated ceiling's share)
        (0, 0.7, 0.9),
        (1, 0.1, 0.8),  # the bars allow 0.8: the learner's own miss
        (2, -0.2, -0.2),  # the fitted filter misses too: the bars mislead
        (3, 0.66, 0.1),  # the agent clears the target where the filter does not
        (4, math.nan, 0.5),  # no edge to share on this seed's fresh series: left out
    ]
    runs = [
        {"kind": "trend_regimes", "seed": s, "share_fresh": a, "share_estimated_fresh": e}
        for s, a, e in trend
    ] + [
        {"kind": "random_walk", "seed": 0, "excess_growth": 0.0, "turnover_per_year": 30.0},
        {"kind": "random_walk", "seed": 1, "excess_growth": -0.4, "turnover_per_year": 2.0},
        {"kind": "crash_risk", "seed": 0, "share_fresh": -3.0},  # no target
    ]
    _, _, trend_row, walk_row, turnover_row = report.targets_table(runs).splitlines()
    cells = [c.strip() for c in trend_row.split("  ") if c.strip()]
    assert cells == ["trend_regimes", "share_fresh", "+0.38 (>= +0.60)", "-0.200 (>= +0.30)",
                     "1", "2"]  # fmt: skip
    # A report without the estimated ceiling's figure counts every miss as the learner's.
    cells = [c.strip() for c in walk_row.split("  ") if c.strip()]
    assert cells[-2:] == ["1", "none"] and cells[2] == "-0.20 (>= -0.05)"
    cells = [c.strip() for c in turnover_row.split("  ") if c.strip()]
    assert cells == ["random_walk", "turnover_per_year", "-", "30.0 (<= 25)", "0", "-"]


def test_blocks_of_ten_seeds_show_each_blocks_median_and_misses() -> None:
    report = report_module()
    runs = [  # trend seeds 0-9 all at 0.8 but seed 3; seeds 10-12 at 0.1, 0.5, 0.9
        {"kind": "trend_regimes", "seed": s, "share_fresh": 0.0 if s == 3 else 0.8}
        for s in range(10)
    ] + [
        {"kind": "trend_regimes", "seed": 10 + k, "share_fresh": v}
        for k, v in enumerate((0.1, 0.5, 0.9))
    ] + [
        {"kind": "random_walk", "seed": 4, "excess_growth": -0.2},  # one block only: no "all"
        {"kind": "trend_regimes", "seed": 13, "share_fresh": math.nan},  # no edge: left out
    ]  # fmt: skip
    rows = [[c.strip() for c in line.split("  ") if c.strip()]
            for line in report.blocks_table(runs).splitlines()[2:]]  # fmt: skip
    assert rows == [
        ["trend_regimes", "0-9", "10", "+0.80", "+0.000", "1: 3"],
        ["trend_regimes", "10-19", "3", "+0.50", "+0.100", "1: 10"],
        ["trend_regimes", "all", "13", "+0.80", "+0.000", "2: 3 10"],
        ["random_walk", "0-9", "1", "-0.20", "-0.200", "1: 4"],
    ]


def test_five_seeds_meet_every_target_with_the_product_of_each_kinds_chance() -> None:
    report = report_module()
    runs = [  # trend: 1 of 4 below 0.3 (the ceiling: none of the 3 with its figure)
        {"kind": "trend_regimes", "seed": s, "share_fresh": a, "share_estimated_fresh": e}
        for s, a, e in [(0, 0.8, 0.9), (1, 0.1, 0.9), (2, 0.7, math.nan), (3, 0.9, 0.4)]
    ] + [  # random walks: one below -0.05, one above 25 trades a year (the agent's only)
        {"kind": "random_walk", "seed": s, "excess_growth": g, "turnover_per_year": t,
         "excess_growth_estimated": e}
        for s, g, t, e in [(0, 0.0, 2.0, -0.3), (1, -0.2, 2.0, 0.0), (2, 0.0, 30.0, 0.0),
                           (3, 0.0, 1.0, 0.0), (4, 0.0, 1.0, 0.0)]
    ] + [
        {"kind": "trend_regimes", "seed": 4, "share_fresh": math.nan},  # no edge: left out
        {"kind": "crash_risk", "seed": 0, "share_fresh": -3.0},  # no target
    ]  # fmt: skip
    rows = [[c.strip() for c in line.split("  ") if c.strip()]
            for line in report.five_seeds_table(runs).splitlines()[2:]]  # fmt: skip
    trend, walk = 0.75**5, 0.6**5
    assert rows[:2] == [
        ["trend_regimes", "25.0% of 4", f"{trend:.3f}", "0.0% of 3, 1.000"],
        ["random_walk", "40.0% of 5", f"{walk:.3f}", f"20.0% of 5, {0.8**5:.3f}"],
    ]
    low, high = report.joint_chance_interval([(1, 4), (2, 5)])
    low_estimated, high_estimated = report.joint_chance_interval([(0, 3), (1, 5)])
    assert rows[2] == [
        "every kind",
        "-",
        f"{trend * walk:.3f} ({low:.2f}-{high:.2f})",
        f"{0.8**5:.3f} ({low_estimated:.2f}-{high_estimated:.2f})",
    ]
    assert report.five_seeds_table(runs[-1:]) == "no kind with a worst-seed target"


def test_the_joint_chance_interval_is_the_product_of_each_kinds_posterior() -> None:
    report = report_module()
    # One kind, 50 misses of 200: the Jeffreys posterior of the rate is near normal, 0.25 +-
    # 0.0306, and (1 - rate)^5 is monotone, so its 5% and 95% points are near (1 - 0.25 -+ 1.645
    # x 0.0306)^5 = 0.168 and 0.328.
    low, high = report.joint_chance_interval([(50, 200)])
    assert abs(low - 0.168) < 0.01 and abs(high - 0.328) < 0.01
    # Two kinds multiply: the interval of both lies below each one's upper end.
    both = report.joint_chance_interval([(50, 200), (10, 200)])
    alone = report.joint_chance_interval([(10, 200)])
    assert both[1] < min(high, alone[1]) and both[0] < low
    # No miss in 40 seeds still leaves the rate uncertain: the interval ends below 1.
    assert report.joint_chance_interval([(0, 40)])[1] < 1.0
    # More seeds at the same rate narrow it; the same counts give the same interval.
    wide, narrow = (
        report.joint_chance_interval([(5, 50)]),
        report.joint_chance_interval([(50, 500)]),
    )
    assert narrow[1] - narrow[0] < (wide[1] - wide[0]) / 2
    assert report.joint_chance_interval([(5, 50)]) == wide
    assert report.joint_chance_interval([(10, 200), (50, 200)]) == both  # order does not matter


def test_rank_auc_counts_the_pairs_a_positive_wins_and_half_the_ties() -> None:
    scoring = scoring_module()
    # Positives 3 and 1 against negatives 2, 1 and 0: 3 wins all three pairs, 1 wins one
    # (against 0) and ties one (1): (3 + 1 + 0.5) / 6.
    auc = scoring.rank_auc([3.0, 2.0, 1.0, 1.0, 0.0], [True, False, True, False, False])
    assert auc == pytest.approx(4.5 / 6)
    assert math.isnan(scoring.rank_auc([1.0, 2.0], [True, True]))  # no negative
    assert scoring.rank_auc([0.0, 1.0], [False, True]) == 1.0
    assert scoring.rank_auc([0.0, 1.0], [True, False]) == 0.0


def test_seed_lists_write_three_or_more_consecutive_seeds_as_a_range() -> None:
    report = report_module()
    seeds = [9, 0, 1, 2, 4, 5, 7, 8, 10, 11, 30]
    assert report.seed_list([{"seed": s} for s in seeds]) == "0-2 4 5 7-11 30"
    assert report.seed_list([]) == "none"


def _report(out: Path, runs: list[dict], real: list[dict], overrides: list[str]) -> Path:
    out.mkdir()
    report = {"config": "configs/default.yaml", "overrides": overrides, "synthetic": runs,
              "real": real, "configs_tried": 5}  # fmt: skip
    (out / "learning.json").write_text(json.dumps(report))
    return out


def test_combine_pools_reports_the_last_holding_a_run_wins_and_nothing_is_written(
    tmp_path: Path, capsys
) -> None:
    learning = learning_module()

    def real(seed: int, sharpe: float) -> dict:
        return {"seed": seed, "sharpe": sharpe, "sharpe_buy_and_hold": 1.0}

    first = _report(tmp_path / "a", [_walk(s, -0.3) for s in range(12)], [real(0, 0.1)], ["x=1"])
    second = _report(tmp_path / "b", [_walk(1), _walk(11)], [real(0, 1.5)], ["y=2"])
    unfinished = json.loads((second / "learning.json").read_text())
    unfinished["pending"] = ["random_walk 12"]  # an interrupted benchmark's report pools too
    (second / "learning.json").write_text(json.dumps(unfinished))
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert learning.main(["--combine", str(first), str(second)]) == 0
    printed = capsys.readouterr().out
    assert f"{first / 'learning.json'}: config configs/default.yaml x=1" in printed
    assert "    random_walk: seeds 0 2-10\n" in printed  # 1 and 11 come from the later report
    assert (
        f"{second / 'learning.json'}: config configs/default.yaml y=2 (unfinished: 1 of its"
        in printed
    )
    assert "    random_walk: seeds 1 11\n    real: seeds 0\n" in printed
    blocks = printed.split("every block of 10 seeds")[1]
    assert "random_walk  0-9    10  -0.30   -0.300  9: 0 2-9" in blocks
    assert "random_walk  10-19  2   -0.15   -0.300  1: 10" in blocks
    assert "random_walk  all    12  -0.30   -0.300  10: 0 2-10" in blocks
    real_row = printed.split("(5 configuration(s) tried):")[1].splitlines()[3]
    assert real_row.split()[:4] == ["0", "1.50", "/", "1.50"]
    assert "per run" not in printed  # each report's own output has those tables
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_combine_names_a_report_it_cannot_read_in_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "learning.json").write_text('{"real": []}')
    for out, reason in ((broken, "missing key 'synthetic'"), (tmp_path / "absent", "No such")):
        done = subprocess.run(
            [sys.executable, str(REPO / "benchmarks" / "learning.py"), "--combine", str(out)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2 and done.stdout == ""
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"benchmarks/learning.py: {out / 'learning.json'}: no benchmark")
        assert reason in line


def test_the_folds_table_shows_a_segment_the_agent_stood_aside_in() -> None:
    report = report_module()
    test = {"first": "2004-01-15", "last": "2009-01-23", "dates": 1265}

    def fold(exposure: float, sharpe: float, kept: str | None) -> dict:
        return {"fold": 1, "test": test, "exposure_pct": exposure, "sharpe": sharpe,
                "sharpe_sized_hold": 0.4, "contender_kept": kept}  # fmt: skip

    seeds = [
        {"folds": [fold(13.0, 0.9, "incumbent")]},
        {"folds": [fold(11.0, 0.7, "incumbent")]},
        {"folds": [fold(100.0, 0.4, "hold")]},
        {},  # an older report: no folds
    ]
    header, _, row = report.folds_table(seeds).splitlines()
    assert "exposure % med / worst" in header
    cells = [cell.strip() for cell in row.split("  ") if cell.strip()]
    assert cells == ["1", "2004-01-15 .. 2009-01-23", "13 / 11", "0.70 / 0.40", "0.40",
                     "hold 1, incumbent 2"]  # fmt: skip


def test_the_real_table_sets_the_agents_drawdown_beside_the_baselines() -> None:
    report = report_module()
    figures = {"sharpe": 1.2, "sharpe_buy_and_hold": 1.09, "sharpe_minus_buy_and_hold": 0.11,
               "sharpe_sized_hold": 1.22, "turnover_per_year": 1.6, "fees_pct_per_year": 0.05,
               "noise_probability": 1.0}  # fmt: skip
    seeds = [
        {"seed": 0, **figures, "max_drawdown_pct": 42.9, "max_drawdown_pct_buy_and_hold": 51.4,
         "max_drawdown_pct_sized_hold": 40.3},
        {"seed": 1, **figures, "max_drawdown_pct": 44.8, "max_drawdown_pct_buy_and_hold": 51.4,
         "max_drawdown_pct_sized_hold": 40.3},
        {"seed": 2, **figures, "max_drawdown_pct": 27.7},  # older: no baselines' drawdowns
    ]  # fmt: skip
    header, _, row = report.real_table(seeds).splitlines()
    columns = [cell.strip() for cell in header.split("  ") if cell.strip()]
    cells = [cell.strip() for cell in row.split("  ") if cell.strip()]
    by_column = dict(zip(columns, cells, strict=True))
    assert by_column["max dd %"] == "42.9 / 44.8"  # worst: the deepest
    assert by_column["b&h max dd %"] == "51.4 / 51.4"
    assert by_column["sized hold max dd %"] == "40.3 / 40.3"


def _weights(path: Path) -> tuple[int, dict[str, bytes]]:
    """A model file's timestep count and policy tensors (a checkpoint adds its optimizer's state,
    left out here)."""
    from training.run.model_file import read_model_file

    saved = read_model_file(path)
    return saved.num_timesteps, {name: t.numpy().tobytes() for name, t in saved.policy.items()}


def _benchmark(*args: str) -> subprocess.CompletedProcess:
    """`benchmarks/learning.py` with `args`, run as a user runs it (from the repository)."""
    command = [sys.executable, str(REPO / "benchmarks" / "learning.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)


def _reselect(capsys, *args: str) -> tuple[int, str]:
    """`benchmarks/learning.py --reselect` with `args` (`--jobs 1`: in this process, no worker
    to start), called as its command line calls it: the exit code and what it wrote to
    stderr. This process's torch threads are left as they were."""
    import torch

    threads = torch.get_num_threads()
    capsys.readouterr()
    try:
        code = learning_module().main(["--reselect", *args, "--jobs", "1"])
    finally:
        torch.set_num_threads(threads)
    return code, capsys.readouterr().err


def test_reselect_keeps_what_other_selection_keys_would_have_kept(tmp_path: Path, capsys) -> None:
    trained = tmp_path / "trained"

    def reselected(out: str, *overrides: str) -> tuple[dict, dict]:
        """`trained` reselected under `overrides` into `tmp_path / out` (no fresh series: the
        contest is what is looked at): its one synthetic result and the contest it held."""
        sets = [arg for item in overrides for arg in ("--set", item)]
        code, stderr = _reselect(capsys, str(trained), *sets, "--fresh-series", "0",
                                 "--out", str(tmp_path / out))  # fmt: skip
        assert code == 0, stderr
        (result,) = json.loads((tmp_path / out / "learning.json").read_text())["synthetic"]
        return result, json.loads((Path(result["run"]) / "challenger.json").read_text())

    done = _benchmark("--quick", "--kinds", "random_walk", "--seeds", "0",
                      "--timesteps", ONE_ROLLOUT, "--fresh-series", "1", "--jobs", "1",
                      "--out", str(trained), "--set", "train.checkpoint_every=204",
                      "--set", "train.restarts=1", "--set", "train.vote=false")  # fmt: skip
    # (eval_every is a tenth of the run: a checkpoint at every validation pass; an incumbent of
    # one training, whose checkpoints are its own)
    assert done.returncode == 0, done.stderr
    (result,) = json.loads((trained / "learning.json").read_text())["synthetic"]

    # Under the keys it trained with, reselecting gives the run's own results back, the scores
    # on a fresh series too.
    again = tmp_path / "again"
    code, stderr = _reselect(capsys, str(trained), "--fresh-series", "1", "--out", str(again))
    assert code == 0, stderr
    (same,) = json.loads((again / "learning.json").read_text())["synthetic"]
    assert {k: v for k, v in same.items() if k != "run"} == {
        k: v for k, v in result.items() if k != "run"
    }

    # By growth: every contender's history rescored, the best pass's checkpoint as its model.
    by_growth, contest = reselected("growth", "train.select_by=growth")
    run = Path(by_growth["run"])
    history = json.loads((run / "incumbent" / "validation.json").read_text())
    scores = [math.log1p(entry["cagr_pct"] / 100) for entry in history]
    assert [entry["score"] for entry in history] == pytest.approx(scores)
    best = history[scores.index(max(scores))]["timesteps"]
    source = Path(result["run"]) / "incumbent" / "checkpoints"
    kept_model = run / "incumbent" / "best_model.safetensors"
    assert _weights(kept_model) == _weights(source / f"checkpoint_{best}_steps.safetensors")
    assert contest["select_by"] == "growth" and contest["kept"] == by_growth["contender_kept"]

    # A margin alone moves no contender's best pass: the run's own best models, no checkpoint.
    for contender in ("incumbent", "challenger"):
        shutil.rmtree(Path(result["run"]) / contender / "checkpoints")
    kept_first, contest = reselected(
        "margins", "train.hold_margin=1000", "train.challenger_margin=1000",
        "train.hold_against=median", "train.hold_evidence=null", "train.hold_evidence_tail=null",
        "train.policy_exposure_matched=false",
    )  # fmt: skip
    assert kept_first["contender_kept"] == "incumbent"  # nothing beats it by 1000 standard errors
    assert contest["hold_against"] == "median"
    for contender in ("incumbent", "challenger", "hold"):
        kept = Path(kept_first["run"]) / contender / "best_model.safetensors"
        own = Path(result["run"]) / contender / "best_model.safetensors"
        assert _weights(kept) == _weights(own)
    adopted = Path(kept_first["run"]) / "best_model.safetensors"
    assert _weights(adopted) == _weights(
        Path(result["run"]) / "incumbent" / "best_model.safetensors"
    )

    # Evidence the training bars cannot show: the challenger cannot win, whatever its margin.
    kept_gated, contest = reselected(
        "gated", "train.challenger_margin=0", "train.hold_margin=1000",
        "train.challenger_evidence=1e-9", "train.hold_evidence=null",
        "train.hold_evidence_tail=null", "train.policy_exposure_matched=false",
    )  # fmt: skip
    assert kept_gated["contender_kept"] == "incumbent"
    assert contest["evidence_level"] == 1e-9 and 1e-9 <= contest["evidence_p_value"] <= 1

    # Holding as the prior where the bars show nothing: the policy cannot beat it by 1000.
    kept_prior, contest = reselected(
        "prior", "train.hold_evidence=1e-9", "train.policy_margin=1000",
    )  # fmt: skip
    assert kept_prior["contender_kept"] == "hold"
    assert (
        contest["hold_evidence_level"] == 1e-9 and contest["policy_margin_standard_errors"] == 1000
    )
    assert 1e-9 <= contest["evidence_p_value"] <= 1

    # Only the keys that change what a trained run keeps, with values the config takes; a new
    # folder each time. Each refusal is one line.
    code, stderr = _reselect(capsys, str(trained), "--set", "train.hold_margin=-1",
                             "--out", str(tmp_path / "z"))  # fmt: skip
    assert code == 2 and "train.hold_margin: expected a number >= 0" in stderr
    code, stderr = _reselect(capsys, str(trained), "--set", "ppo.gamma=0.9",
                             "--out", str(tmp_path / "x"))  # fmt: skip
    assert code == 2 and len(stderr.strip().splitlines()) == 1
    assert "random_walk seed 0: no run of the reports given trained its incumbent" in stderr
    assert not (tmp_path / "x").exists()
    code, stderr = _reselect(capsys, str(trained), "--out", str(tmp_path / "growth"))
    assert code == 2 and "already exists" in stderr


def test_reselect_takes_each_contender_from_the_run_that_trained_it(tmp_path: Path, capsys) -> None:
    """A contest of contenders two runs trained: the incumbent on drift-free copies (and the
    hold contender of that config) from one, the challenger from the other."""
    tiny = ("--quick", "--kinds", "random_walk", "--seeds", "0", "--timesteps", ONE_ROLLOUT,
            "--fresh-series", "0", "--jobs", "1", "--set", "train.restarts=1",
            "--set", "train.vote=false")  # fmt: skip
    plain, drift_free = tmp_path / "plain", tmp_path / "drift_free"
    done = _benchmark(*tiny, "--out", str(plain))
    assert done.returncode == 0, done.stderr
    done = _benchmark(*tiny, "--set", "train.resample_detrend=1", "--set", "train.challenger=[]",
                      "--out", str(drift_free))  # fmt: skip
    assert done.returncode == 0, done.stderr
    mixed = (str(plain), "--set", "train.resample_detrend=1", "--set",
             'train.challenger=["train.direction_outcomes=0.2", "train.resample_detrend=0"]',
             "--fresh-series", "0")  # fmt: skip

    # Neither run alone trained both: the incumbent is nowhere in `plain`, and nothing is written.
    code, stderr = _reselect(capsys, *mixed, "--out", str(tmp_path / "alone"))
    assert code == 2 and len(stderr.strip().splitlines()) == 1
    assert "trained its incumbent as this config does" in stderr and "--from" in stderr
    assert not (tmp_path / "alone").exists()

    code, stderr = _reselect(capsys, *mixed, "--from", str(drift_free),
                             "--out", str(tmp_path / "mixed"))  # fmt: skip
    assert code == 0, stderr
    (result,) = json.loads((tmp_path / "mixed" / "learning.json").read_text())["synthetic"]
    run = Path(result["run"])
    (source,) = json.loads((plain / "learning.json").read_text())["synthetic"]
    (other,) = json.loads((drift_free / "learning.json").read_text())["synthetic"]
    takes = {"incumbent": Path(other["run"]), "hold": Path(other["run"]),
             "challenger": Path(source["run"])}  # fmt: skip
    for contender, origin in takes.items():
        kept = run / contender / "best_model.safetensors"
        assert _weights(kept) == _weights(origin / contender / "best_model.safetensors")
        written = yaml.safe_load((run / contender / "config.yaml").read_text())
        assert written["train"]["resample_detrend"] == (0.0 if contender == "challenger" else 1.0)
    contest = json.loads((run / "challenger.json").read_text())
    assert contest["kept"] == result["contender_kept"]
    assert [row["contender"] for row in contest["contenders"]] == [
        "incumbent",
        "challenger",
        "hold",
    ]

    # The contenders swapped: the incumbent trained as `plain`'s challenger and the challenger as
    # its incumbent, from `plain` alone. The hold contender, built and never trained, is taken
    # from `plain` though the incumbent's training keys changed.
    swap = ("--set", "train.direction_outcomes=0.2", "--set",
            'train.challenger=["train.direction_outcomes=0"]')  # fmt: skip
    code, stderr = _reselect(capsys, str(plain), *swap, "--fresh-series", "0",
                             "--out", str(tmp_path / "swapped"))  # fmt: skip
    assert code == 0, stderr
    (result,) = json.loads((tmp_path / "swapped" / "learning.json").read_text())["synthetic"]
    run, origin = Path(result["run"]), Path(source["run"])
    takes = {"incumbent": "challenger", "challenger": "incumbent", "hold": "hold"}
    for contender, taken in takes.items():
        kept = _weights(run / contender / "final_model.safetensors")
        assert kept == _weights(origin / taken / "final_model.safetensors")


def test_reselect_holds_each_walk_forward_fold_again_without_training(
    tmp_path: Path, capsys
) -> None:
    trained = tmp_path / "trained"
    done = _benchmark("--real-only", "--real-seeds", "0", "--folds", "2",
                      "--timesteps", ONE_ROLLOUT, "--jobs", "1", "--out", str(trained),
                      "--set", "train.restarts=1", "--set", "train.vote=false",
                      "--set", "data.path=data/gymanytrading_GOOGL_daily.csv")  # fmt: skip
    # (one instrument, an incumbent of one training; a restarted one is resumed as finished in
    # test_reselect_reads_a_restarted_incumbent_as_fewer_restarts)
    assert done.returncode == 0, done.stderr
    (walk,) = json.loads((trained / "learning.json").read_text())["real"]

    # Under the config it walked forward with, the same folds kept and the same figures.
    code, stderr = _reselect(capsys, str(trained), "--out", str(tmp_path / "again"))
    assert code == 0, stderr
    (same,) = json.loads((tmp_path / "again" / "learning.json").read_text())["real"]
    assert {k: v for k, v in same.items() if k not in ("run", "seconds")} == {
        k: v for k, v in walk.items() if k not in ("run", "seconds")
    }

    # Nothing beats the incumbent by 1000 standard errors: every fold keeps it and trades it.
    code, stderr = _reselect(capsys, str(trained), "--set", "train.challenger_margin=1000",
                             "--set", "train.hold_evidence=null",
                             "--set", "train.hold_evidence_tail=null",
                             "--set", "train.policy_exposure_matched=false",
                             "--set", "train.hold_margin=1000",
                             "--out", str(tmp_path / "incumbent"))  # fmt: skip
    assert code == 0, stderr
    (kept,) = json.loads((tmp_path / "incumbent" / "learning.json").read_text())["real"]
    assert [fold["contender_kept"] for fold in kept["folds"]] == ["incumbent", "incumbent"]
    for fold in ("fold_1", "fold_2"):
        adopted = Path(kept["run"]) / fold / "best_model.safetensors"
        own = Path(walk["run"]) / fold / "incumbent" / "best_model.safetensors"
        assert _weights(adopted) == _weights(own)

    # A walk-forward without a contest would train: refused in one line, nothing written.
    no_hold = (  # holding's evidence rules need a hold contender, the reversal level and the
        # tests' bootstraps a contest
        "train.evidence_reversal=null",
        "train.persistence_null=normal",
        "train.momentum_null=normal",
        "train.hold_evidence=null",
        "train.hold_evidence_tail=null",
        "train.policy_exposure_matched=false",
        "train.hold_unless_evidence=null",
        "train.hold_margin=null",
    )
    done = _benchmark("--reselect", str(trained), "--set", "train.challenger=[]",
                      *(arg for key in no_hold for arg in ("--set", key)),
                      "--out", str(tmp_path / "plain"))  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr  # the command line's refusal
    assert "real seed 0: a walk-forward is held again only under a config with a contest" in (
        done.stderr
    )
    assert not (tmp_path / "plain").exists()


def test_reselect_reads_a_restarted_incumbent_as_fewer_restarts(tmp_path: Path, capsys) -> None:
    """A contest whose incumbent trained from three seeds: under one training, the incumbent is
    its restart 1 (the incumbent one training makes); under two, the better of its first two;
    under three, the restart the run kept. Each copy resumes as a finished run (as a
    walk-forward's folds are held again), training nothing."""
    from training.config import load_config
    from training.run.folder import RunDir
    from training.run.restarts import kept_restart
    from training.train import main, train

    run = tmp_path / "run"
    restarted = ["train.restarts=3", "train.hold_margin=0",
                 'train.challenger=["ppo.learning_rate=3e-3"]']  # fmt: skip
    args = ["--config", "configs/smoke.yaml", "--run-dir", str(run)]
    assert main([*args, *(a for key in restarted for a in ("--set", key))]) == 0
    learning_module()  # puts benchmarks/ on the path
    import learning_reselect
    import learning_scoring

    incumbent = run / "incumbent"
    choice = json.loads((incumbent / "restarts.json").read_text())
    for restarts in (1, 2, 3):
        kept = kept_restart(choice["restarts"][:restarts])["restart"]
        assert restarts < 3 or kept == choice["kept"]
        cfg = load_config(run / "config.yaml", [f"train.restarts={restarts}"])
        plan = learning_reselect._reselect_plan(cfg, "smoke", [str(run)])
        assert plan["incumbent"] == str(incumbent / "restart_1" if restarts == 1 else incumbent)
        assert plan["challenger"] == str(run / "challenger")
        copy = RunDir(tmp_path / f"restarts_{restarts}")
        learning_reselect._take_contenders(cfg, RunDir(run), copy, plan)
        best = copy.contender("incumbent").best_model
        assert _weights(best) == _weights(incumbent / f"restart_{kept}" / "best_model.safetensors")
        assert learning_scoring.restart_kept(copy) == kept  # the result's figure
        if restarts == 1:
            continue
        copied = json.loads(copy.contender("incumbent").restart_choice.read_text())
        assert copied["kept"] == kept and len(copied["restarts"]) == restarts
        capsys.readouterr()
        train(cfg, copy, resume=True)
        shown = capsys.readouterr().out
        assert "incumbent: trained already," in shown and "challenger: trained already," in shown
        assert not list(copy.root.rglob("checkpoints"))
    assert (
        json.loads(copy.contest.read_text())["kept"]
        == json.loads((run / "challenger.json").read_text())["kept"]
    )  # under the run's own three restarts, its own contest
    # The restarts were chosen between by the run's own score: another is refused in one line
    cfg = load_config(run / "config.yaml", ["train.select_by=growth"])
    plan = learning_reselect._reselect_plan(cfg, "smoke", [str(run)])
    with pytest.raises(
        learning_reselect.ReselectError, match=r"chosen between by train\.select_by"
    ):
        learning_reselect._take_contenders(cfg, RunDir(run), RunDir(tmp_path / "growth"), plan)


def test_vote_scores_the_vote_of_a_runs_restarts_and_challenger_where_a_policy_was_kept(
    tmp_path: Path, capsys
) -> None:
    """`--vote OUT --from TRAINED`: where OUT's contest kept the incumbent, the result's tail
    and fresh-series figures become those of the vote of TRAINED's restarts and challenger (its
    tail record written beside it, the kept policy's probes dropped); where it kept holding, or
    a contender `--vote-kept` leaves out, the result is copied as it is. Runs without restarts
    are refused in one line, before anything is written."""
    import pandas as pd
    import torch

    from training.evaluation.backtest import evaluation_env
    from training.evaluation.metrics import record_metrics
    from training.evaluation.vote import Vote, record_trained
    from training.run.folder import load_model
    from training.train import main

    run = tmp_path / "run"
    args = ["--config", "configs/smoke.yaml", "--run-dir", str(run)]
    sets = ["train.restarts=2", 'train.challenger=["ppo.learning_rate=3e-3"]']
    assert main([*args, *(a for key in sets for a in ("--set", key))]) == 0
    learning = learning_module()
    import learning_scoring

    kept_policy = {"total_return_pct": 50.0, "sharpe": 1.0, "turnover_per_year": 99.0,
                   "fees_pct_per_year": 0.1, "average_leverage": 1.0}  # fmt: skip

    def result(seed: int, kept: str) -> dict:
        """A result as the benchmark writes one: the kept policy's tail figures, a probe."""
        return {"kind": "trend_regimes", "seed": seed, "run": str(run), "contender_kept": kept,
                "growth_buy_and_hold": 0.1, "growth_ceiling": 0.5, "growth_oracle": 0.9,
                "probe_long_auc": 0.5,
                **learning_scoring.tail_figures(kept_policy, 0.1, 0.5)}  # fmt: skip

    out = tmp_path / "contests"
    report = {"synthetic": [result(1, "hold"), result(2, "challenger"), result(0, "incumbent")],
              "real": [], "overrides": [], "config": "configs/smoke.yaml"}  # fmt: skip
    out.mkdir()
    (out / "learning.json").write_text(json.dumps(report))
    threads = torch.get_num_threads()

    def vote(*extra: str) -> tuple[int, str]:
        capsys.readouterr()
        try:
            code = learning.main(["--vote", str(out), "--jobs", "1", *extra])
        finally:
            torch.set_num_threads(threads)
        return code, capsys.readouterr().err

    code, err = vote("--out", str(tmp_path / "voted"), "--fresh-series", "1",
                     "--vote-kept", "incumbent")  # fmt: skip
    assert code == 0, err
    held, challenger, voted = json.loads((tmp_path / "voted" / "learning.json").read_text())[
        "synthetic"
    ]
    assert held == report["synthetic"][0] and challenger == report["synthetic"][1]
    folders = [run / "incumbent" / "restart_1", run / "incumbent" / "restart_2", run / "challenger"]
    models = [load_model(p) for p in folders]  # each folder's best model, else its final one
    assert voted["vote_members"] == [str(m.path) for m in models]
    assert voted["contender_kept"] == "vote (incumbent)" and "probe_long_auc" not in voted
    series, split = learning_scoring.synthetic_series("trend_regimes", 0)
    env = evaluation_env(series.market, models[0].config.env, split.splits[0].test)
    record = record_trained(Vote(tuple(m.policy for m in models)), env.core)[0]
    agent = record_metrics(record, bars_per_year=env.core.bars_per_year)
    assert voted["turnover_per_year"] == agent["turnover_per_year"]
    assert voted["share"] == learning_scoring.tail_figures(agent, 0.1, 0.5)["share"]
    assert len(voted["growth_agent_fresh"]) == 1 and math.isfinite(voted["share_fresh"])
    written = pd.read_csv(Path(voted["run"]) / "equity.csv")
    assert np.allclose(written["equity"], record["equity"])

    code, err = vote("--out", str(tmp_path / "voted"))
    assert code == 2 and err.strip().endswith("already exists; pass a new folder")
    code, err = vote("--out", str(tmp_path / "none"), "--from", str(tmp_path / "missing"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no learning benchmark" in err
    shutil.rmtree(run / "incumbent" / "restart_2")
    shutil.rmtree(run / "incumbent" / "restart_1")
    code, err = vote("--out", str(tmp_path / "none"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "train.restarts >= 2" in err
    assert not (tmp_path / "none").exists()
