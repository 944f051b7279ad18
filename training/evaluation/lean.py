"""Which way a policy's direction head leans, apart from what its own account does.

A backtest's exposure mixes the direction head's choice with the account's hysteresis (a
policy that is long stays long unless the head turns). `long_share_pct` reads the head alone:
at every decision bar of a range, the bar's own market window seen from a flat account with its
initial equity, the share of bars on which the head gives long a probability above 1/2. A head
that collapsed to always long after training bars that rose leans near 100% while it may still
rank the hidden spells (benchmarks/RESULTS.md, fifty-third round); a head that reads the market
leans far less. Validation records it for every pass (`training.evaluation.validation`, logged
as `eval/long_share_pct`), and the learning benchmark's probes read the same observations on a
series' tail (`benchmarks/learning_scoring.py`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from agent import MultiHeadPolicy
from envs import TradingEnv

LEAN_BATCH = 1024  # windows per forward


def decision_bars(env: TradingEnv) -> np.ndarray:
    """The decision bars [N] of `env`'s range: its first bar up to, not including, its last."""
    return np.arange(env.core.first_bar, env.core.end_bar)


def flat_account_observations(env: TradingEnv) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """At every decision bar of `env`'s range (`decision_bars`), the observation from a flat
    account with the initial equity: returns (bars [N], observation {"market": [N, W, F],
    "account": [N, A]}). Resets `env`."""
    first, _ = env.reset()
    bars = decision_bars(env)  # [N]
    observation = {
        "market": env.core.market_windows(bars),  # [N, W, F]
        "account": np.repeat(first["account"][None], len(bars), axis=0),  # [N, A]
    }
    return bars, observation


def long_probabilities(policy: MultiHeadPolicy, env: TradingEnv) -> np.ndarray:
    """The direction head's probability of long [N] at each decision bar of `env`'s range, from
    a flat account (`flat_account_observations`), in batches of `LEAN_BATCH`."""
    _, observation = flat_account_observations(env)
    long = env.config.direction_names.index("long")
    found = []
    for start in range(0, len(observation["account"]), LEAN_BATCH):
        batch = {key: value[start : start + LEAN_BATCH] for key, value in observation.items()}
        with torch.no_grad():
            direction = policy.head_distributions(batch).heads()["direction"]
        found.append(direction.probs[:, long].cpu().numpy())  # [B]
    return np.concatenate(found)  # [N]


def long_share_pct(policy: MultiHeadPolicy, envs: Mapping[str, TradingEnv]) -> float:
    """The percent of the decision bars of `envs` (every instrument's range, pooled) on which
    `policy`'s direction head, from a flat account, gives long a probability above 1/2."""
    long = np.concatenate([long_probabilities(policy, env) for env in envs.values()])  # [N]
    return float((long > 0.5).mean() * 100.0)
