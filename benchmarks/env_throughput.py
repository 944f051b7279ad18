"""Environment throughput vs gym-anytrading, measured in one run on the same GOOGL file.

Prints steps/s of:
- gym-anytrading `stocks-v0` (the reference), through `gymnasium.make`;
- our `MultiHeadTrading-v0` single environment, through `gymnasium.make`;
- a no-op Gymnasium env that returns the same Dict observation and an info dict of the same
  size without computing anything: the floor that Python and Gymnasium's `step` protocol set;
- our `BatchedTradingEnv` with 256 accounts (env-steps/s = calls/s x 256);
each as a ratio against gym-anytrading. Window 64, random actions drawn in advance.

Usage: python benchmarks/env_throughput.py [--seconds 3] [--accounts 256]
"""

from __future__ import annotations

import argparse
import platform
import time
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pandas as pd
from machine import cpu_model

import envs  # noqa: F401  (registers MultiHeadTrading-v0)
from envs import BatchedTradingEnv
from envs import execution as ex

DATA = Path(__file__).resolve().parents[1] / "data" / "gymanytrading_GOOGL_daily.csv"
WINDOW = 64
NUMERIC_INFO = ex.OUTCOME_NAMES[ex.ORDER_FILL : ex.COSTS + 1]  # the fills and charges in info


def steps_per_second(env: gym.Env, actions: list, seconds: float) -> float:
    """Step `env` with pre-drawn actions for about `seconds`; reset when an episode ends."""
    env.reset(seed=0)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        n += len(actions)
    return n / (time.perf_counter() - start)


class ProtocolFloor(gym.Env):
    """Does nothing but return an observation and info shaped like ours."""

    def __init__(self, template: gym.Env) -> None:
        self.observation_space = template.observation_space
        self.action_space = template.action_space
        self._market = np.zeros(self.observation_space["market"].shape, np.float32)
        self._account = np.zeros(self.observation_space["account"].shape, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def _obs(self):
        return {"market": self._market.copy(), "account": self._account.copy()}

    def step(self, action):
        info = {k: 0.0 for k in ("equity", "cash", "position", "exposure", "price", *NUMERIC_INFO)}
        info["action"] = {"direction": "long", "leverage": 1.0, "risk": 0.01}
        return self._obs(), 0.0, False, False, info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="time per measurement")
    parser.add_argument("--accounts", type=int, default=256, help="accounts in the batched env")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    import gym_anytrading  # noqa: F401  (benchmark-only dependency; registers stocks-v0)

    rng = np.random.default_rng(0)
    frame = pd.read_csv(DATA, index_col="Date")
    reference = gym.make(
        "stocks-v0", df=frame, window_size=WINDOW, frame_bound=(WINDOW, len(frame))
    )
    ours = gym.make("MultiHeadTrading-v0", data=str(DATA), window=WINDOW)
    floor = ProtocolFloor(ours.unwrapped)
    ours_actions = list(rng.integers(0, ours.action_space.nvec, size=(10_000, 3)))
    ref_actions = rng.integers(0, 2, size=10_000).tolist()

    batched = BatchedTradingEnv(str(DATA), n_envs=args.accounts, window=WINDOW)
    batched.seed(0)
    batched.reset()
    batch_actions = rng.integers(0, batched.action_space.nvec, size=(200, args.accounts, 3))
    batched.step(batch_actions[0])  # compile / warm up
    steps_per_second(ours, ours_actions[:100], 0.1)

    ref = steps_per_second(reference, ref_actions, args.seconds)
    single = steps_per_second(ours, ours_actions, args.seconds)
    protocol = steps_per_second(floor, ours_actions, args.seconds)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        for actions in batch_actions:
            batched.step(actions)
        calls += len(batch_actions)
    batch = calls * args.accounts / (time.perf_counter() - start)

    print(f"machine: {cpu_model()}, python {platform.python_version()}, numpy {np.__version__}")
    print(f"data: {DATA.name}, window {WINDOW}")
    print(f"{'environment':48s} {'steps/s':>12s} {'ratio':>7s}")
    rows = [
        ("gym-anytrading stocks-v0 (reference)", ref),
        ("MultiHeadTrading-v0 single env", single),
        ("no-op env, same obs/info (protocol floor)", protocol),
        (f"BatchedTradingEnv, {args.accounts} accounts (env-steps/s)", batch),
    ]
    for name, value in rows:
        print(f"{name:48s} {value:12,.0f} {value / ref:7.2f}x")
    print(
        f"targets: single >= 2x -> {'met' if single >= 2 * ref else 'NOT met'}; "
        f"batched >= 20x -> {'met' if batch >= 20 * ref else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
