"""`benchmarks/evidence_size.py`: the contest's tests of the training bars under each null, over
seeds, as shares below the contest's levels; bad seeds and a used out file refused in one line."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def evidence_size_module():
    """benchmarks/evidence_size.py as a module (it imports its siblings from benchmarks/)."""
    if str(REPO / "benchmarks") not in sys.path:
        sys.path.insert(0, str(REPO / "benchmarks"))
    import evidence_size

    return evidence_size


def test_shares_count_the_measured_values_below_each_level() -> None:
    module = evidence_size_module()
    assert module.LEVELS == (0.1, 0.01, 1e-3, 1e-4)
    assert module.shares([0.5, 0.05, 0.005, 5e-5, None]) == [0.75, 0.5, 0.25, 0.25]
    assert module.shares([None]) == [0.0, 0.0, 0.0, 0.0]


def test_a_seed_is_read_under_both_nulls_as_a_run_reads_it(monkeypatch) -> None:
    """The normal readings are the contest's own tests on the series' training bars, and the
    wild ones are p-values of the bootstrap (multiples of one draw's share)."""
    from training.config import DEFAULT_CONFIG_PATH, load_config
    from training.run import wild_bootstrap
    from training.run.challenger import contest_evidence
    from training.run.data import RunData, with_bars_per_year

    monkeypatch.setattr(wild_bootstrap, "WILD_DRAWS", 99)
    module = evidence_size_module()
    cfg = load_config(DEFAULT_CONFIG_PATH, ["train.evidence_reversal=null"])
    read = module.seed_evidence("trend_regimes", 5, cfg, ("momentum", "persistence"))
    series, split = module.synthetic_series("trend_regimes", 5)
    data = RunData((series.market,), split)
    raw = [
        "train.evidence_reversal=null",
        "train.persistence_null=normal",
        "train.momentum_null=normal",
    ]
    run_cfg = with_bars_per_year(load_config(DEFAULT_CONFIG_PATH, raw), data)
    measured = contest_evidence(run_cfg, data.ranges("train", 1, run_cfg.env.window))
    assert measured is not None
    assert read["momentum_normal"] == measured.momentum
    assert read["persistence_normal"] == measured.persistence
    for key in ("momentum_wild", "persistence_wild"):
        assert round(read[key] * 100, 9) == round(read[key] * 100)  # (1 + beaten) / 100


def test_bad_seeds_and_a_used_out_file_are_refused_in_one_line(tmp_path: Path) -> None:
    script = [sys.executable, str(REPO / "benchmarks" / "evidence_size.py")]
    bad = subprocess.run([*script, "--seeds", "3-x"], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().count("\n") == 0 and "--seeds: '3-x'" in bad.stderr
    used = tmp_path / "sizes.json"
    used.write_text(json.dumps({}))
    again = subprocess.run([*script, "--out", str(used)], capture_output=True, text=True)
    assert again.returncode == 2 and "exists" in again.stderr and used.read_text() == "{}"


def test_a_missing_config_is_refused_in_one_line(tmp_path: Path) -> None:
    script = [sys.executable, str(REPO / "benchmarks" / "evidence_size.py")]
    done = subprocess.run(
        [*script, "--config", str(tmp_path / "missing.yaml"), "--seeds", "0"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0
