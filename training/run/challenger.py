"""A contest: the trained policy against a challenger and against holding, each kept only when
validation, read beside the training bars' evidence, says so.

A run whose config has `train.challenger` or `train.hold_margin` ships one of its contenders:

- the incumbent: the config without its contest (`train.challenger`, `train.hold_margin`);
- the challenger: that config with the overrides in `train.challenger`
  (`training.config.challenger_config`), trained from the same seed;
- holding: a policy of the same architecture that always chooses the env's hold action (long at
  the leverage nearest 1x with the widest stop, sized by the volatility budget where there is
  one; `DecisionHeads.always`), built rather than trained and validated once (`prepare_hold`).

Each contender is ranked by its best validation pass's score (`train.select_by`: the Sharpe
ratio, or the annualised log growth; `training.evaluation.selection.validation_score`), and
every margin is in standard errors of that score for the contender to beat, over the validation
bars. About 1,000 validation bars measure a Sharpe ratio to +-0.5, so validation tells a real
edge from a lucky one only where the difference is large. Each comparison therefore has a prior,
the contender kept unless the other beats it by the margin, and tests of the training bars
(`training.run.evidence`: their momentum predicting the next decision's return, their returns
persisting over the longest momentum horizon, their extreme moves leaning to the side a stop
guards) set which contender that is; with `train.evidence_reversal`, a momentum fit that
predicts reversal counts only below that level (`training.run.evidence.momentum_evidence`).
`keep_better_contender` holds the contest in two steps.

1. **The incumbent against the challenger.** The incumbent is the prior: the challenger is kept
   when it beats the incumbent by `train.challenger_margin`, and with `challenger_evidence`
   only where the training bars' momentum test passes at that p-value. With `challenger_prior`
   the roles turn where a test of `challenger_prior_tests` finds past returns predicting later
   ones at that level (`Evidence.predicts_returns`), narrowed by `challenger_prior_halves`
   (each half of the training bars finds it too) and `challenger_prior_exposure` (the
   incumbent's best pass was in the market on at least that percent of the validation bars, or
   with `challenger_prior_collapse` "either" flat on that percent: `collapsed`). The default's
   challenger learns what every direction paid (`training.run.outcomes`): it rescues a trend
   whose plain learner collapsed to always long, and fits the noise of bars that pass a test by
   chance, so it leads only where both the bars and the incumbent point to the collapse.
2. **Holding against the policy step 1 kept.** Where a test finds past returns predicting later
   ones below `hold_unless_evidence`, holding is no contender: the bars establish a lesson
   holding cannot take. Elsewhere, where some test finds structure at `hold_evidence` (the
   extreme-move test at `hold_evidence_tail` where set; with `hold_evidence_per` "family", each
   test at its Bonferroni share), holding is a contender: kept when it beats the policy's best
   pass (with `hold_against` "median", the median of its passes) by `hold_margin`, or by
   `hold_weak_margin` where no test finds structure at `hold_weak_evidence`. Where no test
   finds structure, holding is the prior: the policy stays only when its best pass (with
   `policy_against` "median", its median pass) beats holding by `policy_margin` (an infinite
   one keeps holding there whatever the policy validated: `hold_prior_final`); with
   `policy_exposure_matched`, where holding's score fell below zero, it must beat the higher
   of that score and its own exposure's share of it (what standing aside as often earns at
   random on a range that fell) by the same margin. A policy trained on bars that show nothing
   to learn has mostly learned their noise; where the bars show something, validation has to
   show that holding is better.

Without `hold_evidence` holding is a contender wherever it is not stood down. A trained
contender without a finite best pass (it never held a position, or never validated) counts as
flat, score 0 with the standard error of a Sharpe ratio, when it is the one to beat, and is never
kept over another.

Why each key of the default config has its value, and what every variant read did to the
learning benchmark's targets, is measured in benchmarks/RESULTS.md ("Learning": the default's
chain of changes and "What each part of the default did"); `configs/default.yaml` names the
configuration that chose each value.

Each trained contender runs as an ordinary run folder, `<run>/incumbent/` and
`<run>/challenger/` (`RunDir.contender`), and the hold policy is written to `<run>/hold/`. Then
`keep_better_contender` copies the kept one's best model and validation history to the run's own
(so the run reads like a single one: backtests, `--resume`, the benchmarks), and writes what was
compared to `challenger.json`, which `training.run.contest_report` tells in the training log and
in TensorBoard. With `train.restarts` > 1 the incumbent is a restarts run of its own
(`training.run.restarts`): trained from that many seeds in `<run>/incumbent/restart_<n>/`, the
one whose best pass scores highest is the incumbent; the challenger trains once. With
`train.vote` the incumbent competes as its restart 1 (`ranked_folder`), and where it is kept the
run ships the vote of its restarts and the challenger instead (`training.run.vote`), recorded in
`challenger.json` as `vote`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from envs import MarketData, TradingEnv
from training.config import (
    NO_CONTEST,
    Collapse,
    PassScore,
    RunConfig,
    TrainConfig,
    challenger_config,
    save_config,
)
from training.evaluation.selection import best_pass, pass_score
from training.evaluation.validation import read_validation_history, validate_policy
from training.run.atomic import write_bytes_atomic, write_json_atomic
from training.run.evidence import Evidence, training_evidence
from training.run.folder import RunDir, build_policy
from training.run.model_file import write_model_file
from training.run.restarts import adopt
from training.run.vote import ship_vote

CONTENDERS = ("incumbent", "challenger", "hold")  # in the order they are compared
TRAINED = CONTENDERS[:2]  # the contenders PPO trains; the hold policy is built
# Each test of `training.run.evidence` (an `Evidence` field): the key of its p-value in
# `challenger.json`, and the name it is logged under in TensorBoard
EVIDENCE_RECORD = {
    "momentum": ("evidence_p_value", "momentum"),
    "tail": ("tail_p_value", "extreme_moves"),
    "persistence": ("persistence_p_value", "persistence"),
    "halves": ("halves_p_value", "halves"),
    "momentum_reversal": ("momentum_reversal_p_value", "momentum_reversal"),
}
NOT_MEASURED = Evidence(None, None, None)  # the contest's evidence where the run read none
# The part holding takes in the contest's second step (`hold_role`)
HoldRole = Literal["stood_down", "contender", "prior"]


def contender_configs(cfg: RunConfig, run: RunDir) -> dict[str, RunConfig]:
    """The configs of `run`'s trained contenders by name, each in its own folder: the incumbent
    (`cfg` without its contest, with its `train.restarts`) and, with `train.challenger`, the
    challenger (`challenger_config`, one training)."""
    incumbent = _in_folder(cfg, run.contender("incumbent"), cfg.train.restarts)
    configs = {"incumbent": incumbent}
    if cfg.train.challenger:
        configs["challenger"] = _in_folder(challenger_config(cfg), run.contender("challenger"))
    return configs


def contest_configs(cfg: RunConfig, run: RunDir) -> dict[str, RunConfig]:
    """The config of every contender `cfg`'s contest trains or builds in `run`, by name: those of
    `contender_configs` and, with `train.hold_margin`, the hold contender's (`cfg` without its
    contest, in `<run>/hold/`, as `prepare_hold` writes it)."""
    configs = contender_configs(cfg, run)
    if cfg.train.hold_margin is not None:
        configs["hold"] = _in_folder(cfg, run.contender("hold"))
    return configs


def prepare_hold(cfg: RunConfig, run: RunDir, validation_envs: Mapping[str, TradingEnv]) -> bool:
    """Write `run`'s hold contender to `<run>/hold/`: the policy of `cfg`'s architecture that
    always chooses `cfg.env.hold_action` (its final model, 0 timesteps), its config and splits,
    and one validation pass over `validation_envs`. Left as it is when that pass exists already
    (a resumed run). Returns whether it was written now."""
    hold = run.contender("hold")
    if read_validation_history(hold):
        return False
    save_config(_in_folder(cfg, hold), hold.config)
    write_bytes_atomic(hold.splits, run.splits.read_bytes())
    policy = build_policy(cfg)
    policy.decision_heads.always(cfg.env.hold_action)
    policy.set_training_mode(False)
    write_model_file(hold.final_model, policy, 0)
    validate_policy(policy, 0, validation_envs, hold, select_by=cfg.train.select_by)
    return True


def contest_evidence(cfg: RunConfig, ranges: Sequence[tuple[MarketData, range]]) -> Evidence | None:
    """`training_evidence` of the training `ranges` where `cfg`'s contest reads it (a
    `train.challenger` with a `train.challenger_evidence` or a `train.challenger_prior`, or a
    `train.hold_evidence`, `train.hold_unless_evidence` or `train.hold_weak_evidence`); None,
    and nothing fitted, elsewhere."""
    train = cfg.train
    challenger_reads = bool(train.challenger) and (
        train.challenger_evidence is not None or train.challenger_prior is not None
    )
    hold_reads = (train.hold_evidence, train.hold_unless_evidence, train.hold_weak_evidence)
    if not challenger_reads and all(level is None for level in hold_reads):
        return None
    halves = challenger_reads and train.challenger_prior_halves is not None
    return training_evidence(cfg, ranges, halves=halves, reversal_level=train.evidence_reversal)


def evidence_admits(evidence: float | None, level: float | None) -> bool:
    """Whether the training bars' momentum `evidence` (a p-value, or None: not measurable)
    establishes what the challenger's gate asks at `level` (`train.challenger_evidence`):
    always without a `level`, else only where `evidence` is below it."""
    return level is None or (evidence is not None and evidence < level)


def collapsed(exposure_pct: float | None, level: float, collapse: Collapse = "long") -> bool:
    """Whether a best validation pass in the market on `exposure_pct` percent of the validation
    bars (None: no finite pass, never in the market) was so at `level` percent or more
    (`train.challenger_prior_exposure`): the always-long collapse validates like holding. With
    `collapse` "either" (`train.challenger_prior_collapse`) a pass flat on `level` percent of
    the bars or more counts too: a head collapsed to always flat validates like cash."""
    exposure = exposure_pct or 0.0
    flat = flat_bound(level, collapse)
    return exposure >= level or (flat is not None and exposure <= flat)


def flat_bound(level: float, collapse: Collapse) -> float | None:
    """The exposure percent at or below which a best pass counts as collapsed to always flat
    (flat on `level` percent of the bars or more) under `collapse`; None where only the
    always-long collapse counts (`collapse` "long")."""
    return 100.0 - level if collapse == "either" else None


def _in_folder(cfg: RunConfig, folder: RunDir, restarts: int = 1) -> RunConfig:
    """`cfg` without a contest of its own (no challenger, no hold), run in `folder` with
    `restarts` trainings."""
    train = dataclasses.replace(
        cfg.train, **NO_CONTEST, restarts=restarts, run_dir=str(folder.root)
    )
    return dataclasses.replace(cfg, train=train)


@dataclasses.dataclass
class _Standings:
    """Each contender's validation history and the figures of its best pass, as the contest
    compares them: `rows` (what `challenger.json` lists), the best pass's standard error and
    exposure, and the validation range's length in years."""

    histories: dict[str, list[dict[str, Any]]]
    rows: dict[str, dict[str, Any]]
    standard_errors: dict[str, float]
    exposures: dict[str, float | None]
    years: float | None

    @classmethod
    def read(cls, folders: Mapping[str, RunDir]) -> _Standings:
        """The standings of the contenders in `folders` (name -> the folder that ranks it),
        from their validation histories."""
        histories = {name: read_validation_history(folder) for name, folder in folders.items()}
        rows: dict[str, dict[str, Any]] = {}
        standard_errors: dict[str, float] = {}
        exposures: dict[str, float | None] = {}
        for name, history in histories.items():
            best = best_pass(history)
            entry = history[best] if best is not None else {}
            rows[name] = {
                "contender": name,
                "best_validation_score": pass_score(entry) if entry else None,
                "best_validation_sharpe": entry.get("sharpe"),
                "timesteps": entry.get("timesteps"),
                "validation_passes": len(history),
                "long_share_pct": entry.get("long_share_pct"),
            }
            standard_errors[name] = (
                entry.get("score_standard_error", math.nan) if entry else math.nan
            )
            exposures[name] = entry.get("exposure_pct") if entry else None
        entries = [entry for history in histories.values() for entry in history]
        years = next((entry["years"] for entry in entries if entry["years"]), None)
        return cls(histories, rows, standard_errors, exposures, years)

    def score(self, name: str, of: PassScore = "best") -> float | None:
        """`name`'s best pass's score, or with `of` "median" the median of its passes' finite
        scores (None: no finite pass)."""
        if of == "median":
            finite = [value for value in map(pass_score, self.histories[name]) if value is not None]
            return statistics.median(finite) if finite else None
        best_score: float | None = self.rows[name]["best_validation_score"]
        return best_score

    def bar(self, kept: str, margin: float, against: PassScore = "best") -> float:
        """The score that beats `kept`'s (its best pass's, or the median of its passes') by
        `margin` of its standard errors; a `kept` without a finite pass counts as flat, score 0
        with the standard error of a Sharpe ratio."""
        error = self.standard_errors[kept]
        if not math.isfinite(error):  # flat, or a history written before scores had one
            error = 1.0 / math.sqrt(self.years) if self.years else math.inf
        return (self.score(kept, against) or 0.0) + margin * error

    def beats(self, name: str, to_beat: float, of: PassScore = "best") -> bool:
        """Whether `name`'s score (`score`) exceeds `to_beat`; never without a finite pass."""
        found = self.score(name, of)
        return found is not None and found > to_beat


def keep_better_contender(
    run: RunDir, rules: TrainConfig, evidence: Evidence | None = None
) -> dict[str, Any]:
    """Give `run` the model and validation history of the contender it keeps by the contest
    keys of `rules` (the module docstring's two steps, `_challenger_step` then `_hold_step`);
    returns what was compared, which it also writes to `run.contest`.

    The contenders are those of `CONTENDERS` with a folder in `run` (holding only with
    `rules.hold_margin`), each ranked by its best pass's validation score as the passes recorded
    it. `evidence` is the training bars' (`contest_evidence`); None reads as not measured, so no
    test passes. With `rules.vote`, a kept incumbent ships as a vote (`ship_vote`).
    """
    measured = evidence if evidence is not None else NOT_MEASURED
    names = [name for name in CONTENDERS if run.contender(name).root.is_dir()]
    if rules.hold_margin is None and "hold" in names:
        names.remove("hold")
    folders = {name: ranked_folder(run, name, rules) for name in names}
    standings = _Standings.read(folders)
    kept = "incumbent"
    choice: dict[str, Any] = {
        "select_by": rules.select_by,
        "margin_standard_errors": rules.challenger_margin,
        "score_to_beat": None,
    }
    if rules.evidence_reversal is not None:
        choice["evidence_reversal_level"] = rules.evidence_reversal
        choice.update(evidence_record(measured))
    if "challenger" in standings.rows:
        kept = _challenger_step(standings, rules, measured, choice)
    if "hold" in standings.rows:
        kept = _hold_step(standings, rules, measured, kept, choice)
    adopt(run, folders[kept], standings.histories[kept])
    choice = {"kept": kept, **choice, "contenders": list(standings.rows.values())}
    if rules.vote:
        choice["incumbent_restart"] = 1  # `ranked_folder`
    if (members := ship_vote(run, rules, kept)) is not None:
        choice["vote"] = members
    write_json_atomic(run.contest, choice)
    return choice


def ranked_folder(run: RunDir, name: str, rules: TrainConfig) -> RunDir:
    """The folder whose validation history ranks contender `name` of `run`, and whose model the
    run adopts where it is kept: the contender's own, but under `rules.vote` the incumbent's
    restart 1 (`train.seed`'s). A vote chooses no restart, and the best of several restarts'
    validation scores is biased upwards, so the incumbent competes as the restart no one
    chose, as it does with one training."""
    folder = run.contender(name)
    return folder.restart(1) if name == "incumbent" and rules.vote else folder


def _challenger_step(
    standings: _Standings, rules: TrainConfig, measured: Evidence, choice: dict[str, Any]
) -> str:
    """Step 1: the incumbent against the challenger; returns the one kept and records in
    `choice` the evidence read, whether the challenger led and the score to beat."""
    if rules.challenger_evidence is not None:
        choice["evidence_level"] = rules.challenger_evidence
        choice["evidence_p_value"] = measured.momentum
    admitted = evidence_admits(measured.momentum, rules.challenger_evidence)
    led = False
    if rules.challenger_prior is not None:
        choice["challenger_prior_level"] = rules.challenger_prior
        choice.update(evidence_record(measured))
        choice["challenger_prior_tests"] = list(rules.challenger_prior_tests)
        led = admitted and measured.predicts_returns(
            rules.challenger_prior, rules.challenger_prior_tests
        )
        if rules.challenger_prior_halves is not None:
            choice["challenger_prior_halves_level"] = rules.challenger_prior_halves
            led = led and measured.predicts_in_halves(rules.challenger_prior_halves)
        if rules.challenger_prior_exposure is not None:
            exposure = standings.exposures.get("incumbent")
            choice["challenger_prior_exposure_level"] = rules.challenger_prior_exposure
            choice["challenger_prior_collapse"] = rules.challenger_prior_collapse
            choice["incumbent_exposure_pct"] = exposure
            led = led and collapsed(
                exposure, rules.challenger_prior_exposure, rules.challenger_prior_collapse
            )
        led = led and standings.rows["challenger"]["best_validation_score"] is not None
        choice["challenger_led"] = led
    if led:  # the challenger is the prior: the incumbent must show it is better
        to_beat = standings.bar("challenger", rules.challenger_margin)
        kept = "incumbent" if standings.beats("incumbent", to_beat) else "challenger"
    else:
        to_beat = standings.bar("incumbent", rules.challenger_margin)
        kept = "challenger" if admitted and standings.beats("challenger", to_beat) else "incumbent"
    choice["score_to_beat"] = to_beat if math.isfinite(to_beat) else None
    return kept


def hold_role(rules: TrainConfig, measured: Evidence) -> HoldRole:
    """The part holding takes in step 2 of the contest (module doc) by the training bars'
    evidence `measured`, under `rules` (a run's `train` config): "stood_down" where a test finds
    past returns predicting later ones below `hold_unless_evidence`, "prior" where no test finds
    structure at `hold_evidence` (the extreme-move test at `hold_evidence_tail` where set),
    "contender" elsewhere and wherever `hold_evidence` is None. Where it is the prior and
    `policy_margin` is infinite, holding is kept whatever a policy validated."""
    if rules.hold_unless_evidence is not None and measured.predicts_returns(
        rules.hold_unless_evidence
    ):
        return "stood_down"
    if rules.hold_evidence is None:
        return "contender"
    level = measured.level_per_test(rules.hold_evidence, rules.hold_evidence_per)
    return "contender" if measured.shows_structure(level, rules.hold_evidence_tail) else "prior"


def _hold_step(
    standings: _Standings,
    rules: TrainConfig,
    measured: Evidence,
    kept: str,
    choice: dict[str, Any],
) -> str:
    """Step 2: holding against `kept`, the policy step 1 kept: stood down, a contender or the
    prior by the training bars' evidence; returns the one kept and records in `choice` the
    levels read, which of the three holding was and the score to beat."""
    choice["hold_margin_standard_errors"] = rules.hold_margin
    choice["hold_against"] = rules.hold_against
    role = hold_role(rules, measured)
    if rules.hold_unless_evidence is not None:
        choice["hold_unless_evidence_level"] = rules.hold_unless_evidence
        choice.update(evidence_record(measured))
        choice["hold_stood_down"] = role == "stood_down"
    if rules.hold_evidence is not None:
        choice["hold_evidence_level"] = measured.level_per_test(
            rules.hold_evidence, rules.hold_evidence_per
        )
        if rules.hold_evidence_per == "family":
            choice["hold_evidence_family_level"] = rules.hold_evidence
        if rules.hold_evidence_tail is not None:
            choice["hold_evidence_tail_level"] = rules.hold_evidence_tail
        choice.update(evidence_record(measured))
    if role == "stood_down":  # the bars establish a lesson holding cannot take: no contender
        return kept
    if role == "prior":  # holding is the prior: the policy must show it is better
        choice["policy"] = kept
        if math.isinf(rules.policy_margin):  # no validation overrules the prior
            choice["hold_prior_final"] = True
            return "hold"
        to_beat = standings.bar("hold", rules.policy_margin)
        choice["policy_margin_standard_errors"] = rules.policy_margin
        choice["policy_against"] = rules.policy_against
        if rules.policy_exposure_matched:
            to_beat += _exposure_shortfall(standings, kept, choice)
        choice["policy_score_to_beat"] = to_beat if math.isfinite(to_beat) else None
        return kept if standings.beats(kept, to_beat, rules.policy_against) else "hold"
    margin = rules.hold_margin or 0.0
    if rules.hold_weak_evidence is not None and rules.hold_weak_margin is not None:
        weak_level = measured.level_per_test(rules.hold_weak_evidence, rules.hold_evidence_per)
        choice["hold_weak_evidence_level"] = weak_level
        choice.update(evidence_record(measured))
        choice["hold_structure_weak"] = not measured.shows_structure(weak_level)
        if choice["hold_structure_weak"]:
            margin = rules.hold_weak_margin
            choice["hold_margin_standard_errors"] = margin
    to_beat = standings.bar(kept, margin, rules.hold_against)
    choice["hold_score_to_beat"] = to_beat if math.isfinite(to_beat) else None
    return "hold" if standings.beats("hold", to_beat) else kept


def _exposure_shortfall(standings: _Standings, policy: str, choice: dict[str, Any]) -> float:
    """How far holding's score falls short of what `policy`'s exposure would have earned of it
    at random (`train.policy_exposure_matched`): ``max(0, (e - 1) * g)``, e the share of the
    validation bars `policy`'s best pass was in the market and g holding's log growth, so that
    ``g + shortfall = max(g, e * g)``; 0 where holding did not fall. Records e and ``e * g`` in
    `choice`."""
    exposure = standings.exposures.get(policy)
    held = standings.score("hold") or 0.0
    matched = (exposure or 0.0) / 100.0 * held
    choice["policy_exposure_pct"] = exposure
    choice["hold_score_at_policy_exposure"] = matched
    return max(0.0, matched - held)


def read_contest(run: RunDir) -> dict[str, Any] | None:
    """What `keep_better_contender` recorded in `run` (`run.contest`), or None where the run
    held no contest."""
    return json.loads(run.contest.read_text()) if run.contest.is_file() else None


def evidence_record(evidence: Evidence) -> dict[str, float | None]:
    """`evidence` as a contest records it in `challenger.json` (`EVIDENCE_RECORD`'s keys; read
    back by `recorded_evidence`): every test's p-value, and the discounted reversal's
    (`Evidence.momentum_reversal`) only where there is one."""
    return {
        key: value
        for test, (key, _) in EVIDENCE_RECORD.items()
        if (value := getattr(evidence, test)) is not None or test != "momentum_reversal"
    }


def recorded_evidence(choice: Mapping[str, Any]) -> Evidence:
    """The evidence a contest recorded (`keep_better_contender`'s `choice`, `challenger.json`):
    None for each test it did not record."""
    return Evidence(**{test: choice.get(key) for test, (key, _) in EVIDENCE_RECORD.items()})
