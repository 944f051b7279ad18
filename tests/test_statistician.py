"""`benchmarks/statistician.py`: the estimated ceiling alone and behind the contest's hold prior
against issue #10's worst-seed targets, over seeds; how a kind's figures are summarized, and bad
seeds, a used out file and a bad config refused in one line."""

import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def statistician_module():
    """benchmarks/statistician.py as a module (it imports its siblings from benchmarks/)."""
    if str(REPO / "benchmarks") not in sys.path:
        sys.path.insert(0, str(REPO / "benchmarks"))
    import statistician

    return statistician


def test_a_kind_is_summarized_against_its_worst_seed_target() -> None:
    statistician = statistician_module()
    figures = {0: 0.5, 1: 0.2, 2: math.nan, 3: 0.9, 4: 0.3}  # seed 2: no edge, left out
    summary = statistician.summarize("trend_regimes", figures, draw=5)
    assert (summary.seeds, summary.worst) == (4, 0.2)
    assert summary.median == pytest.approx(0.4)  # of 0.2, 0.3, 0.5 and 0.9
    assert summary.missed == [1]  # 0.3 meets the target (>= 0.3), 0.2 does not
    assert summary.missed_share == 0.25
    assert summary.all_met == pytest.approx(0.75**5)
    walks = statistician.summarize("random_walk", {7: 0.0, 8: -0.06, 9: -0.05}, draw=2)
    assert walks.missed == [8] and walks.all_met == pytest.approx((2 / 3) ** 2)
    none = statistician.summarize("volatility_regimes", {0: math.nan}, draw=5)
    assert none.seeds == 0 and math.isnan(none.missed_share) and math.isnan(none.median)


def test_seeds_are_read_as_seeds_or_inclusive_ranges() -> None:
    statistician = statistician_module()
    assert statistician.parse_seeds(["3-5", "9"]) == [3, 4, 5, 9]
    with pytest.raises(ValueError, match="'3x'"):
        statistician.parse_seeds(["3x"])


def test_the_random_walks_figure_is_its_own_tails_growth_against_buy_and_hold() -> None:
    statistician = statistician_module()
    from learning_scoring import estimated_run, reference_env, sized_hold_run, synthetic_series

    from envs.synthetic import buy_and_hold_growth
    from training.config import DEFAULT_CONFIG_PATH, load_config

    env = reference_env(load_config(DEFAULT_CONFIG_PATH))
    series, split = synthetic_series("random_walk", 0)
    tail = split.splits[0].test
    bought = buy_and_hold_growth(series, env, tail)
    cfg = load_config(DEFAULT_CONFIG_PATH)
    figures = statistician.seed_figures("random_walk", 0, 0, cfg)
    assert (
        figures.statistician
        == estimated_run("random_walk", 0, series, tail, env).log_growth - bought
    )
    # Holding trades buy-and-hold's action under the volatility budget: sized hold's growth
    assert figures.holding == sized_hold_run(series, tail, env).log_growth - bought
    # Random walk 0's training bars show no structure at the default's levels: the prior
    assert figures.hold_is_prior and figures.behind_prior == figures.holding


def test_behind_the_hold_prior_holdings_figure_stands_where_holding_is_the_prior() -> None:
    statistician = statistician_module()
    prior = statistician.SeedFigures(statistician=0.1, holding=0.0, hold_is_prior=True)
    contested = statistician.SeedFigures(statistician=0.1, holding=0.0, hold_is_prior=False)
    assert (prior.behind_prior, contested.behind_prior) == (0.0, 0.1)


def test_bad_seeds_and_a_used_out_file_are_refused_in_one_line(tmp_path: Path) -> None:
    script = str(REPO / "benchmarks" / "statistician.py")
    done = subprocess.run(
        [sys.executable, script, "--seeds", "3x"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "benchmarks/statistician.py: --seeds: '3x' is not a seed or a range like 3000-3199"
    ]
    used = tmp_path / "figures.json"
    used.write_text("{}")
    done = subprocess.run(
        [sys.executable, script, "--out", str(used)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and "exists" in done.stderr and used.read_text() == "{}"
    bad = tmp_path / "bad.yaml"
    bad.write_text("env:\n  window: x\n")
    done = subprocess.run(
        [sys.executable, script, "--config", str(bad)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"benchmarks/statistician.py: {bad}: env.window: expected int, got 'x' (str)"
    ]
