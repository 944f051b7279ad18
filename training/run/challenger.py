"""A contest: the trained policy against a challenger and against holding, kept only when
validation shows it better.

A learner that is better on some series and worse on others (the every-direction loss of
`training.run.outcomes`: it rescues a trend agent whose direction head collapsed to always-long,
and makes random-walk agents trade their noise, benchmarks/RESULTS.md) cannot simply replace the
default. Validation can tell the two cases apart only where the difference is large: 1,000
validation bars measure a Sharpe ratio to about +-0.5. So the run trains both and keeps the
challenger only when its best validation pass beats the incumbent's by `train.challenger_margin`
standard errors of a Sharpe ratio over the validation bars, ``margin / sqrt(years)`` (the
standard error of an annualised Sharpe near zero over `years` of returns, Lo 2002), and the
incumbent otherwise: the usual model, unless the evidence against it is clear.

With `train.challenger_evidence`, the challenger may win only where the training bars hint at
what it learns: where their momentum predicts the next decision's return at that p-value, by
the direction teacher's test (`training.run.evidence.momentum_evidence`), a level far looser
than the one at which the teacher itself teaches. Elsewhere the incumbent is kept, whatever
validation says. The every-direction loss learns whatever paid on the training states, a trend
the teacher's test cannot establish and a random walk's noise alike, and validation tells them
apart only where the difference is large. Over 337 runs of the learning benchmark 7 of the 9
challengers that won on trend series had the bars' momentum at p 0.001-0.06, and 7 of the 8
that won on random walks at p 0.15-0.65; at 0.1 the rule rescued five random walks and lost a
trend and a random-walk series there. On held-out seeds whose training bars give p >= 0.1 it
lost trend hits and changed no random walk (benchmarks/RESULTS.md, twenty-sixth round), so the
default config leaves it unset. Those p-values were the teacher's own weights' (Bartlett's),
which come out smaller than today's test's (`training.run.teacher.overlap_weights`).

With `train.challenger_prior`, the burden turns the other way where the training bars'
returns predict later ones at that p-value (their momentum predicting the next decision's
return, or their returns persisting over the longest momentum horizon;
`Evidence.predicts_returns`): the challenger is the prior there, and the incumbent stays only
when its best pass beats the challenger's by `train.challenger_margin`. On such bars the
every-direction learner has structure to learn, and the plain learner's failure is a direction
head collapsed to always long, which validates like holding. At 0.01 the tests pass on 84% of
the benchmark's trend series and every mean-reversion series, and on 2.5-3.5% of random walks,
turbulence and crash-risk series (their false alarms). Read exactly off trained runs it rescued
6 of 10 trend misses over 50 trend series and lost no trend hit; on the false alarms, where
the every-direction learner fits noise, it lost 6 targets of 19 such series
(benchmarks/RESULTS.md, thirty-fifth round): about twelve trend hits gained per hundred trend
series, and about one target lost per hundred random walks, turbulence or crash-risk series.
Misses rise there, so the default config sets it only with the exposure condition below.
With `train.challenger_prior_halves` the challenger leads only where each half of the training
bars shows the same at that looser level too (`Evidence.predicts_in_halves`): a
trend's regimes recur through both halves, noise that lines up by chance rarely does. At 0.05
beside a prior of 0.01 it passes on 1 random walk, 2 turbulence series and no crash-risk series
of 200, and on 113 trend series of 200; read off the same runs it kept 3 of the 6 trend rescues
and lost none of the 19 false alarms' targets (benchmarks/RESULTS.md, thirty-sixth round).
With `train.challenger_prior_exposure` it leads only where the incumbent's best validation pass
was also in the market on at least that percent of the validation bars (`collapsed`): the
failure the challenger rescues is a direction head collapsed to always long, and an incumbent
that stands aside on part of the bars learned something of its own. At 96% held out it kept
every turbulence and crash-risk target the prior alone lost, and rescued 2 of 5 trend misses of
20, but lost 8 of 17 random walks whose bars passed the prior's tests: a random walk's incumbent
holds, and holding is as exposed as the collapse (benchmarks/RESULTS.md, thirty-seventh round).
Over four held-out rounds at 0.01 and 96% it cut trend misses from 17 to 11 of 135 and lost
about 0.5 random walks in 100, which raises the chance that five seeds of every kind meet every
worst-seed target, and the default config sets both (C146, forty-third round).
With `train.challenger_prior_collapse` "either", an incumbent whose best pass was flat on at
least that percent of the bars counts as collapsed too: trend 2110's incumbent, one of the
default's misses, validated 0% exposed on a validation range that fell, so it beat holding
(benchmarks/RESULTS.md, fortieth round).
`train.challenger_prior_tests` names the tests the prior reads: the persistence test alone, at
any level from 0.003 to 0.0003, still led on a turbulence series whose returns persisted by
chance, and lost it (benchmarks/RESULTS.md, thirty-seventh round).

Holding is a contender too, with `train.hold_margin`: a policy of the same architecture that
always chooses the env's hold action (long at the leverage nearest 1x with the widest stop, no
stop where there is such a level; sized by the volatility budget when there is one), built
rather than trained (`DecisionHeads.always`) and validated once on the same bars. It is kept,
instead of the policy the contest kept so far, only when its validation Sharpe beats that
policy's best pass (or, with `train.hold_against` "median", the median of its passes) by
``hold_margin / sqrt(years)``. A policy that learned nothing (a random walk's, which stands aside
on noise) can validate clearly below holding; the run then ships what holding earns rather than
a policy that validation shows worse. A policy with an edge that
validation cannot confirm is kept (benchmarks/RESULTS.md, seventeenth round). The best pass of a
trained policy is the best of several, so the comparison leans towards the policy: the margin is
the evidence holding must add to that; against the median pass, the comparison no longer
leans, and the margin is all the evidence holding must show.

With `train.hold_evidence`, the burden turns where the training bars show nothing to learn:
where no test of `training.run.evidence` finds structure in them at that p-value (neither their
momentum predicting the next decision's return, the test of `train.challenger_evidence`, nor
their extreme moves leaning to the side a stop guards, nor their returns persisting over the
longest momentum horizon), holding is the prior, and the policy the contest kept so far stays
only when its best pass beats holding's score by `train.policy_margin` standard errors of
holding's. A random walk's bars, and a turbulence series' (whose drift is the same in calm and
turbulent spells: the volatility budget, which holding shares, does the de-levering), show
structure only by the tests' false alarms (one in eight and three in ten at 0.1); a policy trained
there has little but noise to learn, and validation decides between it and holding only where
the difference is clear. Where a test passes, holding is a contender as above. With the momentum
test alone, at 0.1 and a margin of 0.5 (C105), the rule sent four of five crash-risk agents that
had learned part of the stop's edge to holding, beside rescuing 11 random-walk and turbulence
misses and losing 7 of 19 trend hits on such bars (benchmarks/RESULTS.md, twenty-seventh round);
the tail test finds every crash-risk series of 200, and the persistence test 15 of the 18 trend
hits the first two tests lost, and the default config sets 0.1 with a margin of 0.5 (C107,
twenty-eighth round). With the momentum test sized at its level (C108, twenty-ninth round) the
rule reaches the random walks whose chance momentum the old test called significant, the likely
misses among them. With `train.policy_against` "median" the policy must show it with the median
of its validation passes rather than the best: a policy that fitted noise validates well only on
its luckiest pass. Read held out (C143, benchmarks/RESULTS.md, forty-first round) it sent four
turbulence policies to holding, two of them near misses, and lost two of the three trend hits
on 14 trend series whose bars show no structure: trend challengers that learned their lesson
validated like that too, so the default config keeps `best`.

`train.hold_evidence_tail` reads the tail test at a level of its own there. A crash's bars
pass it far below the level its false alarms reach: on seeds 0-999 of the learning benchmark's
crash-risk series it is below 0.01 on 976, while on turbulence series (seeds 8000-9999), whose
extremes at the switches into turbulent spells are of either sign, it is below 0.1 on 10.6% and
below 0.01 on 1.2%. Where it alone passes at `train.hold_evidence`, holding is a contender on
what is most often a false alarm. At 0.01 (C151, the default config; benchmarks/RESULTS.md,
forty-sixth round), on the 62 turbulence series of 1,000 where it alone passes between 0.01 and
0.1, misses fell from 13 to 5 with none lost; on the 16 such crash-risk series of 1,000, 13
policies that had learned part of a stop's edge went to holding, which they did not validate
half a standard error above, and 6 fell below a fresh share of 0.3.

At the other end, `train.hold_unless_evidence` stands holding down where the training bars
establish what a policy can learn: where their momentum or persistence test (the predicting
tests) passes below that level, holding is no contender, and validation chooses among the
trained policies alone. A trend's bars often pass far below the levels the tests rarely reach
on bars without one (below 1e-4 on one of 2,000 random walks and turbulence series screened),
and there holding's validation win is the validation range's luck: on trend 7003 and 7023
(persistence p 6e-8) holding was kept by a standard error and took none of the edge, where the
incumbents it replaced took 0.83 and 0.94 of it (benchmarks/RESULTS.md, forty-second round).

With `train.hold_weak_evidence` and `train.hold_weak_margin`, holding's margin follows the
evidence between those two ends: where a test finds structure (at `train.hold_evidence`) but
none below `hold_weak_evidence`, holding must validate `hold_weak_margin` standard errors above
the policy instead of `hold_margin`. Weak structure is where a test passes by chance most
often: 23% of the random walks whose bars show it miss their target under the default
config. Held out at 0.01 and 0.25 (C148) it changed no target of 152 such series: holding
validated at most a fifth of a standard error above the kept policy, on those random walks'
misses and the weak trends' hits alike, so validation cannot tell them apart there and the
default config leaves it unset (benchmarks/RESULTS.md, forty-fourth round).

Every comparison above is by the validation score `train.select_by` names: the Sharpe ratio, or
with "growth" the annualised log growth, and then each margin is in standard errors of the log
growth of the contender to beat (its volatility / sqrt(years); `training.evaluation.selection`).
Under a leverage cap a policy that stands aside most of the time can validate at a Sharpe above
holding's while earning a fraction of its growth; by growth, holding then wins.

The incumbent is the config without its contest (`train.challenger`, `train.hold_margin`); the
challenger is that config with the overrides in `train.challenger`
(`training.config.challenger_config`), the same seed. Each trains as an ordinary run folder,
`<run>/incumbent/` and `<run>/challenger/` (`RunDir.contender`); the hold policy is written to
`<run>/hold/` (`prepare_hold`). Then `keep_better_contender` copies the kept one's best model and
validation history to the run's own (so the run reads like a single one: backtests, `--resume`,
the benchmarks), and writes what was compared to `challenger.json`, which
`training.run.contest_report` tells in the training log and in TensorBoard.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

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

CONTENDERS = ("incumbent", "challenger", "hold")  # in the order they are compared
TRAINED = CONTENDERS[:2]  # the contenders PPO trains; the hold policy is built
# Each test of `training.run.evidence` (an `Evidence` field): the key of its p-value in
# `challenger.json`, and the name it is logged under in TensorBoard
EVIDENCE_RECORD = {
    "momentum": ("evidence_p_value", "momentum"),
    "tail": ("tail_p_value", "extreme_moves"),
    "persistence": ("persistence_p_value", "persistence"),
    "halves": ("halves_p_value", "halves"),
}
NOT_MEASURED = Evidence(None, None, None)  # the contest's evidence where the run read none


def contender_configs(cfg: RunConfig, run: RunDir) -> dict[str, RunConfig]:
    """The configs of `run`'s trained contenders by name, each in its own folder: the incumbent
    (`cfg` without its contest) and, with `train.challenger`, the challenger
    (`challenger_config`)."""
    configs = {"incumbent": _in_folder(cfg, run.contender("incumbent"))}
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
    return training_evidence(cfg, ranges, halves=halves)


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


def _in_folder(cfg: RunConfig, folder: RunDir) -> RunConfig:
    """`cfg` without a contest of its own (no challenger, no hold), run in `folder`."""
    train = dataclasses.replace(cfg.train, **NO_CONTEST, run_dir=str(folder.root))
    return dataclasses.replace(cfg, train=train)


def keep_better_contender(
    run: RunDir, rules: TrainConfig, evidence: Evidence | None = None
) -> dict[str, Any]:
    """Give `run` the model and validation history of the contender it keeps, by the contest
    keys of `rules` (`train.challenger_margin`, `challenger_evidence`, `hold_margin`,
    `hold_against`, `hold_evidence`, `hold_evidence_per`, `hold_evidence_tail`,
    `hold_unless_evidence`, `hold_weak_evidence`, `hold_weak_margin`, `policy_margin`,
    `policy_against`, `select_by`); returns (and writes to `run.contest`) what was compared.

    The contenders are those of `CONTENDERS` with a folder in `run`, each ranked by its best
    pass's validation score (`select_by`: its Sharpe ratio or its log growth, as the passes
    recorded it, `training.evaluation.selection`). The challenger is kept when its score exceeds
    the incumbent's by more than `challenger_margin` standard errors of the incumbent's (for a
    Sharpe ratio ``1 / sqrt(years)``, years the length of the validation bars), and, with
    `challenger_evidence`, only when the training bars' momentum p-value (`evidence.momentum`,
    `training.run.evidence`; None, or no `evidence`: not measurable) is below it. With
    `challenger_prior`, where the momentum or persistence p-value of `evidence` (those of
    `challenger_prior_tests`) is below it (`Evidence.predicts_returns`), with
    `challenger_prior_halves` also below it in each half of the training bars
    (`Evidence.predicts_in_halves`), with `challenger_prior_exposure` the incumbent's best pass
    in the market on at least that percent of the validation bars (`collapsed`), and the
    challenger may win, the roles turn: the challenger is kept unless the incumbent's score
    exceeds the challenger's by `challenger_margin` of the challenger's standard errors (a
    challenger without a finite best pass never leads). Then, with `hold_margin`, the hold
    contender is kept when its score exceeds that of the one kept so far (its best pass's, or
    with `hold_against` "median" the median of its passes' finite scores) by more than
    `hold_margin` of that one's standard errors, except with `hold_unless_evidence` where the
    momentum or persistence p-value of `evidence` is below it (`Evidence.predicts_returns`):
    there holding is no contender; and with `hold_evidence`, where no test of `evidence` finds
    structure below it (`Evidence.shows_structure`; with `hold_evidence_per` "family", below
    its share, `Evidence.level_per_test`; the tail test below `hold_evidence_tail` where set),
    holding is the prior instead; with `hold_weak_evidence`, where holding is a contender and
    no test finds structure below it (read like `hold_evidence`), holding's margin is
    `hold_weak_margin` instead of `hold_margin`. Where holding is the prior, the one kept so
    far stays only when its best pass's score (with `policy_against` "median", the median of
    its passes' finite scores) exceeds holding's by more than `policy_margin` of holding's
    standard errors. A trained contender without a finite best pass (it never held a
    position, or never validated) counts as flat, score 0 with the standard error of a Sharpe
    ratio, when it is the one to beat; one without a finite pass is never kept over another.
    """
    measured = evidence if evidence is not None else NOT_MEASURED
    names = [name for name in CONTENDERS if run.contender(name).root.is_dir()]
    if rules.hold_margin is None and "hold" in names:
        names.remove("hold")
    histories = {name: read_validation_history(run.contender(name)) for name in names}
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
        }
        standard_errors[name] = entry.get("score_standard_error", math.nan) if entry else math.nan
        exposures[name] = entry.get("exposure_pct") if entry else None
    entries = [entry for history in histories.values() for entry in history]
    years = next((entry["years"] for entry in entries if entry["years"]), None)

    def score(name: str, of: PassScore = "best") -> float | None:
        """`name`'s best pass's score, or the median of its passes' finite scores (None: no
        finite pass)."""
        if of == "median":
            finite = [value for value in map(pass_score, histories[name]) if value is not None]
            return statistics.median(finite) if finite else None
        best_score: float | None = rows[name]["best_validation_score"]
        return best_score

    def bar(kept: str, margin: float, against: PassScore = "best") -> float:
        """The score that beats `kept`'s (its best pass's, or the median of its passes') by
        `margin` of its standard errors."""
        error = standard_errors[kept]
        if not math.isfinite(error):  # flat, or a history written before scores had one
            error = 1.0 / math.sqrt(years) if years else math.inf
        return (score(kept, against) or 0.0) + margin * error

    def beats(name: str, to_beat: float, of: PassScore = "best") -> bool:
        found = score(name, of)
        return found is not None and found > to_beat

    kept = "incumbent"
    choice: dict[str, Any] = {
        "select_by": rules.select_by,
        "margin_standard_errors": rules.challenger_margin,
        "score_to_beat": None,
    }
    if "challenger" in rows:
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
                exposure = exposures.get("incumbent")
                choice["challenger_prior_exposure_level"] = rules.challenger_prior_exposure
                choice["challenger_prior_collapse"] = rules.challenger_prior_collapse
                choice["incumbent_exposure_pct"] = exposure
                led = led and collapsed(
                    exposure, rules.challenger_prior_exposure, rules.challenger_prior_collapse
                )
            led = led and rows["challenger"]["best_validation_score"] is not None
            choice["challenger_led"] = led
        if led:  # the challenger is the prior: the incumbent must show it is better
            to_beat = bar("challenger", rules.challenger_margin)
            kept = "incumbent" if beats("incumbent", to_beat) else "challenger"
        else:
            to_beat = bar(kept, rules.challenger_margin)
            kept = "challenger" if admitted and beats("challenger", to_beat) else kept
        choice["score_to_beat"] = to_beat if math.isfinite(to_beat) else None
    if "hold" in rows:
        choice["hold_margin_standard_errors"] = rules.hold_margin
        choice["hold_against"] = rules.hold_against
        established = False
        if rules.hold_unless_evidence is not None:
            choice["hold_unless_evidence_level"] = rules.hold_unless_evidence
            choice.update(evidence_record(measured))
            established = measured.predicts_returns(rules.hold_unless_evidence)
            choice["hold_stood_down"] = established
        structure = True
        if rules.hold_evidence is not None:
            level = measured.level_per_test(rules.hold_evidence, rules.hold_evidence_per)
            choice["hold_evidence_level"] = level
            if rules.hold_evidence_per == "family":
                choice["hold_evidence_family_level"] = rules.hold_evidence
            if rules.hold_evidence_tail is not None:
                choice["hold_evidence_tail_level"] = rules.hold_evidence_tail
            choice.update(evidence_record(measured))
            structure = measured.shows_structure(level, rules.hold_evidence_tail)
        if established:  # the bars establish a lesson holding cannot take: no contender
            pass
        elif structure:
            margin = rules.hold_margin or 0.0
            if rules.hold_weak_evidence is not None and rules.hold_weak_margin is not None:
                weak_level = measured.level_per_test(
                    rules.hold_weak_evidence, rules.hold_evidence_per
                )
                choice["hold_weak_evidence_level"] = weak_level
                choice.update(evidence_record(measured))
                choice["hold_structure_weak"] = not measured.shows_structure(weak_level)
                if choice["hold_structure_weak"]:
                    margin = rules.hold_weak_margin
                    choice["hold_margin_standard_errors"] = margin
            to_beat = bar(kept, margin, rules.hold_against)
            choice["hold_score_to_beat"] = to_beat if math.isfinite(to_beat) else None
            kept = "hold" if beats("hold", to_beat) else kept
        else:  # holding is the prior: the policy must show it is better
            to_beat = bar("hold", rules.policy_margin)
            choice["policy"] = kept
            choice["policy_margin_standard_errors"] = rules.policy_margin
            choice["policy_against"] = rules.policy_against
            choice["policy_score_to_beat"] = to_beat if math.isfinite(to_beat) else None
            kept = kept if beats(kept, to_beat, rules.policy_against) else "hold"
    adopt(run, run.contender(kept), histories[kept])
    choice = {"kept": kept, **choice, "contenders": list(rows.values())}
    write_json_atomic(run.contest, choice)
    return choice


def read_contest(run: RunDir) -> dict[str, Any] | None:
    """What `keep_better_contender` recorded in `run` (`run.contest`), or None where the run
    held no contest."""
    return json.loads(run.contest.read_text()) if run.contest.is_file() else None


def evidence_record(evidence: Evidence) -> dict[str, float | None]:
    """`evidence` as a contest records it in `challenger.json` (`EVIDENCE_RECORD`'s keys; read
    back by `recorded_evidence`)."""
    return {key: getattr(evidence, test) for test, (key, _) in EVIDENCE_RECORD.items()}


def recorded_evidence(choice: Mapping[str, Any]) -> Evidence:
    """The evidence a contest recorded (`keep_better_contender`'s `choice`, `challenger.json`):
    None for each test it did not record."""
    return Evidence(**{test: choice.get(key) for test, (key, _) in EVIDENCE_RECORD.items()})
