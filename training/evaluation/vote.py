"""A vote of several trained policies: one account, traded by what most of them decide.

Several PPO trainings of one config on one series end in quite different places, and validation
picks among them little better than chance (benchmarks/RESULTS.md, sixty-first and sixty-second
rounds). A vote keeps what most members agree on instead of betting on one. At each decision bar
every member decides on the observation of the vote's own account (so each member sees the
position the vote holds, as it would its own), and `vote_action` combines their actions:

* direction: the side (short, flat, long) that more than half of the members choose; flat where
  no side has a majority;
* leverage and risk: the median level, by value, of the members on the voted side (with an even
  number of them, the lower of the two middle levels: the smaller leverage, the tighter stop).
  A member that votes for another side has no say in how the position is sized or stopped.

`VotePolicy` is such a vote as a `BarPolicy` on one core's bars. `Vote` is the vote a run ships
under `train.vote` (`training.run.vote`), and `record_trained` runs what a run ships, a single
policy or a vote, over a range: what the backtest, the walk-forward and the benchmarks trade.
Each member runs as a `FastPolicy` (its deterministic actions, its trunk batched).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from agent import MultiHeadPolicy
from envs.core import Accounts, TradingCore
from training.evaluation.baselines import BarPolicy
from training.evaluation.fast_inference import FastPolicy, record_per_bar


def vote_action(
    actions: np.ndarray,
    sides: Sequence[int],
    leverages: Sequence[float],
    risks: Sequence[float],
) -> np.ndarray:
    """The vote's action [3] (direction, leverage, risk level indices) from the members'
    `actions` [M, 3], given each direction level's side (-1, 0, +1) and each leverage and risk
    level's value (the module doc gives the rule). Flat must be one of the `sides`."""
    sides_of = np.asarray(sides)[actions[:, 0]]  # [M] side each member chose
    values, counts = np.unique(sides_of, return_counts=True)
    top = int(np.argmax(counts))
    side = int(values[top]) if 2 * counts[top] > len(actions) else 0
    direction = list(sides).index(side)
    voters = actions[sides_of == side] if side in sides_of else actions  # [V, 3]
    return np.array(
        [direction, _median_level(voters[:, 1], leverages), _median_level(voters[:, 2], risks)],
        dtype=np.int64,
    )


def _median_level(indices: np.ndarray, levels: Sequence[float]) -> int:
    """The index, among `indices`, of the median level by value (the lower middle one of an
    even count)."""
    ranked = sorted((int(i) for i in indices), key=lambda i: (levels[i], i))
    return ranked[(len(ranked) - 1) // 2]


class VotePolicy:
    """The vote of `members` (each a `BarPolicy` on the bars of `core`) as a `BarPolicy`:
    ``policy(obs, bar) -> action [3]``, by `vote_action` over the core's level tables."""

    def __init__(self, members: Sequence[BarPolicy], core: TradingCore) -> None:
        if not members:
            raise ValueError("a vote needs at least one member")
        self.members = tuple(members)
        self._sides = tuple(int(s) for s in core.sides)
        self._leverages = tuple(float(x) for x in core.leverages)
        self._risks = tuple(float(x) for x in core.risks)

    def __call__(self, obs: dict[str, np.ndarray], bar: int) -> np.ndarray:
        """The vote's action at decision bar `bar` on the vote account's observation `obs`."""
        actions = np.stack([member(obs, bar) for member in self.members])  # [M, 3]
        return vote_action(actions, self._sides, self._leverages, self._risks)


@dataclass(frozen=True)
class Vote:
    """A vote of trained `policies` (at least one), each deterministic, by `vote_action`: what a
    run ships under `train.vote` where its contest keeps the incumbent."""

    policies: tuple[MultiHeadPolicy, ...]

    def __post_init__(self) -> None:
        if not self.policies:
            raise ValueError("a vote needs at least one member")


Trained = MultiHeadPolicy | Vote  # what a run ships: one policy, or a vote of several


def members_of(trained: Trained) -> tuple[MultiHeadPolicy, ...]:
    """The policies that decide for `trained`: a vote's members, or the one policy."""
    return trained.policies if isinstance(trained, Vote) else (trained,)


def record_trained(
    trained: Trained, core: TradingCore, start: Accounts | None = None
) -> tuple[pd.DataFrame, Accounts | None]:
    """The backtest record of `trained` over `core`'s range (one row a bar) and the account at
    its end (None when the episode was terminated). A policy runs through
    `FastPolicy.record_episode`, a vote through `record_per_bar`; `start` continues an account
    carried over from the range before (`FastPolicy.record_episode`)."""
    if isinstance(trained, Vote):
        members = [FastPolicy(policy, core) for policy in trained.policies]
        return record_per_bar(core, VotePolicy(members, core), start)
    fast = FastPolicy(trained, core)
    record = fast.record_episode(start)
    return record, fast.final_accounts
