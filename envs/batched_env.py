"""`BatchedTradingEnv`: N trading accounts stepped in one call, as a stable-baselines3 `VecEnv`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, cast

import numpy as np
from gymnasium.utils import seeding
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs, VecEnvStepReturn

from envs import execution as ex
from envs.config import EnvConfig
from envs.core import Accounts, DataSource, TradingCore

# The info of every account that did not finish on a step: one shared, read-only empty mapping
# (N fresh empty dicts per step were a sizeable share of a step: benchmarks/RESULTS.md).
NOTHING_TO_REPORT: Mapping[str, Any] = MappingProxyType({})


class BatchedTradingEnv(VecEnv):
    """N independent accounts on the same data, stepped together by one compiled kernel.

    Account i behaves exactly like a `TradingEnv` seeded with `seed + i` (SB3's convention for
    vectorised envs): the same starts, fills, rewards and observations. Finished accounts are
    reset automatically, as SB3 expects; their last observation is in
    `infos[i]["terminal_observation"]` and their trading summary in `infos[i]["episode_trading"]`.
    Only finished accounts get a dict of their own: every other `infos[i]` is the read-only
    `NOTHING_TO_REPORT`, so writing into it raises `TypeError` instead of leaking into later steps
    (SB3's wrappers only write into the infos of finished envs, and `VecMonitor` copies first).

    Per-account step details that `TradingEnv` puts in `info` are kept as arrays here instead of
    N dicts per step: `last_step[name]` is a [N] array for each `envs.execution` outcome column
    (e.g. "reward", "commission", "stop_hit"), plus "equity", "cash" and "position".

    `data` is what `TradingEnv` takes, or a ready `TradingCore` (alone: it carries its config and
    ranges), such as `TradingCore.stacked` over several instruments for training on all of them.

    With `direction_rewards=True` each step also computes `direction_rewards` [N, D] before it
    moves: the reward every direction level would have paid (`TradingCore.direction_rewards`),
    for a learner that uses the outcome of the actions it did not take.
    """

    def __init__(
        self,
        data: DataSource | TradingCore,
        config: EnvConfig | None = None,
        *,
        n_envs: int = 16,
        bars: range | None = None,
        ticker: str | None = None,
        adjust: bool = False,
        direction_rewards: bool = False,
        **config_overrides: Any,
    ) -> None:
        if isinstance(data, TradingCore):  # built by the caller, e.g. `TradingCore.stacked`
            if config is not None or bars is not None or ticker is not None or config_overrides:
                raise TypeError("a TradingCore comes with its config and ranges: pass it alone")
            self.core = data
        else:
            self.core = TradingCore.load(
                data, config, bars=bars, ticker=ticker, adjust=adjust, **config_overrides
            )
        self.config = self.core.config
        self.render_mode = None
        super().__init__(n_envs, self.core.observation_space, self.core.action_space)
        self._accounts = Accounts.zeros(n_envs)
        self._rngs = [seeding.np_random(None)[0] for _ in range(n_envs)]
        self._final: tuple[np.ndarray, np.ndarray] | None = None  # see `step_wait`
        self._with_direction_rewards = direction_rewards
        # [N, D] what each direction level would have paid in the last step (zeros until then)
        self.direction_rewards = np.zeros((n_envs, len(self.core.sides)))

    def reset(self) -> VecEnvObs:
        """Reset every account, re-seeding those given a seed through `seed()`."""
        for i, seed in enumerate(self._seeds):
            if seed is not None:
                self._rngs[i] = seeding.np_random(seed)[0]
        self._reset_seeds()
        self._reset_options()
        self._reset_accounts(np.arange(self.num_envs))
        self.reset_infos = [{} for _ in range(self.num_envs)]
        return self._observation()

    def step_async(self, actions: np.ndarray) -> None:
        """Store the actions [N, 3] for `step_wait`."""
        self._accounts.actions[:] = actions

    def step_wait(self) -> VecEnvStepReturn:
        """Step all accounts; reset the finished ones; return (obs, rewards, dones, infos)."""
        accounts, core = self._accounts, self.core
        if self._with_direction_rewards:
            self.direction_rewards = core.direction_rewards(accounts)
        core.step(accounts)
        rewards = accounts.out[:, ex.REWARD].astype(np.float32)
        dones = (accounts.out[:, ex.TERMINATED] + accounts.out[:, ex.TRUNCATED]) > 0
        infos: list[Mapping[str, Any]] = [NOTHING_TO_REPORT] * self.num_envs
        finished = dones.nonzero()[0]
        self._final = None
        if finished.size:
            # Their final state, which the auto-reset below overwrites (for `last_step`).
            self._final = (finished, accounts.state[finished, : ex.EQUITY + 1])  # a copy
            last_market = core.market_windows(accounts.bars[finished])  # [n_finished, W, F]
            last_account = accounts.observation[finished]  # [n_finished, A]
            for j, i in enumerate(finished):  # finished accounts only; the step has no such loop
                infos[i] = {
                    "terminal_observation": {"market": last_market[j], "account": last_account[j]},
                    "TimeLimit.truncated": bool(accounts.out[i, ex.TRUNCATED]),
                    "episode_trading": core.episode_summary(accounts, i),
                }
            self._reset_accounts(finished)
        # SB3 types infos as dicts; the read-only `NOTHING_TO_REPORT` stands in for empty ones.
        return self._observation(), rewards, dones, cast(list[dict[str, Any]], infos)

    @property
    def last_step(self) -> dict[str, np.ndarray]:
        """Per-account outcome of the last step as [N] arrays (views: valid until the next step).

        Keys: the `envs.execution` outcome columns ("reward", "commission", "stop_hit", ...),
        plus "equity", "cash" and "position" before any auto-reset, and "actions" [N, 3].
        """
        accounts = self._accounts
        step = {name: accounts.out[:, column] for column, name in enumerate(ex.OUTCOME_NAMES)}
        state = accounts.state[:, : ex.EQUITY + 1].copy()  # [N, 5]
        if self._final is not None:
            finished, final_state = self._final
            state[finished] = final_state
        step["equity"] = state[:, ex.EQUITY]
        step["cash"] = state[:, ex.CASH]
        step["position"] = state[:, ex.QTY]
        step["actions"] = accounts.actions
        return step

    def _reset_accounts(self, index: np.ndarray) -> None:
        starts = np.array([self.core.draw_start(self._rngs[i]) for i in index], dtype=np.int64)
        self.core.reset(self._accounts, index, starts)

    def _observation(self) -> dict[str, np.ndarray]:
        # Fresh arrays: callers may keep observations.
        accounts = self._accounts
        return {
            "market": self.core.market_windows(accounts.bars),
            "account": accounts.observation.copy(),
        }

    def close(self) -> None:
        """Nothing to release: all state is in arrays."""

    def get_attr(self, attr_name: str, indices: Iterable[int] | int | None = None) -> list[Any]:
        """The attribute of this env, once per selected account (accounts share one env)."""
        return [getattr(self, attr_name)] * len(list(self._get_indices(indices)))

    def set_attr(
        self, attr_name: str, value: Any, indices: Iterable[int] | int | None = None
    ) -> None:
        """Set an attribute on this env (shared by all accounts)."""
        setattr(self, attr_name, value)

    def env_method(
        self,
        method_name: str,
        *method_args: Any,
        indices: Iterable[int] | int | None = None,
        **method_kwargs: Any,
    ) -> list[Any]:
        """Call a method of this env once per selected account."""
        method = getattr(self, method_name)
        return [method(*method_args, **method_kwargs) for _ in self._get_indices(indices)]

    def env_is_wrapped(
        self, wrapper_class: type, indices: Iterable[int] | int | None = None
    ) -> list[bool]:
        """Accounts are not gymnasium envs, so none is wrapped."""
        return [False] * len(list(self._get_indices(indices)))

    def get_images(self) -> Sequence[np.ndarray | None]:
        """No rendering."""
        return [None] * self.num_envs
