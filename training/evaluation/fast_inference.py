"""Deterministic actions of a `MultiHeadPolicy` over a whole data range, the trunk run in batches.

`model.predict(obs, deterministic=True)` runs the whole network for one observation per step:

    features = [trunk(market_t), account_mlp(account_t)]           (`MarketAccountExtractor`)
    logits_k = W_k^out act(W_k^in features + b_k^in) + b_k^out      (`DecisionHeads`, k = 3 heads)
    action_k = argmax softmax(logits_k)                              (`MultiHeadDistribution.mode`)

(the policy's `mlp_extractor` has no policy layers, so the heads read the features directly).
The policy hands over the weights after the trunk and checks that its forward is this
composition (`MultiHeadPolicy.post_trunk_arrays`).
The trunk, by far the heaviest part, reads only market data, which is known for every bar before
the backtest starts. So `FastPolicy` runs it once over the windows of all bars of the range, in
batches, and also precomputes the market half of each head's hidden layer, which is linear in the
trunk output: ``W_k^in features = W_k^market trunk(market_t) + W_k^account account_mlp(...)``.
What is left per step depends on the account state: the account MLP, the account half of the
hidden layers, the activation and the logits, about 20k multiply-adds in one compiled function.
`FastPolicy.record_episode` runs the whole backtest episode in one compiled loop: those heads,
then the env's own execution kernel (`envs.execution.step_accounts`), a few microseconds a bar.

Exactness: the split computes the same function in another order (the heads in float64, the
trunk on a batch instead of one window), so its logits differ from the float32 forward pass of
`predict` by rounding: at most 7e-9 over the GOOGL file for the smoke model. The action is an
argmax per head, so it can only differ where two logits of a head lie within that error of each
other. At every such near tie (the top two within `TIE_TOLERANCE`) the step is recomputed with
`policy.predict` itself, so the actions equal those of the step-by-step `model.predict` loop
(tested on real data). This holds in float32; bfloat16 autocast (a CUDA policy with `use_bf16`)
rounds far more coarsely than the tolerance, and its actions may then differ at close calls.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import pandas as pd
import torch

from agent import MultiHeadPolicy
from envs import execution as ex
from envs.core import Accounts, TradingCore
from training.evaluation.baselines import BarPolicy
from training.evaluation.rollout import ACCOUNT_COLUMNS, record_from_arrays

# Windows per trunk forward: larger batches' activations leave the cache (benchmarks/RESULTS.md).
TRUNK_BATCH = 256
TIE_TOLERANCE = 1e-5  # logits closer than this (times max(1, |largest logit|)) take the slow path
_ACTIVATION_CODES = {"tanh": 0, "relu": 1, "gelu": 2}  # `_act`'s code of each head activation


class FastPolicy:
    """The deterministic policy of a `MultiHeadPolicy` on the bars of one `TradingCore`.

    `record_episode()` gives the whole backtest record of the range in one compiled loop; as a
    policy for a `TradingEnv` on `core`, call it as ``policy(obs, bar) -> action [3]`` with the
    observation the env returns at decision bar `bar`. Building it runs the trunk over every
    window of the range (`batch_size` windows at a time, under `torch.no_grad`); each step then
    costs microseconds. `fallbacks` counts the near-tie steps that went through
    `policy.predict` (see module doc). After `record_episode()`, `final_accounts` holds the
    account at the episode's last bar, from which the next order would be decided
    (`training.evaluation.next_order`), or None when the episode was terminated.
    """

    def __init__(
        self, policy: MultiHeadPolicy, core: TradingCore, batch_size: int = TRUNK_BATCH
    ) -> None:
        arrays = policy.post_trunk_arrays()  # checks the composition this class reproduces
        policy.set_training_mode(False)
        self.policy = policy
        self.core = core
        self.first_bar = core.first_bar
        self.fallbacks = 0
        self.final_accounts: Accounts | None = None
        d_model, w_in = arrays.market_dim, arrays.hidden_weight  # w_in [3H, d_model + A]
        latent = _trunk_latents(policy, core, batch_size)  # [N, d_model] float64
        # In torch, not NumPy: NumPy's BLAS threads would fight torch's for the same cores.
        w_market = torch.from_numpy(np.ascontiguousarray(w_in[:, :d_model]))  # [3H, d_model]
        market_part = torch.addmm(torch.from_numpy(arrays.hidden_bias), latent, w_market.T)
        self._market_part = market_part.numpy()  # [N, 3H]
        w1, b1, w2, b2 = arrays.account_mlp
        # Weights transposed to [in, out]: the kernel's inner loop then runs over outputs.
        self._account_mlp = (np.ascontiguousarray(w1.T), b1, np.ascontiguousarray(w2.T), b2)
        self._account_part = np.ascontiguousarray(w_in[:, d_model:].T)  # [account_dim, 3H]
        self._logits = arrays.logits
        self._activation = _ACTIVATION_CODES[arrays.activation]
        self._action = np.zeros(3, dtype=np.int64)

    def __call__(self, obs: dict[str, np.ndarray], bar: int) -> np.ndarray:
        """The action [3] (level index of each head) for `obs` at decision bar `bar`."""
        row = bar - self.first_bar
        if not 0 <= row < len(self._market_part):
            raise IndexError(f"bar {bar} is outside this policy's range of decision bars")
        near_tie = _act(
            obs["account"], self._market_part[row], self._account_mlp,
            self._account_part, self._activation, self._logits, TIE_TOLERANCE, self._action,
        )  # fmt: skip
        if near_tie:
            self.fallbacks += 1
            return self.policy.predict(obs, deterministic=True)[0]
        return self._action.copy()

    def record_episode(self, start: Accounts | None = None) -> pd.DataFrame:
        """The agent's episode over the core's range, as `rollout.record_episode` would give it.

        The episode starts at the first decision bar, as a `TradingEnv` on this core built with
        ``random_start=False`` does, and runs until it is truncated or terminated. With `start`
        (the `final_accounts` of another `FastPolicy` on the same market whose range ended at
        this range's first decision bar), it continues that account instead of a fresh one
        (`TradingCore.carry_over`): row 0 of the record is then its state at that bar. Steps run in
        one compiled loop: the heads of this policy, then `envs.execution.step_accounts` (the
        env's own kernel), with no Python per bar; a near tie leaves the loop for one
        `policy.predict` call on the observation the env would return. The frame equals that of
        `record_episode` on such an env with this policy as the step function (tested).
        """
        log = _EpisodeLog(self.core, start)
        accounts, core = log.accounts, self.core
        step, forced = 0, np.full(3, -1, dtype=np.int64)
        while True:
            step, finished = _run_episode(
                step, forced, accounts.state, accounts.bars, accounts.observation, core.ohlc,
                core.scale, core.sides, core.leverages, core.risks, core.params, self.first_bar,
                self._market_part, self._account_mlp, self._account_part, self._activation,
                self._logits, TIE_TOLERANCE, log.bars, log.actions, log.outcomes, log.accounts_log,
            )  # fmt: skip
            if finished:
                break
            self.fallbacks += 1
            obs = core.observation(accounts, 0)
            forced[:] = self.policy.predict(obs, deterministic=True)[0]
        record, self.final_accounts = log.finish(step)
        return record


def record_per_bar(
    core: TradingCore, policy: BarPolicy, start: Accounts | None = None
) -> tuple[pd.DataFrame, Accounts | None]:
    """The backtest record of ``policy(obs, bar)`` over `core`'s range, one row a bar, as
    `FastPolicy.record_episode` gives it for a trained policy: `policy` is asked on each decision
    bar (the observation `core` gives the account there) and its action held on the bars between
    (a `TradingEnv` instead steps from decision to decision, one row each). A Python loop over
    the env's own kernel: for policies that are not one `MultiHeadPolicy`, such as a vote
    (`training.evaluation.vote`). Returns the record and the final account, and takes a `start`
    account, as `FastPolicy.record_episode` and its `final_accounts` do."""
    log = _EpisodeLog(core, start)
    accounts, interval = log.accounts, core.params[ex.P_DECISION_INTERVAL]
    step = 0
    for step in range(1, log.actions.shape[0] + 1):
        k = step - 1
        action = log.actions[k : k + 1]  # [1, 3]
        if k > 0 and ex.bars_to_decision(accounts.state[0, ex.EP_STEPS], interval) > 0.0:
            action[0, :] = log.actions[k - 1]  # between decisions (bar 0 always decides)
        else:
            action[0, :] = policy(core.observation(accounts, 0), int(accounts.bars[0]))
        ex.step_accounts(
            accounts.state, accounts.bars, action, core.ohlc, core.scale, core.sides,
            core.leverages, core.risks, core.params, log.outcomes[k : k + 1],
            accounts.observation, False,
        )  # fmt: skip
        log.log_account(step)
        if log.outcomes[k, ex.TERMINATED] > 0.0 or log.outcomes[k, ex.TRUNCATED] > 0.0:
            break
    return log.finish(step)


class _EpisodeLog:
    """One account's episode over a core's range, logged into the arrays `record_from_arrays`
    reads: bars [n + 1], actions [n, 3], outcomes [n, N_OUT] and the account columns [n + 1, 3]
    (row 0 the start). `start` is an account carried over (`TradingCore.carry_over`), or None
    for a fresh one at the core's first decision bar."""

    def __init__(self, core: TradingCore, start: Accounts | None) -> None:
        self.core = core
        if start is None:
            self.accounts = Accounts.zeros(1)
            core.reset(self.accounts, np.zeros(1, dtype=np.int64), np.array([core.first_bar]))
        else:
            self.accounts = core.carry_over(start)
        steps = core.episode_length
        self.bars = np.empty(steps + 1, dtype=np.int64)  # [n + 1]
        self.actions = np.empty((steps, 3), dtype=np.int64)  # [n, 3]
        self.outcomes = np.empty((steps, ex.N_OUT))  # [n, N_OUT]
        self.accounts_log = np.empty((steps + 1, len(ACCOUNT_COLUMNS)))  # [n + 1, 3]
        self.log_account(0)

    def log_account(self, row: int) -> None:
        """Log the account's bar and state as row `row` (after step `row`)."""
        self.bars[row] = self.accounts.bars[0]
        self.accounts_log[row] = self.accounts.state[0, list(ACCOUNT_COLUMNS)]

    def finish(self, steps: int) -> tuple[pd.DataFrame, Accounts | None]:
        """The record of the first `steps` steps, and the final account (None when the episode
        was terminated)."""
        terminated = steps > 0 and self.outcomes[steps - 1, ex.TERMINATED] > 0.0
        record = record_from_arrays(
            self.core, self.bars[: steps + 1], self.actions[:steps], self.outcomes[:steps],
            self.accounts_log[: steps + 1],
        )  # fmt: skip
        return record, None if terminated else self.accounts


def _trunk_latents(policy: MultiHeadPolicy, core: TradingCore, batch_size: int) -> torch.Tensor:
    """Trunk outputs [N, d_model] (float64, CPU) for the windows ending at first_bar..end_bar.

    `MarketAccountExtractor.market_latent`, the market half of the policy's features. On a CPU
    with T > 1 torch threads the batches run T at a time, one Python thread and one torch thread
    each (torch releases the GIL inside its ops): at these small shapes that is faster than T
    threads inside every op (benchmarks/RESULTS.md).
    """
    extractor = policy.extractor
    bars = np.arange(core.first_bar, core.end_bar + 1)
    batches = [bars[start : start + batch_size] for start in range(0, len(bars), batch_size)]

    def encode(batch: np.ndarray) -> torch.Tensor:
        market = torch.as_tensor(core.market_windows(batch), device=policy.device)  # [B, W, F]
        with torch.no_grad():  # thread-local: entered here, in the thread that runs the trunk
            return extractor.market_latent(market).cpu()  # [B, d_model]

    threads = torch.get_num_threads()
    if policy.device.type != "cpu" or threads == 1 or len(batches) == 1:
        return torch.cat([encode(batch) for batch in batches]).double()
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(threads) as pool:
            return torch.cat(list(pool.map(encode, batches))).double()
    finally:
        torch.set_num_threads(threads)


@numba.njit(cache=True, inline="always")
def _affine(weight_t, bias, x, out):
    """out = weight_t.T @ x + bias, weight_t [in, out]: the inner loop runs over outputs (SIMD)."""
    out[:] = bias
    for j in range(weight_t.shape[0]):
        xj = x[j]
        for i in range(weight_t.shape[1]):
            out[i] += weight_t[j, i] * xj


@numba.njit(cache=True, inline="always")
def _gelu(x):
    """Exact GELU, x * Phi(x), in place (torch's default `approximate="none"`)."""
    for i in range(x.shape[0]):
        x[i] = 0.5 * x[i] * (1.0 + math.erf(x[i] / math.sqrt(2.0)))


@numba.njit(cache=True, inline="always")
def _head_argmax(weight, bias, hidden, tolerance):
    """(argmax of weight @ hidden + bias, whether the top two logits are within tolerance)."""
    best, best_index, runner_up = -np.inf, 0, -np.inf
    for i in range(weight.shape[0]):
        logit = bias[i]
        for j in range(weight.shape[1]):
            logit += weight[i, j] * hidden[j]
        if logit > best:
            best, best_index, runner_up = logit, i, best
        elif logit > runner_up:
            runner_up = logit
    return best_index, best - runner_up <= tolerance * max(1.0, abs(best))


@numba.njit(cache=True)
def _act(account, market_part, account_mlp, account_part, activation, logits, tolerance, action):
    """Write the action of one step into `action` [3]; return True at a near tie (see module).

    account [A]: the observation (float32); market_part [3H]: the market half of the heads'
    hidden layers plus their biases; account_mlp: (w1 [A, D], b1, w2 [D, D], b2), weights
    transposed; account_part [D, 3H]: the account half of the heads' hidden layers, transposed;
    activation: of the heads' hidden layers, 0 tanh, 1 relu, 2 gelu; logits: each head's
    (weight [n_k, H], bias [n_k]).
    """
    w1_t, b1, w2_t, b2 = account_mlp
    h1 = np.empty(b1.shape[0])
    _affine(w1_t, b1, account.astype(np.float64), h1)
    _gelu(h1)
    h2 = np.empty(b2.shape[0])
    _affine(w2_t, b2, h1, h2)
    _gelu(h2)
    hidden = np.empty(market_part.shape[0])
    _affine(account_part, market_part, h2, hidden)
    if activation == 0:
        hidden = np.tanh(hidden)
    elif activation == 1:
        hidden = np.maximum(hidden, 0.0)
    else:
        _gelu(hidden)
    width = hidden.shape[0] // 3
    near_tie = False
    for k, (weight, bias) in enumerate(logits):
        action[k], tie = _head_argmax(weight, bias, hidden[k * width : (k + 1) * width], tolerance)
        near_tie |= tie
    return near_tie


@numba.njit(cache=True)
def _run_episode(
    step, forced, state, bars, account_obs, ohlc, scale, sides, leverages, risks, params, first_bar,
    market_part, account_mlp, account_part, activation, logits, tolerance,
    bar_log, actions, outcomes, accounts,
):  # fmt: skip
    """Step one account from step `step` on; return (steps done, whether the episode ended).

    Each step is one bar. On a decision bar (every `decision_interval`-th of the episode) the
    heads choose the action from the account observation (`_act`); on the bars between, the
    last decision's action stays in force (the kernel places no order there). Then
    `step_accounts` runs the bar and the step is logged (bar_log [n + 1], actions [n, 3],
    outcomes [n, N_OUT], accounts [n + 1, 3]). The first step takes `forced` instead when it
    holds an action (not -1). At a near tie the loop stops before that step, returning
    (step, False), so the caller can decide it with `policy.predict`.
    """
    interval = params[ex.P_DECISION_INTERVAL]
    for k in range(step, actions.shape[0]):
        action = actions[k : k + 1]  # [1, 3]: the kernel's actions array, logged in place
        if k == step and forced[0] >= 0:
            action[0, :] = forced
        elif ex.bars_to_decision(state[0, ex.EP_STEPS], interval) > 0.0:
            action[0, :] = actions[k - 1]  # between decisions (bar 0 always decides)
        elif _act(
            account_obs[0], market_part[bars[0] - first_bar], account_mlp, account_part,
            activation, logits, tolerance, action[0],
        ):  # fmt: skip
            return k, False
        ex.step_accounts(
            state, bars, action, ohlc, scale, sides, leverages, risks, params, outcomes[k : k + 1],
            account_obs, False,
        )  # fmt: skip
        bar_log[k + 1] = bars[0]
        accounts[k + 1, 0] = state[0, ex.CASH]
        accounts[k + 1, 1] = state[0, ex.QTY]
        accounts[k + 1, 2] = state[0, ex.EQUITY]
        if outcomes[k, ex.TERMINATED] > 0.0 or outcomes[k, ex.TRUNCATED] > 0.0:
            return k + 1, True
    return actions.shape[0], True
