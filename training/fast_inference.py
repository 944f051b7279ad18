"""Deterministic actions of a `MultiHeadPolicy` over a whole data range, the trunk run in batches.

`model.predict(obs, deterministic=True)` runs the whole network for one observation per step:

    features = [trunk(market_t), account_mlp(account_t)]           (`MarketAccountExtractor`)
    logits_k = W_k^out act(W_k^in features + b_k^in) + b_k^out      (`DecisionHeads`, k = 3 heads)
    action_k = argmax softmax(logits_k)                              (`MultiHeadDistribution.mode`)

(the policy's `mlp_extractor` has no policy layers, so the heads read the features directly).
The trunk, by far the heaviest part, reads only market data, which is known for every bar before
the backtest starts. So `FastPolicy` runs it once over the windows of all bars of the range, in
batches, and also precomputes the market half of each head's hidden layer, which is linear in the
trunk output: ``W_k^in features = W_k^market trunk(market_t) + W_k^account account_mlp(...)``.
What is left per step depends on the account state: the account MLP, the account half of the
hidden layers, the activation and the logits, about 20k multiply-adds in one compiled function.

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

import numba
import numpy as np
import torch
from torch import nn

from agent import MultiHeadPolicy
from envs.core import TradingCore

# Windows per trunk forward. On 2 CPU cores (default trunk, window 32) 64..1024 ran ~50% faster
# than 4096, whose activations (~70 MB) no longer fit in cache.
TRUNK_BATCH = 1024
TIE_TOLERANCE = 1e-5  # logits closer than this (times max(1, |largest logit|)) take the slow path
_ACTIVATIONS = {nn.Tanh: 0, nn.ReLU: 1, nn.GELU: 2}  # head activations the kernel implements


class FastPolicy:
    """The deterministic policy of a `MultiHeadPolicy` on the bars of one `TradingCore`.

    Call it as ``policy(obs, bar) -> action [3]`` with the observation a `TradingEnv` on `core`
    returns at decision bar `bar`. Building it runs the trunk over every window of the range
    (`batch_size` windows at a time, under `torch.no_grad`); each call then costs microseconds.
    `fallbacks` counts the near-tie steps that went through `policy.predict` (see module doc).
    """

    def __init__(
        self, policy: MultiHeadPolicy, core: TradingCore, batch_size: int = TRUNK_BATCH
    ) -> None:
        extractor = policy.features_extractor
        _check_composition(policy)
        policy.set_training_mode(False)
        self.policy = policy
        self.first_bar = core.first_bar
        self.fallbacks = 0
        heads = policy.decision_heads
        head_list = (heads.direction, heads.leverage, heads.risk)
        d_model = extractor.trunk.output_dim
        w_in = _numpy(torch.cat([head.hidden.weight for head in head_list]))  # [3H, d + A]
        b_in = _numpy(torch.cat([head.hidden.bias for head in head_list]))  # [3H]
        latent = _trunk_latents(policy, core, batch_size)  # [N, d_model]
        self._market_part = latent @ w_in[:, :d_model].T + b_in  # [N, 3H]
        first, second = extractor.account_mlp[0], extractor.account_mlp[2]
        # Weights transposed to [in, out]: the kernel's inner loop then runs over outputs.
        self._account_mlp = (
            _transposed(first.weight),
            _numpy(first.bias),
            _transposed(second.weight),
            _numpy(second.bias),
        )
        self._account_part = np.ascontiguousarray(w_in[:, d_model:].T)  # [account_dim, 3H]
        self._logits = tuple((_numpy(h.logits.weight), _numpy(h.logits.bias)) for h in head_list)
        self._activation = _ACTIVATIONS[type(head_list[0].activation)]
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


def _check_composition(policy: MultiHeadPolicy) -> None:
    """Refuse a policy whose forward pass is not the composition `FastPolicy` reproduces."""
    account_mlp = policy.features_extractor.account_mlp
    layers = [type(module) for module in account_mlp]
    activation = policy.decision_heads.direction.activation
    problems = [
        (len(policy.mlp_extractor.policy_net) != 0, "policy layers between features and heads"),
        (layers != [nn.Linear, nn.GELU, nn.Linear, nn.GELU], f"an account MLP {layers}"),
        (any(m.approximate != "none" for m in account_mlp if isinstance(m, nn.GELU)),
         "a tanh-approximated GELU"),
        (type(activation) not in _ACTIVATIONS, f"head activation {type(activation).__name__}"),
        (isinstance(activation, nn.GELU) and activation.approximate != "none",
         "a tanh-approximated GELU"),
    ]  # fmt: skip
    for failed, what in problems:
        if failed:
            raise ValueError(f"FastPolicy does not support {what}")


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    """A float64 NumPy copy of a parameter."""
    return tensor.detach().to("cpu", torch.float64).numpy().copy()


def _transposed(weight: torch.Tensor) -> np.ndarray:
    """A Linear's weight [out, in] as a C-contiguous float64 array [in, out]."""
    return np.ascontiguousarray(_numpy(weight).T)


def _trunk_latents(policy: MultiHeadPolicy, core: TradingCore, batch_size: int) -> np.ndarray:
    """Trunk outputs [N, d_model] (float64) for the windows ending at bars first_bar..end_bar.

    The same computation as `MarketAccountExtractor.forward`'s market half: the trunk, under
    bfloat16 autocast when the extractor would use it, cast to float32.
    """
    extractor = policy.features_extractor
    bars = np.arange(core.first_bar, core.end_bar + 1)
    parts = []
    with torch.no_grad():
        for start in range(0, len(bars), batch_size):
            market = torch.as_tensor(
                core.market_windows(bars[start : start + batch_size]), device=policy.device
            )  # [B, W, F]
            bf16 = extractor.use_bf16 and market.is_cuda
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
                latent = extractor.trunk(market)  # [B, d_model]
            parts.append(latent.float().cpu().numpy())
    return np.concatenate(parts).astype(np.float64)


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
