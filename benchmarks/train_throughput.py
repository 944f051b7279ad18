"""PPO training throughput of our `MultiHeadPolicy` against SB3's MLP policy, and trunk GFLOP/s.

Measured in one run, on one config (default: `configs/default.yaml`, the bundled instruments,
the `BatchedTradingEnv` over the train split, wrapped in `VecMonitor` as `training.train` does):

1. PPO env-steps/s of `MultiHeadPolicy` (built by `training.train.build_model`) and of SB3's
   `MultiInputPolicy`, with the same PPO hyper-parameters (`cfg.ppo`), env, seed and device.
   SB3's `MlpPolicy` does not accept Dict observation spaces; `MultiInputPolicy` is the same MLP
   actor-critic (pi and vf [64, 64], tanh) behind SB3's `CombinedExtractor`, which flattens and
   concatenates the "market" and "account" entries. Each model first runs `--warmup` rollouts
   (allocations, first-call costs), then `--rollouts` timed rollouts, each followed by its PPO
   update (`n_epochs` passes of minibatches). The timed rollouts alternate between the two
   models, so that a change in the machine's load hits both alike. A callback splits the time
   into rollout collection (env + policy inference) and the update. TensorBoard is off for both.

2. The trunk's forward + backward throughput (`AttentionTrunk` alone, loss = output sum) at
   the PPO minibatch size, in GFLOP/s, as a share of this machine's dense matmul GFLOP/s (the
   best square `torch.mm` of `--matmul-sizes`, same dtype and thread count, same run; trunk and
   matmuls alternate, `--repeats` times, and the medians are reported).

   FLOPs are counted by `torch.utils.flop_counter.FlopCounterMode`: matmuls only, 2 FLOPs per
   multiply-add; LayerNorm, GELU, softmax, residual adds and biases are not counted. It has no
   formula for SDPA's CPU kernel (`aten._scaled_dot_product_flash_attention_for_cpu` and its
   backward), so this script hands it torch's own SDPA formulas for those two ops. The count
   is cross-checked against an analytic one: with B samples, T = window tokens, F features,
   d = d_model, r = mlp_ratio and L standard attention layers, the forward costs

       B * (T * 2*F*d                                        input projection
            + (L - 1) * T * ((6 + 2 + 4*r) * d**2 + 4*T*d)   the first L - 1 blocks
            + T * 6*d**2 + (2 + 4*r) * d**2 + 4*T*d)         the last block ("last" pooling)

   Per token and block: qkv projection 6d^2, output projection 2d^2, MLP 4rd^2, attention
   scores QK^T 2Td and weighted sum AV 2Td. With "last" pooling the trunk computes only the
   last token's output in the last block: its qkv projection still covers the window (keys
   and values), the rest is one token; with "mean" pooling every block is full. The backward
   costs 2 x forward, plus one more QK^T per attention layer (2Td per output token: SDPA's
   flash-attention backward recomputes the scores rather than storing them, and torch's SDPA
   formula counts that), less the input projection's gradient with respect to its input
   (never computed: the observation needs no gradient). So a step is 3 x forward + the
   recomputed scores - B*T*2*F*d.

The header names the machine (CPU model, cores, torch threads, GPU), the date and the command,
and the load average before and after: the timings only mean something on an idle machine.

Usage:
    python benchmarks/train_throughput.py [--config configs/default.yaml] [--rollouts 3]
    python benchmarks/train_throughput.py --config configs/gpu.yaml --device cuda
    python benchmarks/train_throughput.py --set trunk.n_heads=2 --threads 1
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import shlex
import statistics
import sys
import time
import warnings
from collections.abc import Callable

import stable_baselines3
import torch
from machine import cpu_model
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import VecMonitor
from torch.utils.flop_counter import (
    FlopCounterMode,
    flop_registry,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)

from agent.trunk import AttentionTrunk
from envs import BatchedTradingEnv
from envs.core import TradingCore
from envs.features import FEATURE_NAMES
from training.cli import one_line_user_warnings
from training.config import ConfigError, RunConfig, add_config_arguments, load_config
from training.run.data import RunData, with_bars_per_year
from training.run.session import build_model, check_device, ppo_arguments, without_logs

PPO_RATIO_TARGET = {"cpu": 0.25, "cuda": 0.8}  # ours / SB3 env-steps/s
TRUNK_SHARE_TARGET = 0.40  # trunk GFLOP/s / matmul GFLOP/s, on CPU


# --- machine and timing -----------------------------------------------------------------------


def machine_lines(device: torch.device) -> list[str]:
    """Header lines: date, command, machine and software."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    lines = [
        f"date (UTC): {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M:%S}",
        f"command: {shlex.join(['python', *sys.argv])}",
        f"cpu: {cpu_model()}, {cores} cores usable, torch threads {torch.get_num_threads()}",
        f"software: python {platform.python_version()}, torch {torch.__version__}, "
        f"stable-baselines3 {stable_baselines3.__version__}",
        f"device: {device}",
    ]
    if device.type == "cuda":
        lines.append(f"gpu: {torch.cuda.get_device_name(device)}")
    return lines


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as text."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def resolve_device(name: str) -> torch.device:
    """The torch device of `policy.device` ('auto' is CUDA when there is one, as in SB3)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so that a wall-clock reading covers it (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds_per_call(fn: Callable[[], None], device: torch.device, calls: int) -> float:
    """Mean wall time of `calls` calls of `fn`, after a few untimed calls."""
    for _ in range(max(2, calls // 5)):
        fn()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    synchronize(device)
    return (time.perf_counter() - start) / calls


# --- PPO throughput ---------------------------------------------------------------------------


class PhaseTimer(BaseCallback):
    """Sums the wall time spent collecting rollouts; the rest of `learn()` is the PPO update."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device = device
        self.rollout_seconds = 0.0
        self._start = 0.0

    def _on_rollout_start(self) -> None:
        synchronize(self.device)
        self._start = time.perf_counter()

    def _on_rollout_end(self) -> None:
        synchronize(self.device)
        self.rollout_seconds += time.perf_counter() - self._start

    def _on_step(self) -> bool:
        return True


@dataclasses.dataclass
class PPOTiming:
    """One policy's PPO throughput: wall time of each timed rollout + update."""

    name: str
    parameters: int
    rollout_size: int  # env steps per rollout
    seconds: list[float]  # per timed rollout, its update included
    rollout_seconds: float  # collection only, summed over the timed rollouts

    @property
    def steps_per_second(self) -> float:
        """Env steps per second over all timed rollouts and updates together."""
        return self.rollout_size * len(self.seconds) / sum(self.seconds)

    @property
    def spread(self) -> str:
        """Slowest and fastest single rollout + update, in env-steps/s."""
        slowest, fastest = (self.rollout_size / f(self.seconds) for f in (max, min))
        return f"{slowest:,.0f}-{fastest:,.0f}"


def make_train_env(cfg: RunConfig) -> VecMonitor:
    """The training env of `training.train`: batched accounts over every instrument's train split
    (`training.run.session.fit`'s core, without its optional wrappers)."""
    data = RunData.load(cfg)
    cfg = with_bars_per_year(cfg, data)
    core = TradingCore.stacked(data.ranges("train", 1, cfg.env.window), cfg.env)
    env = BatchedTradingEnv(core, n_envs=cfg.ppo.n_envs)
    env.seed(cfg.train.seed)
    return VecMonitor(env)


def ours(cfg: RunConfig, env: VecMonitor) -> PPO:
    """PPO with `MultiHeadPolicy`, exactly as `training.train` builds it (TensorBoard off)."""
    return build_model(cfg, env, None)  # no event files: the SB3 baseline writes none either


def sb3_mlp(cfg: RunConfig, env: VecMonitor) -> PPO:
    """PPO with SB3's `MultiInputPolicy` (its MLP policy for Dict spaces), same settings."""
    device = cfg.policy.device
    return without_logs(
        PPO("MultiInputPolicy", env, seed=cfg.train.seed, device=device, **ppo_arguments(cfg))
    )


def time_ppo(models: dict[str, PPO], rollouts: int, warmup: int) -> list[PPOTiming]:
    """Run `warmup` rollouts + updates of each model untimed, then time `rollouts` of each.

    The timed rollouts alternate between the models (one rollout + update of each in turn).
    """
    for model in models.values():
        model.learn(warmup * model.n_steps * model.n_envs)
    timers = {name: PhaseTimer(model.device) for name, model in models.items()}
    seconds: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(rollouts):
        for name, model in models.items():
            rollout_size = model.n_steps * model.n_envs
            synchronize(model.device)
            start = time.perf_counter()
            model.learn(rollout_size, callback=timers[name], reset_num_timesteps=False)
            synchronize(model.device)
            seconds[name].append(time.perf_counter() - start)
    return [
        PPOTiming(
            name=name,
            parameters=sum(p.numel() for p in model.policy.parameters()),
            rollout_size=model.n_steps * model.n_envs,
            seconds=seconds[name],
            rollout_seconds=timers[name].rollout_seconds,
        )
        for name, model in models.items()
    ]


# --- trunk FLOP/s -----------------------------------------------------------------------------


def trunk_step_flops(trunk: AttentionTrunk, batch: int) -> int | None:
    """Analytic matmul FLOPs of one trunk forward + backward (module docstring), or None.

    None where the formula does not apply: collaborative attention, or a cls token.
    """
    config = trunk.config
    if config.attention != "standard" or config.pooling == "cls":
        return None
    t, f, d = trunk.window, trunk.n_features, config.d_model
    input_projection = batch * t * 2 * f * d
    forward, recomputed = input_projection, 0
    blocks = config.block_heads  # heads of each block
    for i, n_heads in enumerate(blocks):
        inner = n_heads * config.head_dim  # width of the block's heads side by side
        out_tokens = 1 if i == len(blocks) - 1 and config.pooling == "last" else t
        forward += batch * t * 2 * d * 3 * inner  # qkv projection over the whole window
        forward += batch * out_tokens * (4 * t * inner + 2 * inner * d + 4 * d * config.mlp_hidden)
        recomputed += batch * out_tokens * 2 * t * inner  # QK^T again in SDPA's backward
    return 3 * forward + recomputed - input_projection


def _cpu_sdpa_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_sdpa_backward_flops(
    grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs
) -> int:
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def counted_flops(step: Callable[[], None]) -> int:
    """FLOPs of `step` as `FlopCounterMode` counts them, SDPA's CPU kernel included."""
    aten = torch.ops.aten
    cpu_sdpa = {
        aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_flops,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_sdpa_backward_flops,
    }
    missing = {op: formula for op, formula in cpu_sdpa.items() if op not in flop_registry}
    with FlopCounterMode(display=False, custom_mapping=missing) as counter:
        step()
    return counter.get_total_flops()


def trunk_step(trunk: AttentionTrunk, market: torch.Tensor, bf16: bool) -> Callable[[], None]:
    """One forward + backward of the trunk on `market` (bfloat16 autocast when asked, on CUDA)."""

    def step() -> None:
        trunk.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            out = trunk(market)
        out.float().sum().backward()

    return step


def matmul(size: int, dtype: torch.dtype, device: torch.device) -> Callable[[], None]:
    """A square `torch.mm` of `size` on `device`, ready to call."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    return lambda: torch.mm(a, b)


def matmul_calls(size: int, device: torch.device) -> int:
    """Calls per timing: ~20 GFLOP on CPU, 50 times that on a GPU."""
    return max(3, int(2e10 / (2 * size**3))) * (50 if device.type == "cuda" else 1)


# --- report -----------------------------------------------------------------------------------


def verdict(value: float, target: float) -> str:
    """'met' or 'NOT met' for value >= target."""
    return "met" if value >= target else "NOT met"


def report_ppo(results: list[PPOTiming], device: torch.device) -> None:
    """Print the PPO table and the ours/SB3 ratio against its target."""
    print(
        f"\n{'policy':42s} {'params':>7s} {'env-steps/s':>11s} {'per rollout':>13s} "
        f"{'collect s':>9s} {'update s':>8s}  (seconds summed over the timed rollouts)"
    )
    for r in results:
        update = sum(r.seconds) - r.rollout_seconds
        print(
            f"{r.name:42s} {r.parameters:7,d} {r.steps_per_second:11,.0f} {r.spread:>13s} "
            f"{r.rollout_seconds:9.2f} {update:8.2f}"
        )
    ratio = results[0].steps_per_second / results[1].steps_per_second
    target = PPO_RATIO_TARGET.get(device.type, PPO_RATIO_TARGET["cpu"])
    print(f"ratio ours / SB3 = {ratio:.3f}  (target >= {target} on {device.type}: ", end="")
    print(f"{verdict(ratio, target)})")


def report_trunk(
    cfg: RunConfig, device: torch.device, bf16: bool, args: argparse.Namespace
) -> None:
    """Time the trunk and the matmuls in alternation; print GFLOP/s and the trunk's share."""
    window, batch = cfg.env.window, cfg.ppo.batch_size
    torch.manual_seed(cfg.train.seed)
    trunk = AttentionTrunk(cfg.trunk, window, len(FEATURE_NAMES)).to(device)
    step = trunk_step(trunk, torch.randn(batch, window, len(FEATURE_NAMES), device=device), bf16)
    flops, analytic = counted_flops(step), trunk_step_flops(trunk, batch)
    dtype = torch.bfloat16 if bf16 else torch.float32
    sizes = args.matmul_sizes or ([4096, 8192] if device.type == "cuda" else [1024, 2048])
    matmuls = {size: matmul(size, dtype, device) for size in sizes}
    trunk_gflops, peaks, shares = [], {size: [] for size in sizes}, []
    for _ in range(args.repeats):  # one repeat: the trunk, then each matmul size
        trunk_gflops.append(flops / seconds_per_call(step, device, args.calls) / 1e9)
        for size, mm in matmuls.items():
            seconds = seconds_per_call(mm, device, matmul_calls(size, device))
            peaks[size].append(2 * size**3 / seconds / 1e9)
        shares.append(trunk_gflops[-1] / max(p[-1] for p in peaks.values()))

    check = "n/a for this trunk variant" if analytic is None else f"{analytic / 1e9:.3f} GFLOP"
    gflops = statistics.median(trunk_gflops)
    print(f"FLOPs per step: {flops / 1e9:.3f} GFLOP (FlopCounterMode); analytic: {check}")
    print(
        f"trunk: {flops / gflops / 1e6:.2f} ms per step -> {gflops:.1f} GFLOP/s "
        f"(median; range {min(trunk_gflops):.1f}-{max(trunk_gflops):.1f})"
    )
    medians = ", ".join(f"{s}x{s}: {statistics.median(g):.1f}" for s, g in peaks.items())
    print(f"matmul {medians} GFLOP/s ({dtype}, medians)")
    share = statistics.median(shares)
    target = f"target >= {TRUNK_SHARE_TARGET:.0%} on CPU: {verdict(share, TRUNK_SHARE_TARGET)}"
    print(
        f"trunk share of the best matmul = {share:.1%} (median; range "
        f"{min(shares):.1%}-{max(shares):.1%})  "
        f"({target if device.type == 'cpu' else 'no target set for GPUs'})"
    )


def parse_args() -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_arguments(parser)
    parser.add_argument("--device", help="torch device (overrides policy.device)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument("--rollouts", type=int, default=3, help="timed rollouts per policy")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rollouts per policy first")
    parser.add_argument("--calls", type=int, default=20, help="trunk steps per timing")
    parser.add_argument("--repeats", type=int, default=5, help="trunk/matmul timings (median)")
    parser.add_argument(
        "--matmul-sizes",
        type=int,
        nargs="+",
        help="square matmul sizes (default 1024 2048 on CPU, 4096 8192 on CUDA)",
    )
    parser.add_argument("--skip-ppo", action="store_true", help="measure the trunk only")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    warnings.filterwarnings("ignore", message=".*primarily intended to run on the CPU.*")
    overrides = [*args.overrides, *([f"policy.device={args.device}"] if args.device else [])]
    cfg = load_config(args.config, overrides)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        check_device(cfg.policy.device)  # the check training makes: a GPU torch sees, or none
    except ConfigError as error:
        sys.exit(f"error: {error}")
    device = resolve_device(cfg.policy.device)
    bf16 = cfg.policy.bf16 and device.type == "cuda"
    t, p = cfg.trunk, cfg.ppo

    print(f"# Training throughput ({args.config})")
    print("\n".join(machine_lines(device)))
    print(f"load average before: {load_average()}")
    print(
        f"config: window {cfg.env.window}, d_model {t.d_model}, n_heads {t.n_heads}, n_layers "
        f"{t.n_layers}, mlp_ratio {t.mlp_ratio}, pooling {t.pooling}; n_envs {p.n_envs}, "
        f"n_steps {p.n_steps}, batch_size {p.batch_size}, n_epochs {p.n_epochs}; bf16 {bf16}"
    )

    if not args.skip_ppo:
        print(
            f"\n## PPO env-steps/s: {args.warmup} warm-up + {args.rollouts} timed rollouts of "
            f"{p.n_envs * p.n_steps:,} steps per policy, alternating, each with its update "
            f"({p.n_epochs} epochs of minibatches of {p.batch_size})"
        )
        print(
            "SB3 baseline: MultiInputPolicy (MlpPolicy rejects Dict observation spaces; "
            "MultiInputPolicy is SB3's MLP actor-critic behind a flattening CombinedExtractor)"
        )
        models = {}
        for name, build in (
            ("ours: MultiHeadPolicy (attention trunk)", ours),
            ("SB3: MultiInputPolicy (MLP 64x64)", sb3_mlp),
        ):
            set_random_seed(cfg.train.seed)
            with one_line_user_warnings():  # a note on the data as the CLI prints it
                models[name] = build(cfg, make_train_env(cfg))
        report_ppo(time_ppo(models, args.rollouts, args.warmup), device)

    print(
        f"\n## Trunk forward + backward at the PPO minibatch ({p.batch_size} x {cfg.env.window} "
        f"tokens), alternating with square matmuls, {args.repeats} repeats"
    )
    report_trunk(cfg, device, bf16, args)
    print(f"\nload average after: {load_average()}")


if __name__ == "__main__":
    main()
