"""Export a trained agent's deterministic policy to ONNX, checked against torch on held-out data.

    python -m training.export --model RUN_DIR_or_MODEL_FILE --out FILE.onnx

The graph (`OnnxablePolicy`, as in SB3's "Exporting models") takes ``market`` [batch, window,
features] and ``account`` [batch, 8] (float32, the env's observation) and returns every head:
``direction``, ``leverage`` and ``risk`` logits [batch, levels] and ``value`` [batch]. The
deterministic action is the argmax of each head, as ``predict(deterministic=True)``; a flat
account is all zeros. The file's metadata_props hold what a deployer needs, each value JSON text
(`onnx_metadata`): the level labels of each head, window, feature names and their
normalisation window, account feature names, whether prices were split-adjusted, the format.

Parity (`check_parity`, run by the CLI before anything is written, and by the tests):
onnxruntime against the torch policy on observations of the run's held-out test split (the
deterministic agent's rollout plus a seeded random-action rollout, so that positions vary). The
argmax of each head must equal ``predict``'s action on every sample, and every logit and value
must satisfy ``|onnx - torch| <= TOLERANCE * max(1, |torch|)``, TOLERANCE = 1e-4 (measured:
~1e-8 for logits and ~1e-7 for values of the smoke model). A failure, a missing run folder, an
unwritable output or one that exists already (an earlier export is never replaced) is one line
on stderr and exit status 2; the file is written atomically.

Exporter: torch's TorchScript-based one (``dynamo=False``). It needs no package beyond `onnx`
and handles ``F.scaled_dot_product_attention`` and pruned layers (also with no head left). The
dynamo exporter gives the same parity but needs `onnxscript` and `onnx-ir` too.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import onnx
import onnxruntime as ort
import torch
from gymnasium import spaces
from torch import nn

from agent import MultiHeadPolicy
from envs import EnvConfig, MarketData, TradingEnv
from envs.config import HEAD_NAMES
from envs.execution import ACCOUNT_FEATURES
from envs.market_data import time_labels
from training.cli import reports_user_errors, unused_in
from training.config import RunConfig
from training.run.atomic import json_safe, write_atomic
from training.run.data import RunData

FORMAT = "multihead-trading-policy"  # metadata `format`: what the file holds
FORMAT_VERSION = 1  # bump when inputs, outputs or metadata change meaning
OPSET = 17  # LayerNormalization is a single op from 17 on
INPUTS = ("market", "account")
OUTPUTS = (*HEAD_NAMES, "value")
TOLERANCE = 1e-4  # |onnx - torch| <= TOLERANCE * max(1, |torch|) for every logit and value


class ExportError(ValueError):
    """A user mistake or a failed parity check; str(err) is one line."""


class OnnxablePolicy(nn.Module):
    """The policy's forward without sampling: (market, account) -> each head's logits, value.

    Reads the policy's modules (no copy): features -> SB3's mlp_extractor -> `DecisionHeads`
    on the policy latent and `value_net` on the value latent, as `ActorCriticPolicy.forward`.
    """

    def __init__(self, policy: MultiHeadPolicy) -> None:
        super().__init__()
        self.policy = policy

    def forward(
        self, market: torch.Tensor, account: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """market [B, W, F], account [B, A] -> logits [B, n_k] of the three heads, value [B]."""
        features = self.policy.extract_features({"market": market, "account": account})
        latent_pi, latent_vf = self.policy.mlp_extractor(features)  # [B, P], [B, V]
        heads = self.policy.decision_heads
        value = self.policy.value_net(latent_vf).squeeze(-1)  # [B]
        return heads.direction(latent_pi), heads.leverage(latent_pi), heads.risk(latent_pi), value


def onnx_metadata(env: EnvConfig, adjust: bool) -> dict[str, str]:
    """The metadata_props of an exported policy; every value is JSON text."""
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "direction_levels": list(env.direction_names),
        "leverage_levels": list(env.leverage_levels),
        "risk_levels": list(env.risk_levels),  # null: no stop (risk level inf)
        "window": env.window,
        "feature_names": list(env.feature_names),
        "volume_window": env.volume_window,  # `compute_features(market, norm_window=...)`
        "bars_per_year": env.bars_per_year,  # `compute_features`'s; null: the data's own
        "momentum_horizons": list(env.momentum_horizons),  # `compute_features`'s
        # a leverage level buys level x `envs.features.volatility_scale(...)`; null: the level
        "volatility_target": env.volatility_target,
        "volatility_target_window": env.volatility_target_window,  # `volatility_scale`'s window
        "account_features": list(ACCOUNT_FEATURES),
        "adjust": adjust,  # `load_market_data(..., adjust=...)`, as the run loaded its bars
    }
    return {key: json.dumps(json_safe(value)) for key, value in meta.items()}


def export_policy(policy: MultiHeadPolicy, env: EnvConfig, *, adjust: bool) -> bytes:
    """The serialised ONNX model of `policy`'s heads and value, with a dynamic batch axis.

    Args:
        policy: a trained policy (pruned or not) whose spaces fit `env`; it is not modified.
        env: the run's env config: levels, window and feature normalisation of the metadata.
        adjust: whether the run split-adjusted its prices (`RunConfig.data.adjust`).
    """
    market_shape = (env.window, len(env.feature_names))
    expected = (market_shape, (len(ACCOUNT_FEATURES),), env.action_sizes)
    space = cast(spaces.Dict, policy.observation_space)
    levels = cast(spaces.MultiDiscrete, policy.action_space).nvec
    found: tuple[Any, ...] = (space["market"].shape, space["account"].shape, tuple(levels))
    if tuple(map(tuple, found)) != expected:
        raise ExportError(f"the policy's (market, account, levels) {found} do not fit {expected}")
    if policy.device.type != "cpu":
        raise ExportError(f"export a policy on the CPU, not on {policy.device}")
    example = (torch.zeros(2, *market_shape), torch.zeros(2, len(ACCOUNT_FEATURES)))
    buffer, was_training = io.BytesIO(), policy.training
    with warnings.catch_warnings():
        # The TorchScript exporter is deprecated (module doc). The tracer warns at shape tests
        # in the trunk (`q.size(-1) != v.size(-1)`): they depend on the model, not the batch.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        torch.onnx.export(
            OnnxablePolicy(policy),
            example,
            buffer,  # type: ignore[arg-type]  # a file object works; typed as a path only
            dynamo=False,
            opset_version=OPSET,
            input_names=list(INPUTS),
            output_names=list(OUTPUTS),
            dynamic_axes={name: {0: "batch"} for name in INPUTS + OUTPUTS},
        )  # in eval mode; afterwards it sets the wrapper's mode, recursively: restored below
    policy.set_training_mode(was_training)
    model = onnx.load_from_string(buffer.getvalue())
    onnx.helper.set_model_props(model, onnx_metadata(env, adjust))
    onnx.checker.check_model(model)
    return model.SerializeToString()


@dataclass(frozen=True)
class Parity:
    """onnxruntime against torch on `samples` observations."""

    samples: int
    max_abs_diff: dict[str, float]  # output -> max |onnx - torch|
    max_scaled_diff: dict[str, float]  # output -> max |onnx - torch| / max(1, |torch|)
    argmax_mismatches: dict[str, int]  # head -> samples whose ONNX argmax is not predict's

    @property
    def ok(self) -> bool:
        """Every argmax equal and every output within `TOLERANCE` (module doc)."""
        close = all(diff <= TOLERANCE for diff in self.max_scaled_diff.values())
        return close and not any(self.argmax_mismatches.values())

    def format(self) -> str:
        """One line: the max differences per output and the argmax mismatches per head."""
        diffs = ", ".join(f"{name} {diff:.1e}" for name, diff in self.max_abs_diff.items())
        mismatches = ", ".join(f"{k} on {n}" for k, n in self.argmax_mismatches.items() if n)
        argmax = f"argmax differs ({mismatches})" if mismatches else "argmax identical"
        return (
            f"max |onnx - torch| {diffs} (tolerance {TOLERANCE:g} * max(1, |torch|)); "
            f"{argmax} on {self.samples} observations"
        )


def check_parity(
    model: bytes, policy: MultiHeadPolicy, market: np.ndarray, account: np.ndarray
) -> Parity:
    """Run `model` in onnxruntime and `policy` in torch on market [N, W, F], account [N, A]."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # a check, not a benchmark: leave the cores to others
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    ran = session.run(list(OUTPUTS), {"market": market, "account": account})
    got = dict(zip(OUTPUTS, ran, strict=True))  # name -> [N, n_k] logits or [N] values
    policy.set_training_mode(False)
    with torch.no_grad():
        outputs = OnnxablePolicy(policy)(torch.as_tensor(market), torch.as_tensor(account))
    want = {name: tensor.numpy() for name, tensor in zip(OUTPUTS, outputs, strict=True)}
    actions, _ = policy.predict({"market": market, "account": account}, deterministic=True)
    diff = {name: np.abs(got[name].astype(np.float64) - want[name]) for name in OUTPUTS}
    return Parity(
        samples=len(market),
        max_abs_diff={name: float(d.max()) for name, d in diff.items()},
        max_scaled_diff={
            name: float((d / np.maximum(1.0, np.abs(want[name]))).max()) for name, d in diff.items()
        },
        argmax_mismatches={
            name: int((got[name].argmax(axis=1) != actions[:, k]).sum())
            for k, name in enumerate(HEAD_NAMES)
        },
    )


def heldout_observations(
    policy: MultiHeadPolicy, market: MarketData, env: EnvConfig, bars: range, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Observations of two rollouts over `bars`: market [N, W, F], account [N, A] float32.

    One rollout follows the deterministic policy, the other seeded random actions (so the
    account features take many values); each runs the whole range or until it is terminated.
    """
    rng = np.random.default_rng(seed)
    markets, accounts = [], []
    for follow_policy in (True, False):
        rollout = TradingEnv(market, env, bars=bars, random_start=False, episode_length=None)
        obs, _ = rollout.reset(seed=seed)
        done = False
        while not done:
            markets.append(obs["market"])
            accounts.append(obs["account"])
            if follow_policy:
                action = policy.predict(obs, deterministic=True)[0]
            else:
                levels = cast(spaces.MultiDiscrete, rollout.action_space).nvec
                action = cast(np.ndarray, rng.integers(levels))  # one level per head
            obs, _, terminated, truncated, _ = rollout.step(action)
            done = terminated or truncated
    return np.stack(markets), np.stack(accounts)


def load_run(path: Path) -> tuple[MultiHeadPolicy, RunConfig]:
    """(policy, RunConfig) of a run folder or model file: the only use of the model loader."""
    from training.run.folder import ModelError, load_model

    try:
        loaded = load_model(path)
    except ModelError as error:
        raise ExportError(str(error)) from None
    return loaded.policy, loaded.config


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        prog="python -m training.export", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--model", type=Path, required=True, help="run folder or model file")
    parser.add_argument("--out", type=Path, required=True, help="the .onnx file to write")
    return parser.parse_args(argv)


@reports_user_errors(ExportError)
def main(argv: Sequence[str] | None = None) -> int:
    """Export, check parity on the run's test split, write the file. User mistakes exit 2."""
    args = parse_args(argv)
    unused_in(args.out.parent, [args.out.name])  # never over an earlier export
    policy, cfg = load_run(args.model)
    model = export_policy(policy, cfg.env, adjust=cfg.data.adjust)
    data = RunData.load(cfg)  # parity on the run's held-out bars, of its first such instrument
    window = cfg.env.window
    name, (market, bars) = next(
        (phase, found[0])
        for phase in ("test", "validation", "train")
        if (found := data.ranges(phase, 1, window))
    )
    parity = check_parity(model, policy, *heldout_observations(policy, market, cfg.env, bars))
    first, last = time_labels(market.timestamps[[bars.start, bars.stop - 1]], market.daily)
    where = f"parity on the {name} split of {Path(market.source).name} ({first} .. {last})"
    if not parity.ok:
        raise ExportError(f"{where} failed, nothing written: {parity.format()}")
    try:
        write_atomic(args.out, lambda file: file.write(model))
    except OSError as error:
        raise ExportError(f"{args.out}: cannot write it ({error.strerror or error})") from None
    print(f"{where}: {parity.format()}")
    print(f"wrote {args.out} ({len(model) / 1024:,.0f} KiB, opset {OPSET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
