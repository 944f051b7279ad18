"""The contest: `train.challenger`, a second training with other settings, and
`train.hold_margin`, a policy that always holds, each kept only when it validates better by its
margin."""

import json
import math
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from envs.synthetic import generate
from training.config import ConfigError, TrainConfig, challenger_config, load_config
from training.run.challenger import (
    NOT_MEASURED,
    contest_evidence,
    hold_role,
    keep_better_contender,
    recorded_evidence,
)
from training.run.contest_report import format_contest
from training.run.data import RunData
from training.run.evidence import (
    Evidence,
    halves_evidence,
    momentum_evidence,
    persistence_evidence,
    tail_evidence,
)
from training.run.folder import RunDir, load_model
from training.run.model_file import read_model_file
from training.train import main

SMOKE = ["--config", "configs/smoke.yaml"]
CHALLENGE = ["--set", 'train.challenger=["ppo.learning_rate=3e-3", "train.direction_outcomes=1"]']


def train(run: Path, *args: str) -> int:
    return main([*SMOKE, "--run-dir", str(run), *args])


@pytest.fixture(scope="module")
def contested(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("challenger") / "run"
    assert train(run, *CHALLENGE) == 0
    return run


@pytest.fixture(scope="module")
def held(tmp_path_factory) -> Path:
    """A run whose contest is its policy against holding, at margin 0."""
    run = tmp_path_factory.mktemp("hold") / "run"
    assert train(run, "--set", "train.hold_margin=0") == 0
    return run


def test_the_challenger_is_the_config_with_its_overrides_and_nothing_else(contested):
    incumbent = load_config(contested / "incumbent" / "config.yaml")
    challenger = load_config(contested / "challenger" / "config.yaml")
    assert incumbent.train.challenger == () and challenger.train.challenger == ()
    assert challenger.ppo.learning_rate == 3e-3 and challenger.train.direction_outcomes == 1
    assert incumbent.ppo.learning_rate != 3e-3 and incumbent.train.direction_outcomes == 0
    assert incumbent.train.seed == challenger.train.seed
    assert incumbent.env == challenger.env and incumbent.data == challenger.data
    for name in ("incumbent", "challenger"):
        assert load_model(contested / name).num_timesteps in (128, 256)
        assert (contested / name / "splits.json").read_bytes() == (
            contested / "splits.json"
        ).read_bytes()


def test_the_run_keeps_what_the_contest_chose_and_records_it(contested):
    choice = json.loads((contested / "challenger.json").read_text())
    kept = contested / choice["kept"]
    model = (
        "best_model.safetensors"
        if (kept / "best_model.safetensors").exists()
        else "final_model.safetensors"
    )
    assert (contested / model).read_bytes() == (kept / model).read_bytes()
    assert (contested / "validation.json").read_text() == (kept / "validation.json").read_text()
    names = [row["contender"] for row in choice["contenders"]]
    assert names == ["incumbent", "challenger"] and choice["margin_standard_errors"] == 1.5
    events = EventAccumulator(str(contested / "tb" / "challenger"))
    events.Reload()
    assert {e.value for e in events.Scalars("challenger/kept")} == {1 + names.index(choice["kept"])}


@pytest.mark.parametrize("fixture", ["contested", "restarted_incumbent"])
def test_a_finished_contest_resumes_without_training_again(fixture, request, capsys):
    contested = request.getfixturevalue(fixture)
    before = (contested / "challenger.json").read_text()
    assert main(["--resume", str(contested)]) == 0
    out = capsys.readouterr().out
    assert "incumbent: trained already" in out and "challenger: trained already" in out
    assert (contested / "challenger.json").read_text() == before


@pytest.fixture(scope="module")
def restarted_incumbent(tmp_path_factory) -> Path:
    """A contest whose incumbent trains from two seeds, against a challenger and holding."""
    run = tmp_path_factory.mktemp("restarted") / "run"
    assert train(run, *CHALLENGE, "--set", "train.restarts=2", "--set", "train.hold_margin=0") == 0
    return run


def test_a_contests_restarts_are_the_incumbents_and_the_best_of_them_competes(
    restarted_incumbent, contested
):
    incumbent = restarted_incumbent / "incumbent"
    assert load_config(incumbent / "config.yaml").train.restarts == 2
    for number, seed in ((1, 0), (2, 1000)):
        restart = load_config(incumbent / f"restart_{number}" / "config.yaml").train
        assert (restart.seed, restart.restarts) == (seed, 1)
    # Restart 1 is the incumbent one training makes: the same weights, to the bit
    one, first = (
        read_model_file(folder / "final_model.safetensors")
        for folder in (contested / "incumbent", incumbent / "restart_1")
    )
    assert one.num_timesteps == first.num_timesteps
    assert {k: v.numpy().tobytes() for k, v in one.policy.items()} == {
        k: v.numpy().tobytes() for k, v in first.policy.items()
    }
    assert load_config(restarted_incumbent / "challenger" / "config.yaml").train.restarts == 1
    assert not (restarted_incumbent / "challenger" / "restart_1").exists()
    assert load_config(restarted_incumbent / "hold" / "config.yaml").train.restarts == 1
    choice = json.loads((incumbent / "restarts.json").read_text())
    kept = choice["kept"]
    assert (incumbent / "validation.json").read_text() == (
        incumbent / f"restart_{kept}" / "validation.json"
    ).read_text()  # the incumbent the contest ranks is the restart it kept
    scores = [row["best_validation_score"] for row in choice["restarts"]]
    assert scores[kept - 1] == max(scores)
    contest = json.loads((restarted_incumbent / "challenger.json").read_text())
    row = next(r for r in contest["contenders"] if r["contender"] == "incumbent")
    assert row["best_validation_score"] == scores[kept - 1]


def rules(**keys: Any) -> TrainConfig:
    """The contest keys of a run: the challenger's margin 1.5 and `keys`."""
    return TrainConfig(challenger_margin=1.5, **keys)


def history(sharpe: float | None, years: float = 4.0) -> list[dict]:
    return [{"timesteps": 128, "sharpe": sharpe, "years": years}]


def contenders(root: Path, **sharpes: float | None) -> RunDir:
    """A run in `root` with a folder for each contender named in `sharpes`: one validation pass
    at that Sharpe, a final model, and a best model unless the Sharpe is None (no finite pass
    saves none)."""
    run = RunDir(root)
    for name, sharpe in sharpes.items():
        folder = run.contender(name)
        folder.root.mkdir()
        folder.validation_history.write_text(json.dumps(history(sharpe)))
        folder.final_model.write_bytes(name.encode())
        if sharpe is not None:
            folder.best_model.write_bytes(f"best {name}".encode())
    return run


def incumbent_of_five_passes_and_hold(root: Path, hold: float) -> RunDir:
    """A run in `root` whose incumbent validated five times, best log growth +0.30 and median
    +0.10 (and once more at a NaN score, which neither counts), and whose hold contender at
    `hold` (volatility 0.18), each with a best model."""
    run = RunDir(root)
    # Growth, its volatility and Sharpe of five passes: best +0.30, median +0.10
    passes = [(-0.2, 0.3, 0.1), (0.1, 0.25, 0.8), (0.3, 0.2, 1.9), (0.05, 0.2, 0.5), (0.15, 0.2, 1)]
    histories = {
        "incumbent": [entry for growth in passes for entry in growth_history(*growth)],
        "hold": growth_history(hold, 0.18, 1.9),
    }
    histories["incumbent"].append({**histories["incumbent"][0], "score": float("nan")})
    for name, history in histories.items():
        folder = run.contender(name)
        folder.root.mkdir()
        folder.validation_history.write_text(json.dumps(history))
        folder.best_model.write_bytes(f"best {name}".encode())
    return run


def assert_adopted(run: RunDir, source: RunDir) -> None:
    """`run` holds `source`'s best model, or its final one when it has no best."""
    if source.best_model.exists():
        assert run.best_model.read_bytes() == source.best_model.read_bytes()
    else:  # and no best model of an earlier choice shadows it
        assert run.final_model.read_bytes() == source.final_model.read_bytes()
        assert not run.best_model.exists()


@pytest.mark.parametrize(
    ("incumbent", "challenger", "kept"),
    [
        (0.5, 1.26, "challenger"),  # 0.76 above: more than 1.5 / sqrt(4) = 0.75
        (0.5, 1.24, "incumbent"),  # 0.74 above: within the margin
        (None, 0.76, "challenger"),  # an incumbent that never held a position counts as flat
        (None, 0.74, "incumbent"),
        (0.5, None, "incumbent"),  # a challenger without a finite pass is never kept
    ],
)
def test_the_challenger_must_win_by_the_margin(tmp_path, incumbent, challenger, kept):
    run = contenders(tmp_path, incumbent=incumbent, challenger=challenger)
    choice = keep_better_contender(run, rules())
    assert choice["kept"] == kept
    assert choice["score_to_beat"] == pytest.approx((incumbent or 0.0) + 0.75)
    assert_adopted(run, run.contender(kept))
    assert json.loads(run.contest.read_text()) == choice
    assert math.isclose(choice["margin_standard_errors"], 1.5)


@pytest.mark.parametrize(
    ("evidence", "kept", "clause"),
    [
        (0.05, "challenger", "could win: the training bars' momentum predicts the next decision's "
         "return at p = 0.05, below 0.1"),
        (0.1, "incumbent", "could not win: the training bars' momentum predicts the next "
         "decision's return at p = 0.1, not below 0.1"),
        (None, "incumbent", "could not win: no momentum features or too few training bars"),
    ],
)  # fmt: skip
def test_the_challenger_wins_only_where_the_training_bars_hint_at_it(
    tmp_path, evidence, kept, clause
):
    run = RunDir(tmp_path)
    for name, sharpe in (("incumbent", 0.5), ("challenger", 1.5)):  # 1.0 above: beyond 0.75
        folder = run.contender(name)
        folder.root.mkdir()
        folder.validation_history.write_text(json.dumps(history(sharpe)))
        folder.best_model.write_bytes(f"best {name}".encode())
    # The challenger's gate reads the momentum alone: the tail's p is below the level
    choice = keep_better_contender(run, rules(challenger_evidence=0.1), Evidence(evidence, 0.01))
    assert choice["kept"] == kept
    assert choice["evidence_level"] == 0.1 and choice["evidence_p_value"] == evidence
    assert_adopted(run, run.contender(kept))
    assert f"the challenger {clause}" in format_contest(choice)
    without = keep_better_contender(run, rules(), Evidence(evidence, 0.01))  # no level: unread
    assert without["kept"] == "challenger" and "evidence_level" not in without
    assert "could" not in format_contest(without)


@pytest.mark.parametrize(
    ("evidence", "incumbent", "challenger", "kept", "clause"),
    [
        # Past returns predict later ones (persistence): the incumbent must beat the challenger
        (Evidence(0.5, 1.0, 0.005), 1.24, 0.5, "challenger", "the challenger was the prior: the "
         "training bars' returns persist at p = 0.005, below 0.01"),
        (Evidence(0.5, 1.0, 0.005), 1.26, 0.5, "incumbent", "the challenger was the prior"),
        (Evidence(0.005, 1.0, 0.5), 0.9, 1.0, "challenger", "momentum predicts the next "
         "decision's return at p = 0.005, below 0.01"),
        # No test of the returns below the level (the tail's is a stop's): the usual contest
        (Evidence(0.02, 0.001, 0.5), 0.5, 1.24, "incumbent", "the incumbent was the prior: the "
         "training bars' returns predict none below 0.01 (momentum p = 0.02, persistence "
         "p = 0.5)"),
        (Evidence(0.02, 0.001, 0.5), 0.5, 1.26, "challenger", "the incumbent was the prior"),
        (None, 0.5, 0.6, "incumbent", "(momentum not measurable, persistence not measurable)"),
        # A challenger without a finite pass never leads, nor is kept
        (Evidence(0.001, 1.0, 0.001), 0.2, None, "incumbent", "the incumbent was the prior"),
    ],
)  # fmt: skip
def test_the_challenger_is_the_prior_where_the_training_bars_returns_predict(
    tmp_path, evidence, incumbent, challenger, kept, clause
):
    run = contenders(tmp_path, incumbent=incumbent, challenger=challenger)
    choice = keep_better_contender(run, rules(challenger_prior=0.01), evidence)
    assert choice["kept"] == kept
    led = evidence is not None and challenger is not None and evidence.predicts_returns(0.01)
    assert choice["challenger_led"] == led and choice["challenger_prior_level"] == 0.01
    to_beat = (challenger if led else incumbent) + 0.75  # 1.5 / sqrt(4 years)
    assert choice["score_to_beat"] == pytest.approx(to_beat)
    measured = evidence or Evidence(None, None)
    assert choice["evidence_p_value"] == measured.momentum
    assert choice["persistence_p_value"] == measured.persistence
    assert_adopted(run, run.contender(kept))
    shown = format_contest(choice)
    assert clause in shown
    leader, other = ("incumbent", "challenger") if led else ("challenger", "incumbent")
    assert f"the {leader} had to beat" in shown and f"above the {other}" in shown
    unread = keep_better_contender(run, rules(), evidence)  # no level: the usual contest
    assert "challenger_led" not in unread and "prior" not in format_contest(unread)


@pytest.mark.parametrize(
    ("evidence", "led", "clause"),
    [
        (Evidence(0.5, 1.0, 0.005, halves=0.03), True, "the challenger was the prior: the "
         "training bars' returns persist at p = 0.005, below 0.01, and each half of them at "
         "p = 0.03, below 0.05"),
        (Evidence(0.5, 1.0, 0.005, halves=0.2), False, "the incumbent was the prior: the "
         "training bars' returns persist at p = 0.005, below 0.01, but each half of them at "
         "p = 0.2, not below 0.05"),
        (Evidence(0.5, 1.0, 0.005), False, "but each half of them not measurable, not below"),
        # The halves alone are not the whole range's evidence
        (Evidence(0.5, 1.0, 0.5, halves=0.001), False, "returns predict none below 0.01"),
    ],
)  # fmt: skip
def test_with_halves_the_challenger_leads_only_where_each_half_shows_it_too(
    tmp_path, evidence, led, clause
):
    run = contenders(tmp_path, incumbent=1.0, challenger=0.9)
    choice = keep_better_contender(
        run, rules(challenger_prior=0.01, challenger_prior_halves=0.05), evidence
    )
    assert choice["challenger_led"] == led and choice["challenger_prior_halves_level"] == 0.05
    assert choice["kept"] == ("challenger" if led else "incumbent")
    assert choice["halves_p_value"] == evidence.halves
    assert clause in format_contest(choice)


@pytest.mark.parametrize(
    ("evidence", "led", "clause"),
    [
        (Evidence(0.5, 1.0, 0.002), True, "the challenger was the prior: the training bars' "
         "returns persist at p = 0.002, below 0.003"),
        # The momentum test is not read: its finding does not let the challenger lead
        (Evidence(0.001, 1.0, 0.5), False, "the incumbent was the prior: the training bars' "
         "returns predict none below 0.003 (persistence p = 0.5)"),
        (Evidence(0.001, 1.0, 0.002), True, "returns persist at p = 0.002, below 0.003"),
    ],
)  # fmt: skip
def test_the_prior_reads_only_the_tests_it_is_given(tmp_path, evidence, led, clause):
    run = contenders(tmp_path, incumbent=1.0, challenger=0.9)
    only = rules(challenger_prior=0.003, challenger_prior_tests=("persistence",))
    choice = keep_better_contender(run, only, evidence)
    assert choice["challenger_led"] == led and choice["challenger_prior_tests"] == ["persistence"]
    assert choice["kept"] == ("challenger" if led else "incumbent")
    shown = format_contest(choice)
    assert clause in shown and "momentum" not in shown  # what it did not read, it does not say
    # Both tests read, as by default, the momentum's finding lets it lead too
    both = keep_better_contender(run, rules(challenger_prior=0.003), evidence)
    assert both["challenger_led"] and both["challenger_prior_tests"] == ["momentum", "persistence"]


def incumbent_exposed(tmp_path, exposure):
    """A contest whose incumbent (validated at 1.0 against the challenger's 0.9) had its one
    pass in the market on `exposure` percent of the bars; None: no finite pass, no best model."""
    run = contenders(tmp_path, incumbent=1.0, challenger=0.9)
    incumbent = run.contender("incumbent")
    if exposure is None:  # no finite pass: no best model, and no exposure recorded
        incumbent.validation_history.write_text(json.dumps(history(None)))
        incumbent.best_model.unlink()
    else:
        passes = [{**history(1.0)[0], "exposure_pct": exposure}]
        incumbent.validation_history.write_text(json.dumps(passes))
    return run


@pytest.mark.parametrize(
    ("exposure", "led", "clause"),
    [
        (98.5, True, "the challenger was the prior: the training bars' returns persist at "
         "p = 0.005, below 0.01, and the incumbent's best validation pass in the market on "
         "98.5% of the bars, at least 96%"),
        (96.0, True, "at least 96%"),  # the level itself leads
        (80.0, False, "the incumbent was the prior: the training bars' returns persist at "
         "p = 0.005, below 0.01, but the incumbent's best validation pass in the market on "
         "80.0% of the bars, below 96%"),
        (None, False, "in the market on none of the bars (no finite pass), below 96%"),
    ],
)  # fmt: skip
def test_with_exposure_the_challenger_leads_only_over_an_incumbent_that_validated_exposed(
    tmp_path, exposure, led, clause
):
    run = incumbent_exposed(tmp_path, exposure)
    evidence = Evidence(0.5, 1.0, 0.005)
    choice = keep_better_contender(
        run, rules(challenger_prior=0.01, challenger_prior_exposure=96), evidence
    )
    assert choice["challenger_led"] == led and choice["challenger_prior_exposure_level"] == 96
    assert choice["incumbent_exposure_pct"] == exposure
    assert choice["kept"] == ("challenger" if led else "incumbent" if exposure else "challenger")
    assert clause in format_contest(choice)
    # The exposure alone is not the bars' evidence: without it the challenger does not lead
    unread = keep_better_contender(
        run, rules(challenger_prior=0.01, challenger_prior_exposure=96), Evidence(0.5, 1.0, 0.5)
    )
    assert not unread["challenger_led"] and "returns predict none below" in format_contest(unread)


@pytest.mark.parametrize(
    ("exposure", "led", "clause"),
    [
        (0.0, True, "in the market on 0.0% of the bars, at least 96% or at most 4%"),
        (4.0, True, "at least 96% or at most 4%"),  # the level itself leads, flat side too
        (98.5, True, "in the market on 98.5% of the bars, at least 96% or at most 4%"),
        (50.0, False, "in the market on 50.0% of the bars, below 96% and above 4%"),
        (None, True, "none of the bars (no finite pass), at least 96% or at most 4%"),
    ],
)  # fmt: skip
def test_either_collapse_lets_the_challenger_lead_over_an_always_flat_incumbent_too(
    tmp_path, exposure, led, clause
):
    run = incumbent_exposed(tmp_path, exposure)
    either = rules(
        challenger_prior=0.01, challenger_prior_exposure=96, challenger_prior_collapse="either"
    )
    choice = keep_better_contender(run, either, Evidence(0.5, 1.0, 0.005))
    assert choice["challenger_led"] == led and choice["challenger_prior_collapse"] == "either"
    assert choice["kept"] == ("challenger" if led else "incumbent")
    assert clause in format_contest(choice)
    # "long", the default, leads over the always-long collapse alone
    only_long = keep_better_contender(
        run, rules(challenger_prior=0.01, challenger_prior_exposure=96), Evidence(0.5, 1.0, 0.005)
    )
    assert only_long["challenger_led"] == (exposure == 98.5)


def test_a_run_measures_the_evidence_on_its_own_training_bars(tmp_path):
    run = tmp_path / "run"
    gate = ["--set", "env.momentum_horizons=[4,8]", "--set", "train.challenger_evidence=1"]
    assert train(run, *CHALLENGE, *gate) == 0
    choice = json.loads(RunDir(run).contest.read_text())
    cfg = load_config(RunDir(run).config)
    data = RunData.load(cfg)
    expected = momentum_evidence(cfg, data.ranges("train", 1, cfg.env.window))
    assert choice["evidence_level"] == 1.0
    assert choice["evidence_p_value"] == pytest.approx(expected) and expected < 1.0
    # The challenger's prior reads the same bars, and leads where their returns predict at 1
    again = ["--set", "env.momentum_horizons=[4,8]", "--set", "train.challenger_prior=1"]
    assert train(tmp_path / "prior", *CHALLENGE, *again) == 0
    choice = json.loads(RunDir(tmp_path / "prior").contest.read_text())
    assert choice["challenger_prior_level"] == 1.0 and choice["challenger_led"]
    assert choice["evidence_p_value"] == pytest.approx(expected)
    assert choice["halves_p_value"] is None  # read only where asked
    # With the halves asked for, it reads each half of the same bars too
    halves = [*again, "--set", "train.challenger_prior_halves=1"]
    assert train(tmp_path / "halves", *CHALLENGE, *halves) == 0
    choice = json.loads(RunDir(tmp_path / "halves").contest.read_text())
    cfg = load_config(RunDir(tmp_path / "halves").config)
    expected = halves_evidence(cfg, data.ranges("train", 1, cfg.env.window))
    assert expected is not None and choice["halves_p_value"] == pytest.approx(expected)
    assert choice["challenger_led"] == (expected < 1.0)


def test_the_hold_contender_always_holds_and_is_compared_on_the_same_bars(held):
    hold = load_model(held / "hold")
    assert hold.num_timesteps == 0 and hold.config.train.hold_margin is None
    incumbent = load_config(held / "incumbent" / "config.yaml")
    assert incumbent.train.hold_margin is None and incumbent.train.challenger == ()
    assert (held / "hold" / "splits.json").read_bytes() == (held / "splits.json").read_bytes()
    (entry,) = json.loads((held / "hold" / "validation.json").read_text())
    assert entry["exposure_pct"] > 99 and entry["timesteps"] == 0  # long from the first fill on
    assert entry["long_share_pct"] == 100.0  # its direction head leans all the way long
    for trained in json.loads((held / "incumbent" / "validation.json").read_text()):
        assert 0.0 <= trained["long_share_pct"] <= 100.0
    choice = json.loads((held / "challenger.json").read_text())
    assert [row["contender"] for row in choice["contenders"]] == ["incumbent", "hold"]
    policy_score, hold_score = (row["best_validation_score"] for row in choice["contenders"])
    assert choice["kept"] == ("hold" if hold_score > (policy_score or 0.0) else "incumbent")
    kept = held / choice["kept"]
    assert (held / "validation.json").read_text() == (kept / "validation.json").read_text()
    shown = format_contest(choice)
    assert shown.startswith("incumbent and hold, by") and "holding had to beat" in shown
    lean = next(row for row in choice["contenders"] if row["contender"] == "incumbent")
    assert f"long from a flat account on {lean['long_share_pct']:.0f}% of the bars" in shown
    assert "timesteps, long from a flat account on 100% of the bars" in shown.split("hold:")[-1]


def test_a_finished_hold_contest_resumes_as_it_was(held, capsys):
    before = (held / "challenger.json").read_text(), (held / "hold" / "validation.json").read_text()
    assert main(["--resume", str(held)]) == 0
    assert "validated already" in capsys.readouterr().out
    after = (held / "challenger.json").read_text(), (held / "hold" / "validation.json").read_text()
    assert after == before


@pytest.mark.parametrize(
    ("incumbent", "challenger", "hold", "kept"),
    [
        (0.5, 1.26, 1.76, "challenger"),  # holding must beat the challenger: 1.26 + 0.5
        (0.5, 1.26, 1.77, "hold"),
        (0.5, 1.24, 0.99, "incumbent"),  # the incumbent kept: holding must beat 0.5 + 0.5
        (0.5, 1.24, 1.01, "hold"),
        (None, None, 0.51, "hold"),  # a policy without a finite pass counts as flat
        (None, None, 0.49, "incumbent"),
    ],
)
def test_holding_must_beat_the_policy_kept_by_its_margin(
    tmp_path, incumbent, challenger, hold, kept
):
    sharpes = {"incumbent": incumbent, "challenger": challenger, "hold": hold}
    run = contenders(tmp_path, **sharpes)
    choice = keep_better_contender(run, rules(hold_margin=1.0))  # 1.0 / sqrt(4) = 0.5
    assert choice["kept"] == kept
    before = "challenger" if (challenger or 0.0) > (incumbent or 0.0) + 0.75 else "incumbent"
    assert choice["hold_score_to_beat"] == pytest.approx((sharpes[before] or 0.0) + 0.5)
    assert_adopted(run, run.contender(kept))
    again = keep_better_contender(run, rules())  # no hold margin: no hold contender
    assert again["kept"] != "hold" and len(again["contenders"]) == 2
    assert_adopted(run, run.contender(again["kept"]))


def growth_history(growth: float, volatility: float, sharpe: float) -> list[dict]:
    """One pass as `validate(select_by="growth")` records it, over four years of bars."""
    return [{"timesteps": 128, "sharpe": sharpe, "years": 4.0, "score": growth,
             "score_standard_error": volatility / 2.0}]  # fmt: skip


def incumbent_and_hold(root: Path, hold: float) -> RunDir:
    """A run in `root` whose incumbent validated at log growth 0.30 (volatility 0.20) and whose
    hold contender at `hold` (volatility 0.18), each with a best model."""
    run = RunDir(root)
    for name, entry in (("incumbent", (0.30, 0.20, 1.5)), ("hold", (hold, 0.18, 1.7))):
        folder = run.contender(name)
        folder.root.mkdir()
        folder.validation_history.write_text(json.dumps(growth_history(*entry)))
        folder.best_model.write_bytes(f"best {name}".encode())
    return run


@pytest.mark.parametrize(
    ("incumbent", "kept"),
    [
        # A policy that mostly stands aside: the better Sharpe, a fraction of holding's growth.
        ((0.05, 0.03, 2.8), "hold"),  # holding must beat 0.05 + 1 x 0.03 / 2
        # A policy invested like holding: holding must beat it by its growth's standard error.
        ((0.25, 0.18, 1.6), "incumbent"),  # 0.25 + 0.18 / 2 = 0.34 > 0.30
        ((0.20, 0.18, 1.3), "hold"),  # 0.20 + 0.09 = 0.29 < 0.30
    ],
)
def test_by_growth_holding_beats_a_policy_that_stands_aside(tmp_path, incumbent, kept):
    run = RunDir(tmp_path)
    for name, entry in (("incumbent", incumbent), ("hold", (0.30, 0.18, 1.9))):
        folder = run.contender(name)
        folder.root.mkdir()
        folder.validation_history.write_text(json.dumps(growth_history(*entry)))
        folder.best_model.write_bytes(f"best {name}".encode())
    choice = keep_better_contender(run, rules(hold_margin=1.0, select_by="growth"))
    assert choice["kept"] == kept and choice["select_by"] == "growth"
    assert choice["hold_score_to_beat"] == pytest.approx(incumbent[0] + incumbent[1] / 2)
    assert_adopted(run, run.contender(kept))
    shown = format_contest(choice)
    assert f"holding had to beat log growth {incumbent[0] + incumbent[1] / 2:+.3f} a year" in shown
    assert "hold: log growth +0.300 a year at 128 timesteps" in shown


@pytest.mark.parametrize(
    ("against", "hold", "kept", "to_beat"),
    [
        ("best", 0.39, "incumbent", 0.40),  # the best pass, +0.30, plus 1 x 0.20 / 2
        ("best", 0.41, "hold", 0.40),
        ("median", 0.19, "incumbent", 0.20),  # the median pass, +0.10, plus the same error
        ("median", 0.21, "hold", 0.20),
    ],
)
def test_holding_against_the_median_pass(tmp_path, against, hold, kept, to_beat):
    run = incumbent_of_five_passes_and_hold(tmp_path, hold)
    choice = keep_better_contender(
        run, rules(hold_margin=1.0, select_by="growth", hold_against=against)
    )
    assert choice["kept"] == kept and choice["hold_against"] == against
    assert choice["hold_score_to_beat"] == pytest.approx(to_beat)
    assert_adopted(run, run.contender(kept))
    shown = format_contest(choice)
    assert ("the median pass of the policy" in shown) == (against == "median")


@pytest.mark.parametrize(
    ("against", "hold", "kept", "to_beat"),
    [
        ("best", 0.25, "incumbent", 0.295),  # holding's +0.25 plus 0.5 x 0.18 / 2; best +0.30
        ("best", 0.26, "hold", 0.305),
        ("median", 0.05, "incumbent", 0.095),  # the median pass, +0.10, must beat it
        ("median", 0.06, "hold", 0.105),
    ],
)
def test_where_holding_is_the_prior_the_policys_median_pass_can_be_asked(
    tmp_path, against, hold, kept, to_beat
):
    run = incumbent_of_five_passes_and_hold(tmp_path, hold)
    keys = {"hold_margin": 1.0, "hold_evidence": 0.1, "policy_margin": 0.5}
    choice = keep_better_contender(
        run, rules(select_by="growth", policy_against=against, **keys), Evidence(0.4, 0.5, 0.3)
    )
    assert choice["kept"] == kept and choice["policy_against"] == against
    assert choice["policy_score_to_beat"] == pytest.approx(to_beat)
    assert_adopted(run, run.contender(kept))
    shown = format_contest(choice)
    assert ("the median pass of the incumbent had to beat" in shown) == (against == "median")


@pytest.mark.parametrize(
    ("evidence", "hold", "kept", "clause"),
    [
        # No structure at 0.1: holding is the prior, the policy must beat 0.30 + 0.5 x 0.18 / 2.
        (Evidence(0.4, 0.5, 0.3), 0.30, "hold", "holding was the prior: no test of the training "
         "bars finds structure below 0.1 (momentum p = 0.4, extreme moves p = 0.5, persistence "
         "p = 0.3)"),
        (Evidence(0.4, 1.0), 0.25, "incumbent", "holding was the prior"),  # 0.25 + 0.045 < 0.30
        (Evidence(None, None), 0.25, "incumbent", "holding was the prior: no test of the "
         "training bars finds structure below 0.1 (momentum not measurable, extreme moves not "
         "measurable, persistence not measurable)"),
        (None, 0.30, "hold", "holding was the prior"),  # nothing measured
        # Structure: holding is a contender and must beat 0.30 + 1 x 0.20 / 2 = 0.40.
        (Evidence(0.05, 0.5), 0.39, "incumbent", "holding was a contender: the training bars' "
         "momentum predicts the next decision's return at p = 0.05, below 0.1"),
        (Evidence(0.05, 0.5), 0.41, "hold", "holding was a contender"),
        # A stop's lesson without a trend (crash risk): a contender all the same
        (Evidence(0.4, 0.002), 0.39, "incumbent", "holding was a contender: the training bars' "
         "extreme moves lean to the side a stop guards at p = 0.002, below 0.1"),
        (Evidence(0.01, 0.002), 0.41, "hold", "the training bars' momentum predicts the next "
         "decision's return at p = 0.01 and extreme moves lean to the side a stop guards at "
         "p = 0.002, below 0.1"),
        # A trend the momentum test misses, in the returns' persistence
        (Evidence(0.4, 1.0, 0.02), 0.39, "incumbent", "holding was a contender: the training "
         "bars' returns persist at p = 0.02, below 0.1"),
    ],
)  # fmt: skip
def test_holding_is_the_prior_where_the_training_bars_show_no_structure(
    tmp_path, evidence, hold, kept, clause
):
    run = incumbent_and_hold(tmp_path, hold)
    keys = {"hold_margin": 1.0, "hold_evidence": 0.1, "policy_margin": 0.5}
    choice = keep_better_contender(run, rules(select_by="growth", **keys), evidence)
    assert choice["kept"] == kept
    measured = evidence or Evidence(None, None)
    assert choice["evidence_p_value"] == measured.momentum
    assert choice["tail_p_value"] == measured.tail
    assert choice["persistence_p_value"] == measured.persistence
    assert_adopted(run, run.contender(kept))
    shown = format_contest(choice)
    assert clause in shown
    prior = not measured.shows_structure(0.1)
    assert ("policy_score_to_beat" in choice) == prior != ("hold_score_to_beat" in choice)
    if prior:
        assert choice["policy_score_to_beat"] == pytest.approx(hold + 0.5 * 0.09)
        assert "the incumbent had to beat log growth" in shown and "above holding" in shown
    else:
        assert choice["hold_score_to_beat"] == pytest.approx(0.40)
    unread = keep_better_contender(run, rules(select_by="growth", hold_margin=1.0), evidence)
    assert "hold_evidence_level" not in unread and "prior" not in format_contest(unread)


@pytest.mark.parametrize(
    ("evidence", "kept"),
    [
        (Evidence(0.4, 0.5, 0.3), "hold"),  # no structure: the prior, however well it validated
        (Evidence(0.05, 0.5, 0.3), "incumbent"),  # structure: a contender, 0.30 beats 0.10 + 0.10
    ],
)
def test_an_infinite_policy_margin_keeps_holding_wherever_it_is_the_prior(tmp_path, evidence, kept):
    run = incumbent_and_hold(tmp_path, 0.10)  # the incumbent +0.30 a year, holding +0.10
    keys = {"hold_margin": 1.0, "hold_evidence": 0.1, "policy_margin": math.inf}
    choice = keep_better_contender(run, rules(select_by="growth", **keys), evidence)
    assert choice["kept"] == kept
    assert_adopted(run, run.contender(kept))
    prior = kept == "hold"
    assert choice.get("hold_prior_final", False) == prior and "policy_score_to_beat" not in choice
    recorded = json.loads(run.contest.read_text())  # strict JSON, told the same once read back
    assert format_contest(recorded) == format_contest(choice)
    clause = "no validation score of the incumbent could overrule holding: its margin is infinite"
    assert (clause in format_contest(choice)) == prior
    assert load_config(None, ["train.policy_margin=.inf"]).train.policy_margin == math.inf


@pytest.mark.parametrize(
    ("evidence", "keys", "role"),
    [
        (Evidence(0.4, 0.5, 0.3), {"hold_evidence": 0.1}, "prior"),  # no test below 0.1
        (Evidence(0.4, 0.5, 0.05), {"hold_evidence": 0.1}, "contender"),  # persistence at 0.05
        (Evidence(0.4, 0.05, 0.3), {"hold_evidence": 0.1, "hold_evidence_tail": 0.01}, "prior"),
        (Evidence(0.4, 0.005, 0.3), {"hold_evidence": 0.1, "hold_evidence_tail": 0.01},
         "contender"),
        # Established below hold_unless_evidence: no contender, whatever hold_evidence says
        (Evidence(1e-5, 0.5, 0.3), {"hold_evidence": 0.1, "hold_unless_evidence": 1e-4},
         "stood_down"),
        (Evidence(2e-4, 0.5, 0.3), {"hold_evidence": 0.1, "hold_unless_evidence": 1e-4},
         "contender"),
        (Evidence(0.4, 0.5, 0.3), {}, "contender"),  # no hold_evidence: never the prior
        (NOT_MEASURED, {"hold_evidence": 0.1}, "prior"),  # nothing measured finds nothing
    ],
)  # fmt: skip
def test_holdings_role_is_what_the_contest_makes_of_the_evidence(tmp_path, evidence, keys, role):
    train = rules(select_by="growth", hold_margin=1.0, policy_margin=math.inf, **keys)
    assert hold_role(train, evidence) == role
    run = incumbent_and_hold(tmp_path, 0.42)  # holding validated above the incumbent's 0.30
    kept = keep_better_contender(run, train, evidence)["kept"]
    assert kept == {"prior": "hold", "stood_down": "incumbent", "contender": "hold"}[role]


def policy_and_hold(root: Path, policy: tuple[float, float], hold: float) -> RunDir:
    """A run in `root` whose incumbent validated at log growth `policy[0]` in the market on
    `policy[1]` percent of the validation bars (volatility 0.20), and whose hold contender at
    `hold` (volatility 0.18, always in the market), each with a best model."""
    run = RunDir(root)
    entries = {"incumbent": (*policy[:1], 0.20, 0.5, policy[1]), "hold": (hold, 0.18, 0.5, 100.0)}
    for name, (growth, volatility, sharpe, exposure) in entries.items():
        folder = run.contender(name)
        folder.root.mkdir()
        (entry,) = growth_history(growth, volatility, sharpe)
        folder.validation_history.write_text(json.dumps([{**entry, "exposure_pct": exposure}]))
        folder.best_model.write_bytes(f"best {name}".encode())
    return run


@pytest.mark.parametrize(
    ("policy", "hold", "kept", "to_beat"),
    [
        # Holding fell: half in the market earns half of -0.20 at random, so the policy must
        # beat -0.10 + 0.5 x 0.09, not -0.20 + 0.5 x 0.09 = -0.155
        ((-0.12, 50.0), -0.20, "hold", -0.055),
        ((-0.03, 50.0), -0.20, "incumbent", -0.055),  # its timing earned more than that
        # Always in the market: its exposure earns what holding did, the bar is holding's
        ((-0.12, 100.0), -0.20, "incumbent", -0.155),
        # Holding rose: standing aside is no advantage, the bar is holding's
        ((0.16, 50.0), 0.10, "incumbent", 0.145),
        ((0.14, 50.0), 0.10, "hold", 0.145),
    ],
)
def test_on_a_range_that_fell_the_policy_must_beat_what_its_exposure_earns(
    tmp_path, policy, hold, kept, to_beat
):
    run = policy_and_hold(tmp_path, policy, hold)
    keys = {"hold_margin": 1.0, "hold_evidence": 0.1, "policy_margin": 0.5}
    nothing = Evidence(0.5, 1.0, 0.5)
    matched = rules(select_by="growth", policy_exposure_matched=True, **keys)
    choice = keep_better_contender(run, matched, nothing)
    assert choice["kept"] == kept
    assert choice["policy_score_to_beat"] == pytest.approx(to_beat)
    assert choice["policy_exposure_pct"] == policy[1]
    assert choice["hold_score_at_policy_exposure"] == pytest.approx(policy[1] / 100 * hold)
    assert_adopted(run, run.contender(kept))
    shown = format_contest(choice)
    raised = to_beat > hold + 0.5 * 0.09 + 1e-12
    assert (f"taken over the {policy[1]:.0f}% of the validation bars" in shown) == raised
    plain = keep_better_contender(run, rules(select_by="growth", **keys), nothing)
    assert plain["policy_score_to_beat"] == pytest.approx(hold + 0.5 * 0.09)
    assert "policy_exposure_pct" not in plain and "taken over" not in format_contest(plain)


@pytest.mark.parametrize(
    ("evidence", "kept", "clause"),
    [
        # The trend established beyond the level: holding, a standard error better, stands down
        (Evidence(0.3, 1.0, 6e-8), "incumbent", "holding was no contender: the training bars' "
         "returns persist at p = 6e-08, below 0.0001"),
        (Evidence(5e-5, 1.0, 0.2), "incumbent", "holding was no contender: the training bars' "
         "momentum predicts the next decision's return at p = 5e-05, below 0.0001"),
        # Structure, not established: holding is a contender and wins by its margin
        (Evidence(0.3, 1.0, 9.3e-4), "hold", "holding was a contender: the training bars' "
         "returns persist at p = 0.00093, below 0.1"),
        # Extreme moves are a stop's lesson, which holding does not stand down for
        (Evidence(0.3, 1e-9, 0.2), "hold", "holding was a contender: the training bars' "
         "extreme moves lean to the side a stop guards at p = 1e-09, below 0.1"),
        # No test measurable: holding is the prior, and wins
        (None, "hold", "holding was the prior"),
    ],
)  # fmt: skip
def test_holding_stands_down_where_the_training_bars_establish_a_lesson(
    tmp_path, evidence, kept, clause
):
    run = incumbent_and_hold(tmp_path, 0.42)  # above the incumbent's 0.30 + 1 x 0.10
    keys = {"hold_margin": 1.0, "hold_evidence": 0.1, "policy_margin": 0.5}
    choice = keep_better_contender(
        run, rules(select_by="growth", hold_unless_evidence=1e-4, **keys), evidence
    )
    assert choice["kept"] == kept and choice["hold_unless_evidence_level"] == 1e-4
    stood_down = kept == "incumbent"
    assert choice["hold_stood_down"] == stood_down
    assert ("hold_score_to_beat" in choice) != stood_down or evidence is None
    assert [row["contender"] for row in choice["contenders"]] == ["incumbent", "hold"]
    assert clause in format_contest(choice)
    assert_adopted(run, run.contender(kept))
    without = keep_better_contender(run, rules(select_by="growth", **keys), evidence)
    assert without["kept"] == "hold" and "hold_stood_down" not in without


@pytest.mark.parametrize(
    ("evidence", "kept", "clause"),
    [
        # A test passes at 0.1 but none below 0.01: holding needs a quarter of a standard error
        (Evidence(0.05, 0.5, 0.3), "hold", "holding's margin was the weak-structure one: no "
         "test of the training bars finds structure below 0.01 (momentum p = 0.05, extreme "
         "moves p = 0.5, persistence p = 0.3)"),
        # A test passes below 0.01: the full standard error, which holding does not show
        (Evidence(0.3, 0.5, 0.004), "incumbent", "holding's margin was the full one: the "
         "training bars' returns persist at p = 0.004, below 0.01"),
    ],
)  # fmt: skip
def test_holding_needs_less_where_the_training_bars_structure_is_weak(
    tmp_path, evidence, kept, clause
):
    run = incumbent_and_hold(tmp_path, 0.36)  # above 0.30 + 0.25 x 0.10, below 0.30 + 0.10
    keys = {"hold_margin": 1.0, "hold_evidence": 0.1, "policy_margin": 0.5}
    weak = {"hold_weak_evidence": 0.01, "hold_weak_margin": 0.25}
    choice = keep_better_contender(run, rules(select_by="growth", **keys, **weak), evidence)
    assert choice["kept"] == kept and choice["hold_weak_evidence_level"] == 0.01
    assert choice["hold_structure_weak"] == (kept == "hold")
    margin = 0.25 if kept == "hold" else 1.0
    assert choice["hold_margin_standard_errors"] == margin
    assert choice["hold_score_to_beat"] == pytest.approx(0.30 + margin * 0.10)
    shown = format_contest(choice)
    assert clause in shown and f"{margin:g} standard error" in shown
    assert_adopted(run, run.contender(kept))
    without = keep_better_contender(run, rules(select_by="growth", **keys), evidence)
    assert without["kept"] == "incumbent" and "hold_weak_evidence_level" not in without
    # Where no test passes at 0.1, holding is the prior and the weak margin is not read
    prior = keep_better_contender(
        run, rules(select_by="growth", **keys, **weak), Evidence(0.3, 0.5, 0.4)
    )
    assert prior["kept"] == "hold" and "hold_weak_evidence_level" not in prior


@pytest.mark.parametrize(
    ("keys", "read"),
    [
        ([], False),
        (
            ["train.hold_margin=1", "train.hold_weak_evidence=0.01", "train.hold_weak_margin=0"],
            True,
        ),
        (["train.hold_margin=1"], False),
        (["train.hold_margin=1", "train.hold_unless_evidence=1e-4"], True),
        (["train.hold_margin=1", "train.hold_evidence=0.1"], True),
    ],
)
def test_the_contest_reads_the_training_bars_only_where_a_rule_asks(keys, read):
    cfg = load_config("configs/smoke.yaml", ["env.momentum_horizons=[4,8]", *keys])
    training = RunData.load(cfg).ranges("train", 1, cfg.env.window)
    evidence = contest_evidence(cfg, training)
    assert (evidence is not None) == read
    if read:
        assert evidence.persistence == persistence_evidence(training, 8)


@pytest.mark.parametrize(
    ("per", "kept", "clause"),
    [
        ("test", "incumbent", "holding was a contender: the training bars' returns persist at "
         "p = 0.05, below 0.1"),
        ("family", "hold", "holding was the prior: no test of the training bars finds "
         "structure below 0.1 / 3 = 0.0333 (momentum p = 0.4, extreme moves "
         "p = 0.5, persistence p = 0.05)"),
    ],
)  # fmt: skip
def test_a_family_level_shares_holdings_evidence_among_the_tests(tmp_path, per, kept, clause):
    run = incumbent_and_hold(tmp_path, 0.30)
    keys = {"hold_margin": 1.0, "hold_evidence": 0.1, "policy_margin": 0.5}
    evidence = Evidence(0.4, 0.5, 0.05)
    choice = keep_better_contender(
        run, rules(select_by="growth", hold_evidence_per=per, **keys), evidence
    )
    assert choice["kept"] == kept
    assert choice["hold_evidence_level"] == pytest.approx(0.1 if per == "test" else 0.1 / 3)
    assert choice.get("hold_evidence_family_level") == (0.1 if per == "family" else None)
    assert clause in format_contest(choice)
    assert_adopted(run, run.contender(kept))


@pytest.mark.parametrize(
    ("tail", "kept", "clause"),
    [
        # Below hold_evidence's 0.1, not below the tail's own 0.01: holding is the prior
        (0.03, "hold", "holding was the prior: no test of the training bars finds structure "
         "below 0.1, extreme moves below 0.01 (momentum p = 0.4, extreme moves p = 0.03, "
         "persistence p = 0.5)"),
        # A crash's bars pass far below it: holding is a contender, and loses
        (0.002, "incumbent", "holding was a contender: the training bars' extreme moves lean to "
         "the side a stop guards at p = 0.002, below 0.1, extreme moves below 0.01"),
    ],
)  # fmt: skip
def test_the_extreme_moves_test_can_have_a_level_of_its_own(tmp_path, tail, kept, clause):
    run = incumbent_and_hold(tmp_path, 0.39)  # below the incumbent's 0.30 + 1 x 0.10
    keys = {"hold_margin": 1.0, "hold_evidence": 0.1, "policy_margin": 0.5}
    evidence = Evidence(0.4, tail, 0.5)
    choice = keep_better_contender(
        run, rules(select_by="growth", hold_evidence_tail=0.01, **keys), evidence
    )
    assert choice["kept"] == kept and choice["hold_evidence_tail_level"] == 0.01
    assert clause in format_contest(choice)
    assert_adopted(run, run.contender(kept))
    # Without a level of its own, the tail test is read at hold_evidence's: a contender
    same = keep_better_contender(run, rules(select_by="growth", **keys), evidence)
    assert same["kept"] == "incumbent" and "hold_evidence_tail_level" not in same
    shown = format_contest(same)
    assert f"stop guards at p = {tail:g}, below 0.1" in shown and "extreme moves below" not in shown


@pytest.mark.parametrize(
    ("evidence", "kept", "clause"),
    [
        # A reversal at 0.003, not below its own 1e-4: no evidence, so holding is the prior
        (Evidence(1.0, 0.5, 0.5, momentum_reversal=0.003), "hold", "the training bars' momentum "
         "predicts a reversal at p = 0.003, which counts only below 0.0001"),
        # A continuation at 0.003 is read at holding's 0.1: a contender, and it loses
        (Evidence(0.003, 0.5, 0.5), "incumbent", "holding was a contender: the training bars' "
         "momentum predicts the next decision's return at p = 0.003, below 0.1"),
    ],
)  # fmt: skip
def test_a_reversal_is_evidence_only_below_a_level_of_its_own(tmp_path, evidence, kept, clause):
    run = incumbent_and_hold(tmp_path, 0.36)  # below 0.30 + 1 x 0.10; 0.30 is below 0.36 + 0.045
    keys = {"hold_margin": 1.0, "hold_evidence": 0.1, "policy_margin": 0.5}
    choice = keep_better_contender(
        run, rules(select_by="growth", evidence_reversal=1e-4, **keys), evidence
    )
    assert choice["kept"] == kept and choice["evidence_reversal_level"] == 1e-4
    assert choice.get("momentum_reversal_p_value") == evidence.momentum_reversal
    assert recorded_evidence(choice) == evidence
    assert clause in format_contest(choice)
    assert_adopted(run, run.contender(kept))


def test_a_contest_reads_a_reversal_on_its_own_training_bars():
    """Mean reversion's momentum fit predicts reversal far below any level: at a reversal level
    below its p-value the contest reads no momentum evidence and keeps the p-value it set aside;
    without one, the test reads as before."""
    keys = ["env.momentum_horizons=[16,64]", "train.hold_margin=1", "train.hold_evidence=0.1"]
    ranges = [(generate("mean_reversion", 3000, 0).market, range(0, 3000))]
    plain = contest_evidence(load_config("configs/smoke.yaml", keys), ranges)
    assert plain is not None and plain.momentum is not None and plain.momentum < 1e-10
    assert plain.momentum_reversal is None
    cfg = load_config("configs/smoke.yaml", [*keys, "train.evidence_reversal=1e-20"])
    read = contest_evidence(cfg, ranges)
    assert read is not None and read.momentum == 1.0 and read.momentum_reversal == plain.momentum
    assert read.persistence == plain.persistence and read.tail == plain.tail


def test_a_run_reads_holdings_evidence_on_its_own_training_bars(tmp_path):
    run = tmp_path / "run"
    prior = ["--set", "env.momentum_horizons=[4,8]", "--set", "train.hold_margin=1"]
    assert train(run, *prior, "--set", "train.hold_evidence=1e-9") == 0
    choice = json.loads(RunDir(run).contest.read_text())
    cfg = load_config(RunDir(run).config)
    training = RunData.load(cfg).ranges("train", 1, cfg.env.window)
    assert choice["hold_evidence_level"] == 1e-9 and choice["policy"] == "incumbent"
    assert choice["evidence_p_value"] == pytest.approx(momentum_evidence(cfg, training))
    assert choice["tail_p_value"] == tail_evidence(training, cfg.env.long_only)
    assert choice["persistence_p_value"] == persistence_evidence(training, 8)  # the longest
    hold = next(row for row in choice["contenders"] if row["contender"] == "hold")
    to_beat = choice["policy_score_to_beat"]
    assert to_beat >= hold["best_validation_score"]  # holding's score, plus 0 of its errors
    assert load_config(RunDir(run).contender("incumbent").config).train.hold_evidence is None
    events = EventAccumulator(str(run / "tb" / "challenger"))
    events.Reload()
    for key, test in (("evidence_p_value", "momentum"), ("tail_p_value", "extreme_moves"),
                      ("persistence_p_value", "persistence")):  # fmt: skip
        (logged,) = events.Scalars(f"challenger/evidence_{test}_p")
        assert logged.step == 1 and logged.value == pytest.approx(choice[key])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (['train.challenger=["env.window=8"]'], "a challenger changes only ppo, policy, trunk"),
        (['train.challenger=["train.restarts=2"]'], "other than train.challenger"),
        (['train.challenger=["train.hold_against=median"]'], "train.hold_against"),
        (['train.challenger=["train.policy_against=median"]'], "train.policy_against"),
        (['train.challenger=["ppo.learning_rat=1"]'], "did you mean 'ppo.learning_rate'"),
        (['train.challenger=["ppo.learning_rate=abc"]'], "ppo.learning_rate: expected float"),
        (['train.challenger=["ppo.gamma"]'], "expected KEY=VALUE"),
        (["train.challenger_margin=-1"], "train.challenger_margin: expected a number >= 0"),
        (['train.challenger=["train.hold_margin=1"]'], "other than train.challenger"),
        (["train.hold_margin=-1"], "train.hold_margin: expected a number >= 0, or null"),
        (["train.challenger_evidence=0"], "train.challenger_evidence: expected a p-value level"),
        (["train.challenger_evidence=1.5"], "above 0 and at most 1, or null for none"),
        (['train.challenger=["train.challenger_evidence=0.5"]'], "other than train.challenger"),
        (["train.challenger_prior=0"], "train.challenger_prior: expected a p-value level"),
        (['train.challenger=["train.challenger_prior=0.5"]'], "other than train.challenger"),
        (
            ["train.challenger_prior=0.01", "train.challenger_prior_halves=0"],
            "train.challenger_prior_halves: expected a p-value level",
        ),
        (
            ["train.challenger_prior_halves=0.05"],
            "train.challenger_prior_halves: expected null without a challenger prior",
        ),
        (
            ["train.challenger_prior=0.01", "train.challenger_prior_exposure=101"],
            "train.challenger_prior_exposure: expected a percent of the validation bars",
        ),
        (
            ["train.challenger_prior_exposure=96"],
            "train.challenger_prior_exposure: expected null without a challenger prior",
        ),
        (
            ["train.challenger_prior=0.01", "train.challenger_prior_collapse=either"],
            'train.challenger_prior_collapse: expected "long" without a challenger prior exposure',
        ),
        (
            [
                "train.challenger_prior=0.01",
                "train.challenger_prior_exposure=96",
                "train.challenger_prior_collapse=short",
            ],
            "train.challenger_prior_collapse: expected one of",
        ),
        (["train.challenger_prior_tests=[]"], "train.challenger_prior_tests: expected a list"),
        (
            ["train.challenger_prior_tests=[persistence, persistence]"],
            "each at most once",
        ),
        (["train.challenger_prior_tests=[tail]"], "train.challenger_prior_tests"),
        (
            ["train.hold_margin=1", "train.hold_evidence=0"],
            "train.hold_evidence: expected a p-value",
        ),
        (
            ["train.hold_evidence=0.1"],
            "train.hold_evidence: expected null without a hold contender",
        ),
        (
            ["train.hold_margin=1", "train.policy_margin=-1"],
            "train.policy_margin: expected a number",
        ),
        (['train.challenger=["train.policy_margin=1"]'], "other than train.challenger"),
        (["train.hold_evidence_per=all"], "train.hold_evidence_per: expected one of"),
        (['train.challenger=["train.hold_evidence_per=family"]'], "other than train.challenger"),
        (
            ["train.hold_margin=1", "train.hold_unless_evidence=2"],
            "train.hold_unless_evidence: expected a p-value level",
        ),
        (
            ["train.hold_unless_evidence=1e-4"],
            "train.hold_unless_evidence: expected null without a hold contender",
        ),
        (['train.challenger=["train.hold_unless_evidence=1e-4"]'], "other than train.challenger"),
        (
            ["train.hold_margin=1", "train.hold_evidence_tail=0.01"],
            "train.hold_evidence_tail: expected null without holding's evidence rule",
        ),
        (
            ["train.hold_margin=1", "train.hold_evidence=0.1", "train.hold_evidence_tail=1.5"],
            "train.hold_evidence_tail: expected a p-value level",
        ),
        (['train.challenger=["train.hold_evidence_tail=0.01"]'], "other than train.challenger"),
        (
            ["train.hold_weak_evidence=0.01", "train.hold_weak_margin=0.25"],
            "train.hold_weak_evidence: expected null without a hold contender",
        ),
        (
            [
                "train.hold_margin=1",
                "train.hold_evidence=0.1",
                "train.hold_weak_evidence=0.1",
                "train.hold_weak_margin=0.25",
            ],
            "train.hold_weak_evidence: expected a level below train.hold_evidence",
        ),
        (
            ["train.hold_margin=1", "train.hold_weak_margin=0.25"],
            "train.hold_weak_margin: expected a number with train.hold_weak_evidence",
        ),
        (
            ["train.hold_margin=1", "train.hold_weak_evidence=0.01"],
            "train.hold_weak_margin: expected a number with train.hold_weak_evidence",
        ),
        (
            ["train.hold_margin=1", "train.hold_weak_evidence=0.01", "train.hold_weak_margin=-1"],
            "train.hold_weak_margin: expected a number >= 0",
        ),
        (['train.challenger=["train.hold_weak_margin=0"]'], "other than train.challenger"),
        (
            ["train.evidence_reversal=1e-4"],
            "train.evidence_reversal: expected null without a contest",
        ),
        (
            ["train.hold_margin=1", "train.evidence_reversal=0"],
            "train.evidence_reversal: expected a p-value level",
        ),
        (['train.challenger=["train.evidence_reversal=1e-4"]'], "other than train.challenger"),
        (
            ["train.hold_margin=1", "train.policy_exposure_matched=true"],
            "train.policy_exposure_matched: expected false without holding's evidence rule",
        ),
        (
            [
                "train.hold_margin=1",
                "train.hold_evidence=0.1",
                "train.select_by=sharpe",
                "train.policy_exposure_matched=true",
            ],
            "train.policy_exposure_matched: expected false unless train.select_by is growth",
        ),
        (
            [
                "train.hold_margin=1",
                "train.hold_evidence=0.1",
                "train.select_by=growth",
                "train.policy_against=median",
                "train.policy_exposure_matched=true",
            ],
            "and train.policy_against is best",
        ),
        (
            ['train.challenger=["train.policy_exposure_matched=true"]'],
            "other than train.challenger",
        ),
    ],
)
def test_a_bad_contest_is_one_line_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=r"train\.(challenger|hold|policy|evidence)") as error:
        load_config("configs/smoke.yaml", overrides)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_challenger_config_applies_the_overrides_and_has_no_challenger():
    cfg = load_config("configs/smoke.yaml", ['train.challenger=["ppo.gamma=0.9"]'])
    assert challenger_config(cfg).ppo.gamma == 0.9
    assert challenger_config(cfg).train.challenger == ()
