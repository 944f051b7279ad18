"""Run configuration of `python -m training.train`: documented dataclasses and YAML overrides.

A run is one `RunConfig` with six sections: `data`, `env`, `trunk`, `policy`, `ppo`, `train`.
Every field is documented where it is declared (CleanRL `Args` style). A file in `configs/` holds
overrides only: a mapping of sections, each a mapping of keys; a key left out keeps its dataclass
default, or the value of the file named by a top-level `extends: other.yaml` (a path relative to
the file; a chain of them is read base first, and each key comes from the last file that sets
it). `--set section.key=value` overrides go on top, each value parsed with `yaml.safe_load`.

Values are checked against the dataclass type hints:

- `int`: an int; also an integral float (`2.0e+5`) or an integral numeric string (`2e5`),
  because PyYAML reads an exponent without a dot (`2e5`, `3e-4`) as a string. Not `true`/`false`.
- `float`: a float, an int or a numeric string (`3e-4`); not `true`/`false`.
- `bool`: `true` or `false` only. `str`: a string (a YAML date such as 2016-01-04 becomes its ISO
  text).
- `X | None`: `null` or an X. `tuple[X, ...]`: a YAML list of X. `Literal[...]`: one of the values.

What can be derived is not configured: the trunk's window is `env.window` and its features per
bar are the data's feature columns, both read from the observation space. `trunk.window` and
`trunk.n_features` (which run folders saved before that still list) are refused with a line
saying so (`_DERIVED`).

Every mistake raises `ConfigError`, one line naming the source (the file, or `--set`), the dotted
key and what was expected, e.g. `configs/x.yaml: ppo.n_steps: expected int, got 'abc' (str)`.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import yaml

from agent.config import TrunkConfig
from envs.config import EnvConfig
from envs.market_data import parse_time
from training.run.atomic import write_text_atomic

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG_PATH = REPO_ROOT / "configs" / "default.yaml"

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_T = TypeVar("_T", bound="DataclassInstance")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_RUN_NAME = re.compile(r"[A-Za-z0-9._-]+")
_OVERRIDE_SOURCE = "--set"
# How resampled training paths order their blocks (`training.run.augment.block_order`).
ResampleMethod = Literal["permutation", "bootstrap"]
SelectBy = Literal["sharpe", "growth"]  # what validation ranks passes and contenders by
# Which of a policy's validation passes a contest compares: its best, or the median of them
PassScore = Literal["best", "median"]
# What train.hold_evidence is the level of: each "test" of the training bars, or the "family" of
# those measured, which share it equally (run/evidence.py, `Evidence.level_per_test`)
EvidencePer = Literal["test", "family"]
# The tests of the training bars that find past returns predicting later ones (run/evidence.py,
# `PREDICTING_TESTS`): those train.challenger_prior may read
PredictingTest = Literal["momentum", "persistence"]
# What a test of the training bars is read against (run/evidence.py): its asymptotic null (the
# normal, the chi-square), or a wild bootstrap of the training bars' own moves
# (run/wild_bootstrap.py)
EvidenceNull = Literal["normal", "wild"]
# Which collapse of the incumbent train.challenger_prior_exposure looks for (run/challenger.py,
# `collapsed`): always "long" only, or "either" always long or always flat
Collapse = Literal["long", "either"]
_DERIVED = {  # keys that once were configured, and where the value comes from now
    "trunk.window": "the trunk reads env.window",
    "trunk.n_features": "the trunk reads the data's feature count",
}


class ConfigError(ValueError):
    """A configuration mistake, as one line: `<source>: <dotted key>: <what was expected>`."""


def _check(section: str, obj: object, checks: Sequence[tuple[str, bool, str]]) -> None:
    """Raise `ValueError("<section>.<key>: expected ..., got ...")` for the first failed check."""
    for key, ok, expected in checks:
        if not ok:
            raise ValueError(f"{section}.{key}: expected {expected}, got {getattr(obj, key)!r}")


def _p_level(key: str, level: float | None) -> tuple[str, bool, str]:
    """The `_check` that `key`'s value, `level`, is a p-value level or None (no rule)."""
    return (
        key,
        level is None or 0 < level <= 1,
        "a p-value level above 0 and at most 1, or null for none",
    )


@dataclass
class DataConfig:
    """Which instruments to train on and how they split, by calendar date, into train/val/test.

    Several files, or a multi-ticker file, train one model on every instrument at once; they
    split on one calendar (the union of their dates), the same dates for all
    (`envs.splits.split_calendar`).
    """

    path: str | tuple[str, ...] = "data/gymanytrading_GOOGL_daily.csv"  # CSVs/globs from repo root
    ticker: str | tuple[str, ...] | None = None  # tickers of multi-ticker files to take; None: all
    adjust: bool = False  # split-adjust prices by `Adj Close` / `Close` (in files that have it)
    validation: float = 0.15  # share of the calendar's dates (after train) used for validation
    test: float = 0.15  # share of the calendar's dates (the last ones) held out for the final test
    validation_start: str | None = None  # ISO date of the first validation bar; beats `validation`
    test_start: str | None = None  # ISO date of the first test bar; beats `test`

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise `ValueError` naming the key when a value is out of its range."""
        # Read as the split will read them (`envs.splits.chronological_split`).
        val_start, test_start = (
            None if text is None else parse_time(text)
            for text in (self.validation_start, self.test_start)
        )
        _check(
            "data",
            self,
            [
                (
                    "path",
                    len(self.paths) >= 1 and all(p != "" for p in self.paths),
                    "a CSV file path or glob, or a list of them",
                ),
                (
                    "ticker",
                    self.tickers is None or all(t.strip() for t in self.tickers),
                    "a ticker, a list of tickers, or null (every ticker)",
                ),
                ("validation", 0 <= self.validation < 1, "a fraction in [0, 1)"),
                ("test", 0 <= self.test < 1, "a fraction in [0, 1)"),
                ("test", self.validation + self.test < 1, "validation + test < 1"),
                (
                    "validation_start",
                    self.validation_start is None or val_start is not None,
                    "an ISO date such as 2016-01-04, or null",
                ),
                (
                    "test_start",
                    self.test_start is None or test_start is not None,
                    "an ISO date such as 2018-01-02, or null",
                ),
                (
                    "test_start",
                    val_start is None or test_start is None or val_start < test_start,
                    f"a date after data.validation_start ({self.validation_start})",
                ),
            ],
        )

    @property
    def paths(self) -> tuple[str, ...]:
        """`path` as a tuple of files or globs."""
        return (self.path,) if isinstance(self.path, str) else tuple(self.path)

    @property
    def tickers(self) -> tuple[str, ...] | None:
        """`ticker` as a tuple, or None for every ticker."""
        return (self.ticker,) if isinstance(self.ticker, str) else self.ticker


@dataclass
class PPOConfig:
    """PPO hyper-parameters, with the names and meanings of `stable_baselines3.PPO`."""

    n_envs: int = 16  # parallel accounts stepped together
    n_steps: int = 128  # steps per account per rollout (a rollout is n_envs * n_steps steps)
    batch_size: int = 256  # minibatch size; must divide n_envs * n_steps
    n_epochs: int = 4  # passes over each rollout
    learning_rate: float = 3e-4  # Adam step size (at the start, if learning_rate_end is set)
    learning_rate_end: float | None = None  # step size at the end, reached linearly; None: constant
    gamma: float = 0.99  # discount factor per bar
    gae_lambda: float = 0.95  # GAE lambda: bias (0) versus variance (1) of the advantages
    clip_range: float = 0.2  # PPO clip on the probability ratio of the joint action
    ent_coef: float = 0.01  # weight of the entropy bonus
    vf_coef: float = 0.5  # weight of the value loss
    max_grad_norm: float = 0.5  # clip on the global gradient norm
    target_kl: float | None = None  # stop an update's epochs early past this KL; None: never
    # Scale rewards by a running std of returns (SB3 VecNormalize). Its running statistics are
    # not in the model file: `--resume` starts them afresh.
    normalize_reward: bool = False

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise `ValueError` naming the key when a value is out of its range."""
        rollout = self.n_envs * self.n_steps
        _check(
            "ppo",
            self,
            [
                ("n_envs", self.n_envs >= 1, "an integer >= 1"),
                ("n_steps", self.n_steps >= 1, "an integer >= 1"),
                ("batch_size", self.batch_size >= 2, "an integer >= 2"),
                (
                    "batch_size",
                    self.batch_size >= 2 and rollout % self.batch_size == 0,
                    f"a divisor of ppo.n_envs * ppo.n_steps = {rollout}",
                ),
                ("n_epochs", self.n_epochs >= 1, "an integer >= 1"),
                ("learning_rate", self.learning_rate > 0, "a positive number"),
                (
                    "learning_rate_end",
                    self.learning_rate_end is None or self.learning_rate_end >= 0,
                    "a number >= 0 or null",
                ),
                ("gamma", 0 < self.gamma <= 1, "a number in (0, 1]"),
                ("gae_lambda", 0 <= self.gae_lambda <= 1, "a number in [0, 1]"),
                ("clip_range", self.clip_range > 0, "a positive number"),
                ("ent_coef", self.ent_coef >= 0, "a number >= 0"),
                ("vf_coef", self.vf_coef >= 0, "a number >= 0"),
                ("max_grad_norm", self.max_grad_norm > 0, "a positive number"),
                (
                    "target_kl",
                    self.target_kl is None or self.target_kl > 0,
                    "a positive number or null",
                ),
            ],
        )


@dataclass
class PolicyConfig:
    """The actor-critic around the trunk: heads, account encoder, device and precision."""

    conditional_heads: bool = True  # a flat direction drops the leverage and risk log-probs
    head_hidden: int = 64  # hidden width of each head's MLP
    account_dim: int = 64  # width of the account-state embedding joined to the trunk output
    hold_prior: float = 0.0  # initial logit bias to buy-and-hold's action in each head; 0: none
    # The level of env.leverage_levels every validated and saved policy trades at, whatever its
    # leverage head says; training still samples every level, so the head explores the
    # position's size (evaluation/validation.py). None: the head's own choice
    deployed_leverage: float | None = None
    device: str = "auto"  # torch device: auto (cuda when available), cpu, cuda, cuda:1, ...
    bf16: bool = False  # bfloat16 autocast in the forward pass (CUDA)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise `ValueError` naming the key when a value is out of its range."""
        _check(
            "policy",
            self,
            [
                ("head_hidden", self.head_hidden >= 1, "an integer >= 1"),
                ("account_dim", self.account_dim >= 1, "an integer >= 1"),
                ("hold_prior", self.hold_prior >= 0, "a number >= 0"),
                (
                    "deployed_leverage",
                    self.deployed_leverage is None or self.deployed_leverage > 0,
                    "a level of env.leverage_levels, or null for the head's own choice",
                ),
                ("device", self.device != "", "a torch device such as auto, cpu or cuda"),
            ],
        )


@dataclass
class TrainConfig:
    """Length, seeding, checkpoints, evaluation and logging of one training run."""

    total_timesteps: int = 200_000  # env steps summed over all accounts
    seed: int = 0  # seeds python, numpy, torch and the envs
    # Trainings from seeds seed, seed + 1000, ...; the one whose best validation pass scores
    # highest is kept. In a contest they are the incumbent's (the challenger trains once)
    restarts: int = 1
    checkpoint_every: int = 20_000  # timesteps between checkpoints; 0 disables
    eval_every: int = 20_000  # timesteps between passes over the validation range; 0 disables
    eval_start: int = 0  # timesteps before the first pass (a warm-up: nothing earlier is kept)
    patience: int = 0  # stop after this many validation passes without a new best; 0: never
    feature_noise: float = 0.0  # std of noise added to training windows' features (augmentation)
    resampled_paths: int = 0  # copies of each training range in reordered blocks, trained on too
    resample_block: int = 128  # bars per block of those copies (structure shorter than it survives)
    resample_method: ResampleMethod = "permutation"  # the range's blocks shuffled, or "bootstrap"
    resample_detrend: float = 0.0  # share of each copy's drift taken out (1: it ends at its start)
    direction_outcomes: float = 0.0  # weight of the every-direction loss (run/outcomes.py); 0: off
    direction_teacher: float = 0.0  # weight of the linear teacher's loss (run/teacher.py); 0: off
    # Weight of the direction head's marginal balance loss (run/balance.py), falling linearly to
    # 0 at direction_balance_until of total_timesteps; 0: off
    direction_balance: float = 0.0
    direction_balance_until: float = 0.5
    # The balance loss only where a test of the training bars finds past returns predicting later
    # ones (run/evidence.py: momentum or persistence) at this p-value; None: on every run
    direction_balance_evidence: float | None = None
    challenger: tuple[str, ...] = ()  # KEY=VALUE overrides of a second training (run/challenger.py)
    challenger_margin: float = 1.5  # standard errors of the validation score it must win by
    # The challenger may win only where the training bars' momentum predicts the next decision's
    # return at this p-value (the direction teacher's test, run/teacher.py); None: anywhere
    challenger_evidence: float | None = None
    # Where the training bars' momentum or persistence test finds at this p-value that past
    # returns predict later ones, the challenger is the prior: the incumbent is kept there only
    # when it validates better than the challenger by challenger_margin; None: never
    challenger_prior: float | None = None
    # With challenger_prior, the challenger is the prior only where each half of the training
    # bars also finds past returns predicting later ones at this p-value; None: the whole alone
    challenger_prior_halves: float | None = None
    # With challenger_prior, the challenger is the prior only where the incumbent's best
    # validation pass held a position on at least this percent of the validation bars (the
    # always-long collapse validates like holding); None: whatever its exposure
    challenger_prior_exposure: float | None = None
    # With challenger_prior_exposure, which collapse counts: "long" (in the market on at least
    # that percent of the validation bars) or "either" (also flat on at least that percent)
    challenger_prior_collapse: Collapse = "long"
    # The tests challenger_prior reads: either finding past returns predicting later ones at
    # its level lets the challenger lead
    challenger_prior_tests: tuple[PredictingTest, ...] = ("momentum", "persistence")
    hold_margin: float | None = None  # the same for holding (run/challenger.py); None: no hold
    # What holding must beat by hold_margin: the kept policy's "best" validation pass, or the
    # "median" of its passes (the best of several leans the comparison towards the policy)
    hold_against: PassScore = "best"
    # Where no test of the training bars finds structure at this p-value (their momentum
    # predicting the next decision's return, their extreme moves leaning to the side a stop
    # guards, their returns persisting: run/evidence.py), holding is the prior: the trained
    # policy is kept only when it validates better than holding by policy_margin; None: never
    hold_evidence: float | None = None
    hold_evidence_per: EvidencePer = "test"  # hold_evidence is each test's level, or the family's
    # The level the extreme moves' test (a stop's lesson) is read at where hold_evidence asks
    # for structure, in place of hold_evidence's: that test passes on a crash's bars far below
    # the level its false alarms reach; None: hold_evidence's own level
    hold_evidence_tail: float | None = None
    # Where a test of the training bars finds past returns predicting later ones at this p-value
    # (run/evidence.py: momentum or persistence), holding is no contender: the bars establish a
    # lesson holding cannot take, and validation alone does not overrule it; None: everywhere
    hold_unless_evidence: float | None = None
    # Where the training bars' momentum fit predicts that moves reverse (run/teacher.py), the
    # momentum test counts as evidence only below this p-value, in every reading above: on bars
    # without structure the fit leans to reversal (a persistent regressor's finite-sample bias),
    # so most of its false alarms are reversals; None: at every level, as a continuation
    evidence_reversal: float | None = None
    # What the persistence test (run/evidence.py) reads its z against, in every reading above:
    # "normal", Lo and MacKinlay's asymptotic one, or "wild", a sign-flip bootstrap of the
    # training bars' returns that keeps their volatility's path: the normal passes far above
    # its level where volatility moves in regimes (benchmarks/RESULTS.md, fifty-seventh round)
    persistence_null: EvidenceNull = "normal"
    # What the momentum test (run/evidence.py) reads its Wald statistic against, in every
    # reading above: "normal", the chi-square, or "wild", the same statistic on sign-flipped
    # copies of the training bars, which keep their volatility's path and the features' scale
    momentum_null: EvidenceNull = "normal"
    # Where the tests of the training bars find structure (at hold_evidence, where set) but
    # none at this p-value, holding's margin is hold_weak_margin instead of hold_margin: weak
    # structure is where a test passes by chance most often; None: hold_margin throughout
    hold_weak_evidence: float | None = None
    hold_weak_margin: float | None = None  # standard errors; set with hold_weak_evidence
    # Standard errors of holding's score, where holding is the prior; .inf: holding is kept
    # there whatever the policy validated
    policy_margin: float = 0.0
    # Which score of the policy must beat holding's by policy_margin where holding is the
    # prior: its "best" validation pass, or the "median" of its passes
    policy_against: PassScore = "best"
    # Where holding is the prior and its validation score fell below zero, the policy must beat
    # what holding earned over the share of the validation bars its best pass was in the market
    # (that share times holding's log growth: what the same exposure earns at random) by
    # policy_margin, instead of holding's own score: on a range that fell, standing aside part
    # of the time beats holding with no skill; false: holding's own score. Growth ranking only
    policy_exposure_matched: bool = False
    # Where the contest keeps the incumbent, the run ships the vote of every incumbent restart
    # and the challenger, each at its best validation pass (run/vote.py,
    # evaluation/vote.py), instead of the restart validation picked; false: that restart
    vote: bool = False
    # What validation keeps (the pass, restart or contender): the best "sharpe", or "growth",
    # annualised log growth (evaluation/selection.py: under a leverage cap a policy that mostly
    # stands aside validates at a high Sharpe and earns little); the margins are in its units
    select_by: SelectBy = "sharpe"
    run_dir: str | None = None  # output folder; None: runs/<name>-<timestamp>
    name: str = "multihead"  # run name: in the run folder name and the logs
    progress_bar: bool = True  # show SB3's progress bar during learn()
    log_interval: int = 1  # rollouts between SB3 log dumps (stdout and TensorBoard)
    importance_every: int = 0  # timesteps between head-importance TensorBoard logs; 0 disables
    threads: int | None = None  # torch CPU threads; None: torch's default (one per core)

    def __post_init__(self) -> None:
        self.validate()

    @property
    def contested(self) -> bool:
        """Whether the run holds a contest (`training.run.challenger`): a challenger, holding,
        or both, against the incumbent, each in its own folder."""
        return bool(self.challenger) or self.hold_margin is not None

    def validate(self) -> None:
        """Raise `ValueError` naming the key when a value is out of its range."""
        _check(
            "train",
            self,
            [
                ("total_timesteps", self.total_timesteps >= 1, "an integer >= 1"),
                ("seed", self.seed >= 0, "an integer >= 0"),
                ("restarts", self.restarts >= 1, "an integer >= 1"),
                ("checkpoint_every", self.checkpoint_every >= 0, "an integer >= 0"),
                ("eval_every", self.eval_every >= 0, "an integer >= 0"),
                ("eval_start", self.eval_start >= 0, "an integer >= 0"),
                ("patience", self.patience >= 0, "an integer >= 0"),
                ("feature_noise", self.feature_noise >= 0, "a number >= 0"),
                ("resampled_paths", self.resampled_paths >= 0, "an integer >= 0"),
                ("resample_block", self.resample_block >= 1, "an integer >= 1"),
                (
                    "resample_detrend",
                    0.0 <= self.resample_detrend <= 1.0,
                    "a share of the drift, 0 to 1",
                ),
                ("direction_outcomes", self.direction_outcomes >= 0, "a number >= 0"),
                ("direction_teacher", self.direction_teacher >= 0, "a number >= 0"),
                ("direction_balance", self.direction_balance >= 0, "a number >= 0"),
                (
                    "direction_balance_until",
                    0 < self.direction_balance_until <= 1,
                    "a share of train.total_timesteps, 0 < x <= 1",
                ),
                (
                    "direction_balance_evidence",
                    self.direction_balance_evidence is None
                    or 0 < self.direction_balance_evidence <= 1,
                    "a p-value, 0 < p <= 1, or null",
                ),
                ("challenger_margin", self.challenger_margin >= 0, "a number >= 0"),
                _p_level("challenger_evidence", self.challenger_evidence),
                _p_level("challenger_prior", self.challenger_prior),
                _p_level("challenger_prior_halves", self.challenger_prior_halves),
                (
                    "challenger_prior_halves",
                    self.challenger_prior_halves is None or self.challenger_prior is not None,
                    "null without a challenger prior (set train.challenger_prior)",
                ),
                (
                    "challenger_prior_exposure",
                    self.challenger_prior_exposure is None
                    or 0 <= self.challenger_prior_exposure <= 100,
                    "a percent of the validation bars, 0 to 100, or null for none",
                ),
                (
                    "challenger_prior_exposure",
                    self.challenger_prior_exposure is None or self.challenger_prior is not None,
                    "null without a challenger prior (set train.challenger_prior)",
                ),
                (
                    "challenger_prior_collapse",
                    self.challenger_prior_collapse == "long"
                    or self.challenger_prior_exposure is not None,
                    '"long" without a challenger prior exposure (set '
                    "train.challenger_prior_exposure)",
                ),
                (
                    "challenger_prior_tests",
                    0 < len(self.challenger_prior_tests) == len(set(self.challenger_prior_tests)),
                    "a list of momentum and/or persistence, each at most once",
                ),
                (
                    "hold_margin",
                    self.hold_margin is None or self.hold_margin >= 0,
                    "a number >= 0, or null for no hold contender",
                ),
                _p_level("hold_evidence", self.hold_evidence),
                (
                    "hold_evidence",
                    self.hold_evidence is None or self.hold_margin is not None,
                    "null without a hold contender (set train.hold_margin)",
                ),
                _p_level("hold_evidence_tail", self.hold_evidence_tail),
                (
                    "hold_evidence_tail",
                    self.hold_evidence_tail is None or self.hold_evidence is not None,
                    "null without holding's evidence rule (set train.hold_evidence)",
                ),
                _p_level("hold_unless_evidence", self.hold_unless_evidence),
                (
                    "hold_unless_evidence",
                    self.hold_unless_evidence is None or self.hold_margin is not None,
                    "null without a hold contender (set train.hold_margin)",
                ),
                _p_level("evidence_reversal", self.evidence_reversal),
                (
                    "evidence_reversal",
                    self.evidence_reversal is None or self.contested,
                    "null without a contest (set train.challenger or train.hold_margin)",
                ),
                (
                    "persistence_null",
                    self.persistence_null == "normal" or self.contested,
                    "normal without a contest (set train.challenger or train.hold_margin)",
                ),
                (
                    "momentum_null",
                    self.momentum_null == "normal" or self.contested,
                    "normal without a contest (set train.challenger or train.hold_margin)",
                ),
                _p_level("hold_weak_evidence", self.hold_weak_evidence),
                (
                    "hold_weak_evidence",
                    self.hold_weak_evidence is None or self.hold_margin is not None,
                    "null without a hold contender (set train.hold_margin)",
                ),
                (
                    "hold_weak_evidence",
                    self.hold_weak_evidence is None
                    or self.hold_evidence is None
                    or self.hold_weak_evidence < self.hold_evidence,
                    "a level below train.hold_evidence, or null",
                ),
                (
                    "hold_weak_margin",
                    (self.hold_weak_margin is None) == (self.hold_weak_evidence is None),
                    "a number with train.hold_weak_evidence and null without it",
                ),
                (
                    "hold_weak_margin",
                    self.hold_weak_margin is None or self.hold_weak_margin >= 0,
                    "a number >= 0",
                ),
                ("policy_margin", self.policy_margin >= 0, "a number >= 0"),
                (
                    "policy_exposure_matched",
                    not self.policy_exposure_matched or self.hold_evidence is not None,
                    "false without holding's evidence rule (set train.hold_evidence)",
                ),
                (
                    "policy_exposure_matched",
                    not self.policy_exposure_matched
                    or (self.select_by == "growth" and self.policy_against == "best"),
                    "false unless train.select_by is growth and train.policy_against is best "
                    "(log growth adds over the bars a policy is in the market; a Sharpe ratio "
                    "or a median of passes does not)",
                ),
                (
                    "vote",
                    not self.vote or (bool(self.challenger) and self.restarts >= 2),
                    "false unless train.challenger is set and train.restarts >= 2 (the vote's "
                    "members are the incumbent's restarts and the challenger)",
                ),
                ("run_dir", self.run_dir is None or self.run_dir != "", "a folder path or null"),
                (
                    "name",
                    _RUN_NAME.fullmatch(self.name) is not None,
                    "letters, digits, '.', '_' or '-'",
                ),
                ("log_interval", self.log_interval >= 1, "an integer >= 1"),
                ("importance_every", self.importance_every >= 0, "an integer >= 0"),
                ("threads", self.threads is None or self.threads >= 1, "an integer >= 1 or null"),
            ],
        )


@dataclass
class RunConfig:
    """Everything one training run needs; the files in `configs/` override its fields."""

    data: DataConfig = field(default_factory=DataConfig)  # market data file and its splits
    env: EnvConfig = field(default_factory=EnvConfig)  # market, execution and reward
    trunk: TrunkConfig = field(default_factory=TrunkConfig)  # attention trunk over the window
    policy: PolicyConfig = field(default_factory=PolicyConfig)  # heads, device, precision
    ppo: PPOConfig = field(default_factory=PPOConfig)  # PPO hyper-parameters
    train: TrainConfig = field(default_factory=TrainConfig)  # length, checkpoints, eval, logs

    @property
    def deployed_leverage_index(self) -> int | None:
        """The index in `env.leverage_levels` of `policy.deployed_leverage`, the level every
        validated and saved policy trades at; None where the leverage head chooses."""
        level = self.policy.deployed_leverage
        return None if level is None else self.env.leverage_levels.index(level)


def _show(value: Any) -> str:
    """`value` for an error message: its repr and its type name."""
    return f"{value!r} ({type(value).__name__})"


def _one_line(text: str) -> str:
    """`text` with every run of whitespace (newlines included) collapsed to one space."""
    return " ".join(text.split())


def _describe(tp: Any) -> str:
    """Human-readable name of a config type hint, for 'expected ...' messages."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _describe(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is tuple:
        return f"a list of {_describe(args[0])}"
    if dataclasses.is_dataclass(tp):
        return "a mapping of keys"
    return tp.__name__


class _Mismatch(Exception):
    """A value does not fit a type hint (turned into a `ConfigError` by `_build`)."""


def _as_number(value: Any) -> float | None:
    """A real number from an int, a float or a numeric string such as '3e-4'; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return float(value)
    return None


def _convert(value: Any, tp: Any) -> Any:
    """`value` converted to the (non-dataclass) type hint `tp`; `_Mismatch` when it does not fit."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is not type(None):
                try:
                    return _convert(value, arg)
                except _Mismatch:
                    pass
        raise _Mismatch
    if origin is Literal:
        if any(value == a and type(value) is type(a) for a in args):
            return value
        raise _Mismatch
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        if isinstance(value, list | tuple):
            return tuple(_convert(item, args[0]) for item in value)
        raise _Mismatch
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise _Mismatch
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        number = _as_number(value)
        if number is not None and number.is_integer():
            return int(number)
        raise _Mismatch
    if tp is float:
        number = _as_number(value)
        if number is not None:
            return number
        raise _Mismatch
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, date):  # YAML reads an unquoted 2016-01-04 as a date
            return value.isoformat()
        raise _Mismatch
    raise TypeError(f"config type {tp!r} is not supported by training.config")


def _type_error(source: str, key: str, tp: Any, value: Any) -> ConfigError:
    """The error for a value of the wrong type: `<source>: <key>: expected <type>, got <value>`."""
    return ConfigError(f"{source}: {key}: expected {_describe(tp)}, got {_show(value)}")


def _dotted_keys(cls: type, prefix: str = "") -> Iterator[str]:
    """Every section and key of dataclass `cls` as a dotted name ('ppo', 'ppo.n_envs', ...)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = prefix + f.name
        yield key
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _dotted_keys(hints[f.name], key + ".")


def _build(
    cls: type[_T],
    raw: Mapping[Any, Any],
    prefix: str,
    where: Callable[[str], str],
    known: Sequence[str],
) -> _T:
    """Build dataclass `cls` from mapping `raw`, recursing into dataclass-typed fields.

    `prefix` is the dotted path of `cls` in the run config ('' at the top, 'ppo.' below),
    `where(key)` names the source of a key for messages, `known` lists every valid dotted key
    (for 'did you mean' suggestions). A `ValueError` from the dataclass's own checks propagates.
    """
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    kwargs: dict[str, Any] = {}
    for name, value in raw.items():
        key = f"{prefix}{name}"
        if key in _DERIVED:
            raise ConfigError(
                f"{where(key)}: {key}: not a config key any more, {_DERIVED[key]}; delete it"
            )
        if name not in names:
            kind = "key" if prefix else "section"
            peers = [k for k in known if k.count(".") == key.count(".")]
            match = difflib.get_close_matches(key, peers, n=1)
            hint = f" (did you mean {match[0]!r}?)" if match else ""
            raise ConfigError(f"{where(key)}: unknown {kind} {key!r}{hint}")
        tp = hints[name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            if value is None:  # an empty section (`ppo:` and nothing under it) keeps the defaults
                value = {}
            if not isinstance(value, Mapping):
                raise _type_error(where(key), key, tp, value)
            kwargs[name] = _build(tp, value, key + ".", where, known)
            continue
        try:
            kwargs[name] = _convert(value, tp)
        except _Mismatch:
            raise _type_error(where(key), key, tp, value) from None
    return cls(**kwargs)


def _read_yaml(path: Path, label: str) -> dict[str, Any]:
    """The mapping of sections in YAML file `path` (an empty file is an empty mapping)."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{label}: no such config file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        detail = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(_one_line(f"{label}: invalid YAML{at}: {detail}")) from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{label}: expected a mapping of sections, got {_show(raw)}")
    return raw


EXTENDS = "extends"  # the top-level key naming the config file a file builds on


def _read_extended(
    path: Path, label: str, origins: dict[str, str], chain: tuple[Path, ...]
) -> dict[str, Any]:
    """The mapping of sections of config file `path` on top of the file its `extends` names
    (recursively): a section's keys merge, and each key keeps the value of the last file that
    sets it. `origins` records, for every key that a base file sets and `path` does not, that
    file's label, so that a mistake there names the file it is in. `chain` holds the files that
    extend `path`, to refuse a cycle."""
    raw = _read_yaml(path, label)
    base_name = raw.pop(EXTENDS, None)
    if base_name is None:
        return raw
    if not isinstance(base_name, str) or not base_name.strip():
        raise ConfigError(
            f"{label}: {EXTENDS}: expected the path of a YAML config, got {_show(base_name)}"
        )
    base_path = path.parent / base_name
    base_label = str(base_path)
    here, base = path.resolve(), base_path.resolve()
    if base in (*chain, here):
        files = " -> ".join(str(p) for p in (*chain, here, base))
        raise ConfigError(f"{label}: {EXTENDS}: a cycle of config files ({files})")
    if not base_path.is_file():
        raise ConfigError(f"{label}: {EXTENDS}: {base_label}: no such config file")
    merged = _read_extended(base_path, base_label, origins, (*chain, here))
    for section, keys in merged.items():
        for key in keys if isinstance(keys, dict) else ():
            origins.setdefault(f"{section}.{key}", base_label)
    for section, keys in raw.items():
        if keys is None:  # an empty section (`ppo:` alone) changes nothing
            continue
        if isinstance(keys, dict) and isinstance(merged.get(section), dict):
            merged[section] = {**merged[section], **keys}
            for key in keys:
                origins.pop(f"{section}.{key}", None)
        else:
            merged[section] = keys
    return merged


def _apply_override(
    raw: dict[str, Any], item: str, origins: dict[str, str], source: str = _OVERRIDE_SOURCE
) -> None:
    """Write one `section.key=value` override into `raw`; record the keys it introduced.
    `source` names where the override came from in error messages."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(
            f"{source}: expected KEY=VALUE such as ppo.learning_rate=1e-4, got {item!r}"
        )
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        detail = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(_one_line(f"{source}: {key}: invalid YAML value: {detail}")) from None
    parts = key.split(".")
    node = raw
    for depth in range(1, len(parts)):
        section = ".".join(parts[:depth])
        child = node.get(parts[depth - 1])
        if child is None:
            child = node[parts[depth - 1]] = {}
            origins.setdefault(section, source)
        elif not isinstance(child, dict):
            raise ConfigError(
                f"{source}: {section}: expected a mapping of keys, got {_show(child)}"
            )
        node = child
    node[parts[-1]] = value
    origins[key] = source


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> RunConfig:
    """Read the run config: dataclass defaults, then YAML file `path`, then `overrides`.

    `path` is a YAML mapping of sections holding overrides only (None: no file, the dataclass
    defaults; the entry point's default file is `DEFAULT_CONFIG_PATH`). `overrides` are
    `--set`-style strings such as `"ppo.learning_rate=1e-4"` or `"env.leverage_levels=[1,2]"`,
    applied in order, each value parsed with `yaml.safe_load`. Raises `ConfigError` (one line
    naming the file or `--set`, the dotted key and what was expected) on any mistake.
    """
    label = str(path) if path is not None else _OVERRIDE_SOURCE
    origins: dict[str, str] = {}
    raw = _read_extended(Path(path), label, origins, ()) if path is not None else {}
    for item in overrides:
        _apply_override(raw, item, origins)

    def where(key: str) -> str:
        return origins.get(key, label)

    cfg = _built(raw, where)
    if cfg.train.challenger:  # its mistakes are found now, not after the first training
        challenger_config(cfg, f"{where('train.challenger')}: train.challenger")
    return cfg


def _built(raw: Mapping[str, Any], where: Callable[[str], str]) -> RunConfig:
    """The run config of mapping `raw`, every mistake a `ConfigError` naming `where(key)`."""
    try:
        cfg = _build(RunConfig, raw, "", where, list(_dotted_keys(RunConfig)))
        _check("trunk", cfg.trunk, cfg.trunk.problems())  # its shape and variant fields
        deployed = cfg.policy.deployed_leverage
        if deployed is not None and deployed not in cfg.env.leverage_levels:
            raise ValueError(
                f"policy.deployed_leverage: expected one of env.leverage_levels "
                f"{list(cfg.env.leverage_levels)}, got {deployed:g}"
            )
    except ConfigError:
        raise
    except ValueError as exc:  # a dataclass's own check: "<section>.<key>: expected ..."
        message = _one_line(str(exc))
        raise ConfigError(f"{where(message.split(':', 1)[0])}: {message}") from None
    return cfg


CHALLENGER_SECTIONS = ("ppo", "policy", "trunk", "train")  # what a challenger may change
# The train keys of a contender (the challenger, and each of a contest's trainings): no contest
# of its own, so no challenger and no hold contender, nor holding's evidence rule
NO_CONTEST: dict[str, Any] = {
    "challenger": (),
    "hold_margin": None,
    "hold_evidence": None,
    "hold_evidence_tail": None,
    "hold_unless_evidence": None,
    "evidence_reversal": None,
    "persistence_null": "normal",
    "momentum_null": "normal",
    "hold_weak_evidence": None,
    "hold_weak_margin": None,
    "policy_exposure_matched": False,
    "vote": False,
}
# How a contest chooses among its trained contenders (`training.run.challenger`)
_CONTEST_CHOICE_KEYS = (
    "train.challenger_margin",
    "train.challenger_evidence",
    "train.challenger_prior",
    "train.challenger_prior_halves",
    "train.challenger_prior_exposure",
    "train.challenger_prior_collapse",
    "train.challenger_prior_tests",
    "train.hold_margin",
    "train.hold_against",
    "train.hold_evidence",
    "train.hold_evidence_per",
    "train.hold_evidence_tail",
    "train.hold_unless_evidence",
    "train.evidence_reversal",
    "train.persistence_null",
    "train.momentum_null",
    "train.hold_weak_evidence",
    "train.hold_weak_margin",
    "train.policy_margin",
    "train.policy_against",
    "train.policy_exposure_matched",
    "train.vote",
)
_CONTEST_KEYS = ("train.challenger", *_CONTEST_CHOICE_KEYS, "train.restarts", "train.run_dir")
# The keys that only choose among what a run trained (which validation pass, which contender),
# never how it trains: a run under other values of them trains to the bit as it did (but
# `train.select_by` where `train.patience` stops training by it)
SELECTION_KEYS = ("train.select_by", *_CONTEST_CHOICE_KEYS)


def challenger_config(cfg: RunConfig, source: str = "train.challenger") -> RunConfig:
    """The config of `cfg`'s challenger (`training.run.challenger`): `cfg` with the overrides
    in `train.challenger` applied in order, no contest of its own (no challenger, no hold) and
    one training (`train.restarts` are the incumbent's).

    Only keys of `CHALLENGER_SECTIONS` may differ, other than those that lay the run out
    (`_CONTEST_KEYS`: `train.challenger`, its margin, evidence and prior, holding's keys
    (`train.hold_margin`, `hold_against`, `hold_evidence`, `hold_evidence_per`,
    `hold_evidence_tail`, `hold_unless_evidence`, `evidence_reversal`, `persistence_null`,
    `momentum_null`, `hold_weak_evidence`, `hold_weak_margin`, `policy_margin`, `policy_against`,
    `policy_exposure_matched`, `vote`), `train.restarts`, `train.run_dir`): both trainings read the
    same data through the same env and are compared on the same validation bars. Raises
    `ConfigError`, one line naming `source`, on any mistake in the overrides.
    """
    raw = config_to_dict(cfg)
    raw["train"].update(_plain(NO_CONTEST), restarts=1)  # the incumbent's restarts, not its own
    for item in cfg.train.challenger:
        key = item.partition("=")[0].strip()
        if key.split(".", 1)[0] not in CHALLENGER_SECTIONS or key in _CONTEST_KEYS:
            raise ConfigError(
                f"{source}: {item!r}: a challenger changes only {', '.join(CHALLENGER_SECTIONS)} "
                f"keys, other than {', '.join(_CONTEST_KEYS)}"
            )
        _apply_override(raw, item, {}, source)
    return _built(raw, lambda key: source)


def _plain(value: Any) -> Any:
    """`value` with every tuple turned into a list, recursively (YAML-safe)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def config_to_dict(cfg: RunConfig) -> dict[str, Any]:
    """The run config as nested plain dicts of YAML-safe values (tuples become lists)."""
    return _plain(dataclasses.asdict(cfg))


def save_config(cfg: RunConfig, path: str | Path) -> Path:
    """Write the resolved config to YAML file `path` atomically; `load_config` reads it back.

    The text goes to a temporary file in the same folder, then `os.replace` puts it in place, so
    a reader never sees half a file. Missing parent folders are created. Returns the path.
    """
    path = Path(path)
    text = "# Resolved run configuration (training.config.save_config): every key, every section.\n"
    text += yaml.safe_dump(config_to_dict(cfg), sort_keys=False)
    write_text_atomic(path, text)
    return path


def resolve_config(
    path: str | Path | None,
    overrides: Sequence[str] = (),
    *,
    data: str | Sequence[str] | None = None,
    ticker: str | Sequence[str] | None = None,
    run_dir: str | Path | None = None,
) -> RunConfig:
    """A command's config: YAML file `path` with its command-line choices on top.

    `overrides` (`--set` items) come first; then `data` (`--data`: paths or globs taken from the
    current folder, whereas a config file's `data.path` is taken from the repository root),
    `ticker` and `run_dir` beat any `--set` of `data.path`, `data.ticker` and `train.run_dir`.
    One path or ticker is set as a string, several as a list.
    """
    explicit = list(overrides)
    if data:
        paths = [str(Path(p).expanduser().absolute()) for p in _as_list(data)]
        explicit.append(f"data.path={json.dumps(paths[0] if len(paths) == 1 else paths)}")
    if ticker:
        tickers = _as_list(ticker)
        explicit.append(f"data.ticker={json.dumps(tickers[0] if len(tickers) == 1 else tickers)}")
    if run_dir:
        explicit.append(f"train.run_dir={run_dir}")
    return load_config(path, explicit)


def _as_list(value: str | Sequence[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--config FILE` and repeatable `--set section.key=value` (into `args.overrides`)."""
    parser.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG_PATH,
        help="YAML config (overrides of the documented defaults)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. ppo.n_steps=64 (repeatable)",
    )
