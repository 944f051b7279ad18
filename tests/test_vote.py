"""`training.evaluation.vote`: the side most members choose, sized and stopped by the median of
its voters; a vote of copies of one policy is that policy, bar for bar; and `record_per_bar`,
which runs it, is `FastPolicy.record_episode` for a trained policy."""

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from envs import TradingEnv, load_market_data
from training.config import load_config
from training.evaluation.baselines import constant
from training.evaluation.fast_inference import FastPolicy, record_per_bar
from training.evaluation.vote import Vote, VotePolicy, record_trained, vote_action
from training.run.folder import load_model

REPO = Path(__file__).resolve().parents[1]
GOOGL = REPO / "data" / "gymanytrading_GOOGL_daily.csv"
SIDES = (-1, 0, 1)  # short, flat, long: direction indices 0, 1, 2
LEVERAGES = (2.0, 1.0, 5.0)  # not sorted: the median is by value
RISKS = (0.05, 0.1, 0.2, 0.3)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _vote(*actions: tuple[int, int, int]) -> list[int]:
    return vote_action(np.array(actions), SIDES, LEVERAGES, RISKS).tolist()


def test_the_vote_takes_the_side_more_than_half_choose_sized_by_its_voters_median() -> None:
    # Two longs and a short: long; its leverage the median of the longs' 5x and 2x by value
    # (the lower middle of two: 2x, index 0), its stop the lower of theirs (0.1, index 1); the
    # short's 1x and 0.3 stop have no say.
    assert _vote((2, 2, 3), (0, 1, 1), (2, 0, 1)) == [2, 0, 1]
    # Three longs: the middle leverage by value is 2x (index 0) of 1x, 2x and 5x.
    assert _vote((2, 1, 0), (2, 0, 2), (2, 2, 3)) == [2, 0, 2]
    # One of each side: no majority, so flat, sized by the flat member alone.
    assert _vote((0, 0, 0), (1, 2, 3), (2, 1, 1)) == [1, 2, 3]
    # Two of four is no majority: flat, though no member chose it (sized by all four).
    assert _vote((2, 0, 0), (2, 1, 1), (0, 2, 2), (0, 2, 3)) == [1, 0, 1]
    # A single member is followed.
    assert _vote((0, 2, 3)) == [0, 2, 3]


def test_long_only_levels_vote_flat_or_long() -> None:
    sides, levels = (0, 1), (1.0,)  # long only: flat is index 0
    actions = np.array([[1, 0, 0], [0, 0, 1], [1, 0, 2]])
    assert vote_action(actions, sides, levels, RISKS).tolist() == [1, 0, 0]
    # A tie: flat, with the flat member's levels
    assert vote_action(actions[:2], sides, levels, RISKS).tolist() == [0, 0, 1]


def _env(run: Path, decision_interval: int) -> TradingEnv:
    config = load_config(run / "config.yaml").env
    config = dataclasses.replace(config, decision_interval=decision_interval)
    return TradingEnv(load_market_data(GOOGL), config, random_start=False, episode_length=None)


def test_a_vote_of_copies_of_one_policy_is_that_policy_bar_for_bar(smoke_run) -> None:
    """Every bar of the GOOGL file, a decision every third bar: the vote of three copies gives
    the single policy's own record, and so does `record_per_bar` of its `FastPolicy`."""
    policy = load_model(smoke_run).policy
    with torch.no_grad():  # decisive logits, so the actions change with the state
        for head in (policy.decision_heads.direction, policy.decision_heads.risk):
            head.logits.weight.mul_(300.0)
    core = _env(smoke_run, 3).core
    single = FastPolicy(policy, core).record_episode()
    assert single["direction"].iloc[1:].nunique() >= 2  # not a constant policy
    pd.testing.assert_frame_equal(record_per_bar(core, FastPolicy(policy, core))[0], single)
    pd.testing.assert_frame_equal(record_trained(Vote((policy,) * 3), core)[0], single)


def test_a_vote_trades_what_its_majority_decides(smoke_run) -> None:
    """Members that always hold one action: two longs and a flat trade as the long does; a long,
    a short and a flat stand aside as the flat does."""
    core = _env(smoke_run, 5).core
    config = core.config
    long, short, flat = (
        np.array([config.direction_names.index(name), 0, 1], dtype=np.int64)
        for name in ("long", "short", "flat")
    )
    alone = {
        "long": record_per_bar(core, constant(long))[0],
        "flat": record_per_bar(core, constant(flat))[0],
    }
    assert alone["long"]["position"].iloc[-1] > 0 and alone["flat"]["position"].eq(0).all()
    majority = VotePolicy([constant(long), constant(flat), constant(long)], core)
    pd.testing.assert_frame_equal(record_per_bar(core, majority)[0], alone["long"])
    split = VotePolicy([constant(long), constant(short), constant(flat)], core)
    pd.testing.assert_frame_equal(record_per_bar(core, split)[0], alone["flat"])
    with pytest.raises(ValueError, match="at least one member"):
        VotePolicy([], core)
