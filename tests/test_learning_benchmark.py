"""`benchmarks/learning.py`: an --out that holds results is refused; a run scores the agent and
the estimated ceiling on its tail and on fresh series, and probes the heads' use of volatility."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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
        "--out (or --rescore it)"
    ]
    assert results.read_text() == '{"kept": true}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["learning.json"]


def test_runs_score_the_agent_the_estimated_ceiling_and_the_volatility_probe(
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
            "200",
            "--fresh-series",
            "1",
            "--jobs",
            "1",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    result, volatility = json.loads((tmp_path / "learning.json").read_text())["synthetic"]
    hold = result["growth_buy_and_hold"]
    assert result["excess_growth_estimated"] == pytest.approx(result["growth_estimated"] - hold)
    fresh_hold = result["growth_buy_and_hold_fresh"][0]
    assert result["excess_growth_estimated_fresh"] == pytest.approx(
        result["growth_estimated_fresh"][0] - fresh_hold
    )
    assert result["excess_growth_fresh"] == pytest.approx(
        result["growth_agent_fresh"][0] - fresh_hold
    )
    # Fitted to series 0's training bars: two trends of opposite sign, neither the true +-0.0015.
    down, up = result["estimated_params"]["drift"]
    assert down < 0 < up and (down, up) != (-0.0015, 0.0015)
    assert "est. ceiling, fresh" in done.stdout
    # The probe: the default's leverage levels are 0.5 and 1x; one figure per regime.
    for k in (0, 1):
        assert 0.5 <= volatility[f"probe_leverage_state{k}"] <= 1.0
        assert 0.0 <= volatility[f"probe_flat_state{k}"] <= 1.0
    assert "probe_leverage_state0" not in result  # trend: no volatility levels to probe
    assert "volatility probe" in done.stdout
