"""PPO training throughput of our `MultiHeadPolicy` against SB3's MLP policy, and trunk GFLOP/s.

Measured in one run, on one config (default: `configs/default.yaml`, the bundled GOOGL file,
the `BatchedTradingEnv` over the train split, wrapped in `VecMonitor` as `training.train` does):

1. PPO env-steps/s of `MultiHeadPolicy` (built by `training.train.build_model`) and of SB3's
   `MultiInputPolicy`, with the same PPO hyper-parameters (`cfg.ppo`), env, seed and device.
   SB3's `MlpPolicy` does not accept Dict observation spaces; `MultiInputPolicy` is the same MLP
   actor-critic (pi and vf [64, 64], tanh) behind SB3's `CombinedExtractor`, which flattens and
   concatenates the "market" and "account" entries. Each model first runs `--warmup` rollouts
   (allocations, first-call costs), then `--rollouts` timed rollouts, each followed by its PPO
   update (`n_epochs` passes of minibatches). A callback splits the time into rollout
   collection (env + policy inference) and the update. TensorBoard is off for both.

2. The trunk's forward + backward throughput (`AttentionTrunk` alone, loss = output sum) at
   the PPO minibatch size, in GFLOP/s, as a share of this machine's dense matmul GFLOP/s (the
   best of square `torch.mm` at `--matmul-sizes`, same dtype and thread count, same run).

   FLOPs are counted analytically (matmuls only: 2 FLOPs per multiply-add; LayerNorm, GELU,
   softmax, residual adds and biases are not counted). With B samples, T = window tokens,
   F features, d = d_model, r = mlp_ratio and L layers, the forward pass costs

       B * T * (2*F*d + L * ((6 + 2 + 4*r) * d**2 + 4*T*d))

   (input projection 2Fd; per layer qkv 6d^2, output projection 2d^2, MLP 4rd^2; attention
   scores QK^T 2Td and the weighted sum AV 2Td per token), and forward + backward = 3 x forward.
   `torch.utils.flop_counter.FlopCounterMode` is used as a cross-check: on CPU it does not count
   SDPA (`aten._scaled_dot_product_flash_attention_for_cpu` has no FLOP formula), so it should
   match the analytic count without the 4*T*d attention term, less the input projection's
   gradient with respect to the input (never computed: the observation needs no gradient).

The header names the machine (CPU model, cores, torch threads, GPU), the date and the command,
and the load average before and after: the timings are only meaningful on an idle machine.

Usage:
    python benchmarks/train_throughput.py [--config configs/default.yaml] [--rollouts 3]
    python benchmarks/train_throughput.py --config configs/gpu.yaml --device cuda
    python benchmarks/train_throughput.py --set trunk.n_layers=1 --threads 1
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
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import stable_baselines3
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import VecMonitor
from torch.utils.flop_counter import FlopCounterMode

from agent.config import TrunkConfig
from agent.trunk import AttentionTrunk
from envs import BatchedTradingEnv, load_market_data
from envs.features import FEATURE_NAMES
from envs.splits import chronological_split
from training.config import DEFAULT_CONFIG_PATH, RunConfig, load_config
from training.run_dir import RunDir
from training.train import build_model

PPO_RATIO_TARGET = {"cpu": 0.25, "cuda": 0.8}  # ours / SB3 env-steps/s
TRUNK_SHARE_TARGET = 0.40  # trunk GFLOP/s / matmul GFLOP/s, on CPU


# --- machine and timing -----------------------------------------------------------------------


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (or what `platform` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_lines(device: torch.device) -> list[str]:
    """Header lines: machine, software, date, command and load."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    lines = [
        f"date (UTC): {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M:%S}",
        f"command: {shlex.join([sys.executable.rsplit('/', 1)[-1], *sys.argv])}",
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


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so that a wall-clock reading covers it (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds_per_call(fn: Callable[[], None], device: torch.device, calls: int, repeats: int) -> float:
    """Median over `repeats` of the mean wall time of `calls` calls of `fn` (after a warm-up)."""
    for _ in range(max(2, calls // 5)):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        synchronize(device)
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


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
    """One policy's PPO throughput."""

    name: str
    parameters: int
    steps: int
    seconds: float
    rollout_seconds: float

    @property
    def steps_per_second(self) -> float:
        """Env steps per second over rollouts and updates together."""
        return self.steps / self.seconds


def make_train_env(cfg: RunConfig) -> VecMonitor:
    """The training env of `training.train`: batched accounts over the train split."""
    market = load_market_data(cfg.data.resolved_path(), ticker=cfg.data.ticker,
                              adjust=cfg.data.adjust, min_rows=cfg.env.window + 1)
    splits = chronological_split(market, validation=cfg.data.validation, test=cfg.data.test,
                                 validation_start=cfg.data.validation_start,
                                 test_start=cfg.data.test_start)
    env = BatchedTradingEnv(market, cfg.env, n_envs=cfg.ppo.n_envs, bars=splits.train)
    env.seed(cfg.train.seed)
    return VecMonitor(env)


def ours(cfg: RunConfig, env: VecMonitor) -> PPO:
    """PPO with `MultiHeadPolicy`, exactly as `training.train` builds it (TensorBoard off)."""
    with tempfile.TemporaryDirectory() as folder:
        model = build_model(cfg, env, RunDir(Path(folder)))
    model.tensorboard_log = None  # no event files: the SB3 baseline writes none either
    return model


def sb3_mlp(cfg: RunConfig, env: VecMonitor) -> PPO:
    """PPO with SB3's `MultiInputPolicy` (its MLP policy for Dict spaces), same settings."""
    ppo = dataclasses.asdict(cfg.ppo)
    ppo.pop("n_envs")
    return PPO("MultiInputPolicy", env, seed=cfg.train.seed, device=cfg.policy.device,
               verbose=0, **ppo)


def time_ppo(name: str, model: PPO, rollouts: int, warmup: int) -> PPOTiming:
    """Run `warmup` rollouts + updates untimed, then time `rollouts` rollouts + updates."""
    rollout_size = model.n_steps * model.n_envs
    device = model.device
    model.learn(warmup * rollout_size)
    timer = PhaseTimer(device)
    synchronize(device)
    start = time.perf_counter()
    model.learn(rollouts * rollout_size, callback=timer, reset_num_timesteps=False)
    synchronize(device)
    seconds = time.perf_counter() - start
    parameters = sum(p.numel() for p in model.policy.parameters())
    return PPOTiming(name, parameters, rollouts * rollout_size, seconds, timer.rollout_seconds)


# --- trunk FLOP/s -----------------------------------------------------------------------------


def trunk_forward_flops(config: TrunkConfig, batch: int, attention: bool = True) -> int:
    """Analytic matmul FLOPs of one trunk forward pass (formula in the module docstring)."""
    t, f, d = config.window, config.n_features, config.d_model
    hidden = int(config.mlp_ratio * d)
    per_layer = 6 * d * d + 2 * d * d + 4 * d * hidden + (4 * t * d if attention else 0)
    return batch * t * (2 * f * d + config.n_layers * per_layer)


def trunk_step(trunk: AttentionTrunk, market: torch.Tensor, bf16: bool) -> Callable[[], None]:
    """One forward + backward of the trunk on `market` (bfloat16 autocast when asked, on CUDA)."""

    def step() -> None:
        trunk.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            out = trunk(market)
        out.float().sum().backward()

    return step


def counted_flops(step: Callable[[], None]) -> int:
    """FLOPs of `step` as `FlopCounterMode` counts them."""
    with FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops()


def matmul_gflops(size: int, dtype: torch.dtype, device: torch.device) -> float:
    """GFLOP/s of a square `torch.mm` of `size` on `device`."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    calls = max(3, int(2e10 / (2 * size**3)))  # ~20 GFLOP per repeat on CPU
    if device.type == "cuda":
        calls *= 50
    seconds = seconds_per_call(lambda: torch.mm(a, b), device, calls, repeats=5)
    return 2 * size**3 / seconds / 1e9


# --- report -----------------------------------------------------------------------------------


def verdict(value: float, target: float) -> str:
    """'met' or 'NOT met' for value >= target."""
    return "met" if value >= target else "NOT met"


def report_ppo(results: list[PPOTiming], device: torch.device) -> None:
    """Print the PPO table and the ours/SB3 ratio against its target."""
    print(f"\n{'policy':42s} {'params':>9s} {'env-steps/s':>12s} {'rollout s':>10s} "
          f"{'update s':>9s}")
    for r in results:
        print(f"{r.name:42s} {r.parameters:9,d} {r.steps_per_second:12,.0f} "
              f"{r.rollout_seconds:10.2f} {r.seconds - r.rollout_seconds:9.2f}")
    ratio = results[0].steps_per_second / results[1].steps_per_second
    target = PPO_RATIO_TARGET.get(device.type, PPO_RATIO_TARGET["cpu"])
    print(f"ratio ours / SB3 = {ratio:.3f}  (target >= {target} on {device.type}: "
          f"{verdict(ratio, target)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH, help="run config YAML")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="config override, e.g. trunk.n_layers=1")
    parser.add_argument("--device", help="torch device (overrides policy.device)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument("--rollouts", type=int, default=3, help="timed rollouts per policy")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rollouts per policy first")
    parser.add_argument("--calls", type=int, default=20, help="trunk steps per timing repeat")
    parser.add_argument("--repeats", type=int, default=5, help="timing repeats (median taken)")
    parser.add_argument("--matmul-sizes", type=int, nargs="+",
                        help="square matmul sizes (default 1024 2048 on CPU, 4096 8192 on CUDA)")
    parser.add_argument("--skip-ppo", action="store_true", help="measure the trunk only")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message=".*primarily intended to run on the CPU.*")

    overrides = list(args.overrides) + ([f"policy.device={args.device}"] if args.device else [])
    cfg = load_config(args.config, overrides)
    cfg.trunk = dataclasses.replace(cfg.trunk, n_features=len(FEATURE_NAMES))
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if cfg.policy.device == "auto" and torch.cuda.is_available()
                          else "cpu" if cfg.policy.device == "auto" else cfg.policy.device)
    bf16 = cfg.policy.bf16 and device.type == "cuda"
    print(f"# Training throughput ({args.config})")
    print("\n".join(machine_lines(device)))
    print(f"load average before: {load_average()}")
    t = cfg.trunk
    print(f"config: window {t.window}, d_model {t.d_model}, n_heads {t.n_heads}, "
          f"n_layers {t.n_layers}, mlp_ratio {t.mlp_ratio}; n_envs {cfg.ppo.n_envs}, "
          f"n_steps {cfg.ppo.n_steps}, batch_size {cfg.ppo.batch_size}, "
          f"n_epochs {cfg.ppo.n_epochs}; bf16 {bf16}")

    if not args.skip_ppo:
        print(f"\n## PPO env-steps/s: {args.warmup} warm-up + {args.rollouts} timed rollouts of "
              f"{cfg.ppo.n_envs * cfg.ppo.n_steps:,} steps, each with its update")
        print("SB3 baseline: MultiInputPolicy (MlpPolicy rejects Dict observation spaces; "
              "MultiInputPolicy is SB3's MLP actor-critic behind a flattening CombinedExtractor)")
        results = []
        for name, build in (("ours: MultiHeadPolicy (attention trunk)", ours),
                            ("SB3: MultiInputPolicy (MLP 64x64)", sb3_mlp)):
            set_random_seed(cfg.train.seed)
            env = make_train_env(cfg)
            results.append(time_ppo(name, build(cfg, env), args.rollouts, args.warmup))
            env.close()
        report_ppo(results, device)

    batch = cfg.ppo.batch_size
    print(f"\n## Trunk forward + backward at the PPO minibatch ({batch} x {t.window} tokens)")
    torch.manual_seed(cfg.train.seed)
    trunk = AttentionTrunk(cfg.trunk).to(device)
    market = torch.randn(batch, t.window, t.n_features, device=device)
    step = trunk_step(trunk, market, bf16)
    analytic = 3 * trunk_forward_flops(t, batch)
    without_attention = 3 * trunk_forward_flops(t, batch, attention=False)
    counted = counted_flops(step)
    seconds = seconds_per_call(step, device, args.calls, args.repeats)
    trunk_gflops = analytic / seconds / 1e9
    dtype = torch.bfloat16 if bf16 else torch.float32
    sizes = args.matmul_sizes or ([4096, 8192] if device.type == "cuda" else [1024, 2048])
    peaks = {size: matmul_gflops(size, dtype, device) for size in sizes}
    peak = max(peaks.values())
    share = trunk_gflops / peak
    print(f"analytic FLOPs: {analytic / 1e9:.3f} GFLOP per step "
          f"({without_attention / 1e9:.3f} without the attention core)")
    print(f"FlopCounterMode: {counted / 1e9:.3f} GFLOP per step "
          f"(cross-check; it skips SDPA where SDPA has no FLOP formula, e.g. on CPU)")
    print(f"time: {seconds * 1e3:.2f} ms per step -> {trunk_gflops:.1f} GFLOP/s")
    print("matmul " + ", ".join(f"{s}x{s}: {g:.1f}" for s, g in peaks.items())
          + f" GFLOP/s ({dtype}); best {peak:.1f}")
    target = f"target >= {TRUNK_SHARE_TARGET:.0%} on CPU: {verdict(share, TRUNK_SHARE_TARGET)}"
    print(f"trunk share of matmul throughput = {share:.1%}  "
          f"({target if device.type == 'cpu' else 'no target set for GPUs'})")
    print(f"\nload average after: {load_average()}")


if __name__ == "__main__":
    main()
