"""The end of training's view of the gap: each pass's training episodes' Sharpe against its
validation Sharpe, for the run's model or each trained contender, and the plain warning where
validation never beat staying flat."""

import json

import pytest
from test_challenger import incumbent_and_hold

from training.config import load_config
from training.evaluation.validation import generalization_summary, never_beat_flat
from training.run.challenger import keep_better_contender
from training.run.folder import RunDir
from training.train import generalization_report


def passes(*figures: tuple[int, float, float, float | None]) -> list[dict]:
    """Validation passes of (timesteps, Sharpe, return %, training episodes' Sharpe)."""
    return [
        {"timesteps": steps, "years": 4.0, "sharpe": sharpe, "total_return_pct": ret,
         "train_episode_sharpe": train,
         "generalization_gap": None if train is None else train - sharpe}
        for steps, sharpe, ret, train in figures
    ]  # fmt: skip


def test_the_summary_shows_the_chosen_and_last_passes_with_their_gaps():
    history = passes((128, 0.5, 4.0, 3.0), (256, 1.2, 9.0, 2.0), (384, 0.1, 1.0, 6.0))
    lines = generalization_summary(history, "incumbent", "incumbent/validation.json").split("\n")
    assert lines == [
        "generalization of the incumbent over 3 validation passes (incumbent/validation.json):",
        "  chosen pass  256 timesteps: validation Sharpe 1.20, return 9.00%; training episodes' "
        "Sharpe 2.00, gap 0.80",
        "  last pass    384 timesteps: validation Sharpe 0.10, return 1.00%; training episodes' "
        "Sharpe 6.00, gap 5.90",
    ]
    one = generalization_summary(passes((0, 0.4, 2.0, None)))
    assert one.startswith("generalization over 1 validation pass (validation.json)")
    assert "training episodes" not in one  # no training episodes, no gap
    assert generalization_summary([]) == "generalization: no validation pass, so the gap is unknown"


@pytest.mark.parametrize(
    ("returns", "warned"), [((-3.0, 0.0), True), ((-3.0, 0.5), False), ((), False)]
)
def test_a_run_whose_validation_never_beat_flat_says_so(returns, warned):
    history = passes(*((128 * (i + 1), -0.1, r, 1.0) for i, r in enumerate(returns)))
    warning = never_beat_flat(history)
    assert (warning is not None) == warned
    if warned:
        assert warning == (
            "validation never beat flat: the best of 2 passes returned 0.00%; the test figures "
            "below are no evidence of skill"
        )


@pytest.mark.parametrize(("hold", "kept"), [(0.60, "hold"), (0.10, "incumbent")])
def test_a_contest_shows_each_trained_contenders_gap_and_what_it_kept(tmp_path, hold, kept):
    run = incumbent_and_hold(tmp_path, hold)
    incumbent = passes((128, 1.5, 30.0, 4.0), (256, 0.5, 8.0, 9.0))
    for entry, growth in zip(incumbent, (0.30, 0.05), strict=True):
        entry.update(score=growth, score_standard_error=0.1)  # holding must beat 0.30 + 0.1
    run.contender("incumbent").validation_history.write_text(json.dumps(incumbent))
    held = run.contender("hold").validation_history
    held.write_text(json.dumps([{**json.loads(held.read_text())[0], "total_return_pct": 12.0}]))
    cfg = load_config("configs/smoke.yaml", ["train.hold_margin=1", "train.select_by=growth"])
    assert keep_better_contender(run, cfg.train)["kept"] == kept
    report = generalization_report(run, cfg)
    marked = "incumbent (kept)" if kept == "incumbent" else "incumbent"
    heading = f"generalization of the {marked} over 2 validation passes (incumbent/validation.json)"
    assert report.startswith(f"{heading}:\n  chosen pass  128 timesteps")
    assert "training episodes' Sharpe 4.00, gap 2.50" in report
    holding = (
        "the run keeps holding, which trains nothing and has no gap: validation Sharpe 1.70, "
        "return 12.00%"
    )
    assert (holding in report) == (kept == "hold")
    assert "never beat flat" not in report


def test_a_run_without_a_contest_shows_its_own_gap(tmp_path):
    run = RunDir(tmp_path)
    run.validation_history.write_text(json.dumps(passes((128, -0.5, -4.0, 2.0))))
    report = generalization_report(run, load_config("configs/smoke.yaml"))
    assert report.startswith("generalization over 1 validation pass (validation.json):")
    assert report.endswith("  validation never beat flat: its one pass returned -4.00%; "
                           "the test figures below are no evidence of skill")  # fmt: skip
