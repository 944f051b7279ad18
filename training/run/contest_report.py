"""How a contest is told: the training log's account of what `keep_better_contender` compared
and why it kept what it kept (`format_contest`), and the same in TensorBoard (`log_contest`).

Both read only what the contest recorded (`challenger.json`, `training.run.challenger`), so a
finished run's contest reads the same whenever it is told again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stable_baselines3.common.logger import configure

from training.config import SelectBy
from training.evaluation.selection import describe_best_pass, describe_score
from training.run.challenger import (
    EVIDENCE_RECORD,
    collapsed,
    evidence_admits,
    flat_bound,
    recorded_evidence,
)
from training.run.evidence import PREDICTING_TESTS, TESTS, Evidence
from training.run.folder import RunDir

# What each test found, where its p-value is below the level, as the training log says it
EVIDENCE_FINDING = {
    "momentum": "momentum predicts the next decision's return",
    "tail": "extreme moves lean to the side a stop guards",
    "persistence": "returns persist",
}


def format_contest(choice: dict[str, Any]) -> str:
    """The contenders compared by `keep_better_contender`, one line each, the kept one marked:
    its best validation pass and, where the pass recorded it, its direction head's lean (the
    share of the validation bars on which it chose long from a flat account,
    `training.evaluation.lean`: near 100% is the always-long collapse)."""
    names = [row["contender"] for row in choice["contenders"]]

    select_by = choice.get("select_by", "sharpe")

    def rule(who: str, to_beat: float | None, margin: float, than: str) -> str:
        bar = "no validation years" if to_beat is None else describe_score(to_beat, select_by)
        unit = "standard error" if margin == 1 else "standard errors"
        return f"{who} had to beat {bar}, {margin:g} {unit} above {than}"

    rules = []
    if "challenger" in names:
        margin = choice["margin_standard_errors"]
        if choice.get("challenger_led"):
            rules.append(rule("the incumbent", choice["score_to_beat"], margin, "the challenger"))
        else:
            rules.append(rule("the challenger", choice["score_to_beat"], margin, "the incumbent"))
        if "challenger_prior_level" in choice:
            rules.append(describe_prior(recorded_evidence(choice), choice))
        if "evidence_level" in choice:
            clauses = ("the challenger could win", "the challenger could not win")
            rules.append(
                describe_evidence(choice["evidence_p_value"], choice["evidence_level"], *clauses)
            )
    if "hold" in names:
        if choice.get("hold_stood_down"):
            level = choice["hold_unless_evidence_level"]
            found = findings(recorded_evidence(choice), level, PREDICTING_TESTS)
            rules.append(
                f"holding was no contender: the training bars' {spoken_list(found)}, below "
                f"{level:g}"
            )
        elif choice.get("hold_prior_final"):
            rules.append(
                f"no validation score of the {choice['policy']} could overrule holding: its "
                "margin is infinite"
            )
        elif "policy_score_to_beat" in choice:
            margin = choice["policy_margin_standard_errors"]
            to_beat = choice["policy_score_to_beat"]
            who = f"the {choice['policy']}"
            if choice.get("policy_against") == "median":
                who = f"the median pass of the {choice['policy']}"
            rules.append(rule(who, to_beat, margin, describe_matched(choice, select_by)))
        else:
            margin = choice["hold_margin_standard_errors"]
            than = "the policy kept before it"
            if choice.get("hold_against") == "median":
                than = "the median pass of the policy kept before it"
            rules.append(rule("holding", choice["hold_score_to_beat"], margin, than))
            if "hold_weak_evidence_level" in choice:
                rules.append(describe_weak(recorded_evidence(choice), choice))
        if "hold_evidence_level" in choice and not choice.get("hold_stood_down"):
            level, family = choice["hold_evidence_level"], choice.get("hold_evidence_family_level")
            tail_level = choice.get("hold_evidence_tail_level")
            rules.append(describe_structure(recorded_evidence(choice), level, family, tail_level))
    reversal = choice.get("momentum_reversal_p_value")
    if "evidence_reversal_level" in choice and reversal is not None:
        rules.append(
            f"the training bars' momentum predicts a reversal at p = {reversal:.3g}, which counts "
            f"only below {choice['evidence_reversal_level']:g}"
        )
    lines = [
        f"{spoken_list(names)}, by their best validation pass ({'; '.join(rules)}; the run "
        f"keeps the {choice['kept']}):"
    ]
    for row in choice["contenders"]:
        best = describe_best_pass(row["best_validation_score"], row["timesteps"], select_by)
        if row.get("long_share_pct") is not None:  # none where the pass predates the record
            best += f", long from a flat account on {row['long_share_pct']:.0f}% of the bars"
        mark = "  <- kept" if row["contender"] == choice["kept"] else ""
        lines.append(f"  {row['contender']}: {best}{mark}")
    if "incumbent_restart" in choice:  # train.vote (`training.run.vote`)
        lines.append(
            f"  the incumbent competed as its restart {choice['incumbent_restart']} (train.vote: "
            "a vote picks no restart)"
        )
    if choice.get("vote"):
        lines.append(
            f"  the run ships the vote of {spoken_list(choice['vote'])} (vote.json), not the "
            "incumbent alone"
        )
    return "\n".join(lines)


def describe_evidence(p_value: float | None, level: float, admitted: str, refused: str) -> str:
    """What the training bars' momentum evidence `p_value` (`Evidence.momentum`) decided against
    `level` (`train.challenger_evidence`), as a clause that opens with `admitted` where it is
    below `level` and with `refused` elsewhere."""
    if p_value is None:
        return f"{refused}: no momentum features or too few training bars"
    admits = evidence_admits(p_value, level)
    relation = "below" if admits else "not below"
    return (
        f"{admitted if admits else refused}: the training bars' momentum predicts the next "
        f"decision's return at p = {p_value:.3g}, {relation} {level:g}"
    )


def describe_matched(choice: Mapping[str, Any], select_by: SelectBy) -> str:
    """What the policy had to beat where holding was the prior, as a clause: "holding", or,
    where `train.policy_exposure_matched` raised the bar on a range that fell, what holding
    earned over the share of the validation bars the policy was in the market."""
    matched = choice.get("hold_score_at_policy_exposure")
    held = next(row for row in choice["contenders"] if row["contender"] == "hold")
    score = held["best_validation_score"]
    if matched is None or score is None or matched <= score:
        return "holding"
    return (
        f"holding's {describe_score(score, select_by)} taken over the "
        f"{choice['policy_exposure_pct']:.0f}% of the validation bars the {choice['policy']} "
        f"was in the market ({describe_score(matched, select_by)}: standing aside on a range "
        "that fell earns that much at random)"
    )


def describe_prior(evidence: Evidence, choice: Mapping[str, Any]) -> str:
    """What the training bars' `evidence` decided against `choice`'s
    `challenger_prior_level` (`train.challenger_prior`, read by the tests of
    `challenger_prior_tests`, `train.challenger_prior_tests`), `challenger_prior_halves_level`
    (`train.challenger_prior_halves`) and `challenger_prior_exposure_level`
    (`train.challenger_prior_exposure`, against `incumbent_exposure_pct`), as a clause: the
    challenger was the prior, and which tests found that past returns predict later ones (and
    at what p-value in each half, and how exposed the incumbent validated), or the incumbent
    was, and why: no test read below the level (with their p-values), not each half below its
    level, an incumbent that validated less exposed than its level, or a challenger that could
    not lead (no finite validation pass, or refused by `train.challenger_evidence`)."""
    level = choice["challenger_prior_level"]
    halves = choice.get("challenger_prior_halves_level")
    exposure_level = choice.get("challenger_prior_exposure_level")
    tests = choice.get("challenger_prior_tests", PREDICTING_TESTS)
    if not evidence.predicts_returns(level, tests):
        shown = ", ".join(f"{test} {p_value_text(getattr(evidence, test))}" for test in tests)
        return (
            f"the incumbent was the prior: the training bars' returns predict none below "
            f"{level:g} ({shown})"
        )
    found = f"the training bars' {spoken_list(findings(evidence, level, tests))}"
    in_halves = ""
    if halves is not None:
        shown = "not measurable" if evidence.halves is None else f"at p = {evidence.halves:.3g}"
        in_halves = f"each half of them {shown}"
    exposed = ""
    if exposure_level is not None:
        exposure = choice["incumbent_exposure_pct"]
        shown = (
            "none of the bars (no finite pass)"
            if exposure is None
            else f"{exposure:.1f}% of the bars"
        )
        exposed = f"the incumbent's best validation pass in the market on {shown}"
    collapse = choice.get("challenger_prior_collapse", "long")
    flat_level = flat_bound(exposure_level, collapse) if exposure_level is not None else None
    if choice.get("challenger_led"):
        shown = f", and {in_halves}, below {halves:g}" if in_halves else ""
        if exposed:
            flat = f" or at most {flat_level:g}%" if flat_level is not None else ""
            shown += f", and {exposed}, at least {exposure_level:g}%{flat}"
        return f"the challenger was the prior: {found}, below {level:g}{shown}"
    if halves is not None and not evidence.predicts_in_halves(halves):
        return (
            f"the incumbent was the prior: {found}, below {level:g}, but {in_halves}, not below "
            f"{halves:g}"
        )
    if exposure_level is not None and not collapsed(
        choice["incumbent_exposure_pct"], exposure_level, collapse
    ):
        flat = f" and above {flat_level:g}%" if flat_level is not None else ""
        return (
            f"the incumbent was the prior: {found}, below {level:g}, but {exposed}, below "
            f"{exposure_level:g}%{flat}"
        )
    return (
        f"the incumbent was the prior: {found}, below {level:g}, but the challenger could not lead"
    )


def describe_structure(
    evidence: Evidence, level: float, family: float | None = None, tail_level: float | None = None
) -> str:
    """What the training bars' `evidence` decided against `level`, each test's level
    (`train.hold_evidence`, or with a `family` level, `train.hold_evidence_per: family`, its
    share; the tail test's `tail_level` where given, `train.hold_evidence_tail`), as a clause:
    holding was a contender, and which tests found structure below their level, or holding was
    the prior, with every p-value."""
    found = findings(evidence, level, tail_level=tail_level)
    below = (
        f"{level:.3g}" if family is None else f"{family:g} / {round(family / level)} = {level:.3g}"
    )
    if tail_level is not None:
        below += f", extreme moves below {tail_level:.3g}"
    if found:
        return f"holding was a contender: the training bars' {spoken_list(found)}, below {below}"
    return (
        f"holding was the prior: no test of the training bars finds structure below {below} "
        f"({every_p_value(evidence)})"
    )


def describe_weak(evidence: Evidence, choice: Mapping[str, Any]) -> str:
    """What the training bars' `evidence` decided against `choice`'s
    `hold_weak_evidence_level` (`train.hold_weak_evidence`, each test's level), as a clause:
    the structure was weak (no test below the level, with every p-value), so holding's margin
    was `train.hold_weak_margin`, or which tests found it below the level."""
    level = choice["hold_weak_evidence_level"]
    if choice["hold_structure_weak"]:
        return (
            f"holding's margin was the weak-structure one: no test of the training bars finds "
            f"structure below {level:.3g} ({every_p_value(evidence)})"
        )
    found = spoken_list(findings(evidence, level))
    return f"holding's margin was the full one: the training bars' {found}, below {level:.3g}"


def findings(
    evidence: Evidence,
    level: float,
    tests: Sequence[str] = TESTS,
    tail_level: float | None = None,
) -> list[str]:
    """What each of `tests` found in the training bars' `evidence` below `level` (the tail test
    below `tail_level`, where given), with its p-value, as the training log says it
    (`EVIDENCE_FINDING`)."""
    return [
        f"{EVIDENCE_FINDING[test]} at p = {getattr(evidence, test):.3g}"
        for test in evidence.below(level, tail_level)
        if test in tests
    ]


def every_p_value(evidence: Evidence) -> str:
    """Each test's p-value in the training bars' `evidence`, as the training log lists them."""
    momentum, tail, persistence = map(
        p_value_text, (evidence.momentum, evidence.tail, evidence.persistence)
    )
    return f"momentum {momentum}, extreme moves {tail}, persistence {persistence}"


def p_value_text(p_value: float | None) -> str:
    """A test's p-value as the training log says it: "p = 0.0123", or "not measurable"."""
    return "not measurable" if p_value is None else f"p = {p_value:.3g}"


def spoken_list(names: Sequence[str]) -> str:
    """`names` as a sentence lists them: "a", "a and b", "a, b and c"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def log_contest(run: RunDir, choice: dict[str, Any]) -> None:
    """Log the contest to TensorBoard in `run`'s own folder, `<run>/tb/challenger`, next to each
    contender's training logs (`<run>/<contender>/tb`): at step k the best validation score of
    the k-th contender compared (`challenger/best_validation_score`, when finite; the incumbent
    first, then the challenger and the hold contender, those the run has), `challenger/kept`
    (the step of the kept one), and at step 1 the p-value of each test of the training bars the
    contest read (`challenger/evidence_<test>_p`, `EVIDENCE_RECORD`)."""
    logger = configure(str(run.tensorboard / "challenger"), ["tensorboard"])
    names = [row["contender"] for row in choice["contenders"]]
    kept = names.index(choice["kept"]) + 1
    for key, tag in EVIDENCE_RECORD.values():
        if choice.get(key) is not None:
            logger.record(f"challenger/evidence_{tag}_p", choice[key])
    for step, row in enumerate(choice["contenders"], start=1):
        if row["best_validation_score"] is not None:
            logger.record("challenger/best_validation_score", row["best_validation_score"])
        logger.record("challenger/kept", kept)
        logger.dump(step=step)
    logger.close()
