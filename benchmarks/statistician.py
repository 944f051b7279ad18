"""What a statistician who knows each generator's family reaches against issue #10's targets.

The learning benchmark (`benchmarks/learning.py`) scores every trained agent beside the
estimated ceiling of its series: the fair ceiling's rule with the generator's parameters fitted
to the same 3,000 training bars (`envs.synthetic.estimation`), a statistician who knows the model
family and learns only its parameters from the bars the agent had. This script scores that
statistician alone, with no agent trained, over as many seeds as asked, on each kind's target
figure and threshold (`learning_report.TARGETS`, the figures `learning.py` records as
``share_estimated_fresh``, ``share_estimated_expected_fresh`` and ``excess_growth_estimated``).

The worst-seed targets ask every seed to reach a threshold. The training bars of some seeds
mislead even a rule that knows the family (a trend range with few down spells, a random walk
that fell), so a share of seeds misses for any learner of those bars, and the chance that n
seeds drawn at random all meet the target is ``(1 - missed) ** n``. That share is the yardstick
for a learner's own miss rate: per kind this prints the statistician's median and worst, the
seeds below the worst-seed target, their share, and that chance for `--draw` seeds (5, the
issue's minimum, by default), and that chance for every kind at once (the product over kinds:
the issue's aggregate, as `learning_report` computes it for an agent).

A trained agent ships holding wherever its contest makes holding the prior (no test of the
training bars finds structure: `training.run.challenger.hold_role`), so the statistician is
also read behind the same prior: on each seed where `--config`'s contest (the default's by
default) would make holding the prior, the figure of sized hold (buy-and-hold's action under the
env's volatility budget, what the contest's holding trades) replaces the statistician's. That
reading is the yardstick for an agent under that contest: what knowing the family would add
behind the same prior. A few seconds a seed on one core; `--jobs` runs seeds at once.

Usage:
    python benchmarks/statistician.py [--kinds trend_regimes random_walk ...]
        [--seeds 3000-3199 | --seeds 0 1 2] [--fresh-series 8] [--draw 5] [--jobs 2]
        [--config configs/default.yaml] [--out FILE]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from learning_report import TARGETS, seed_list
from learning_scoring import (
    ESTIMATED_KINDS,
    FRESH_SERIES,
    estimated_fresh_shares,
    estimated_run,
    reference_env,
    rule_fresh_shares,
    sized_hold_run,
    synthetic_series,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

KINDS = tuple(kind for kind in TARGETS if kind in ESTIMATED_KINDS)  # a target and a statistician
# By default all but the volatility regimes, whose fair ceiling has no edge under the default's
# 1x cap (benchmarks/RESULTS.md, ninth round): the turbulence regimes measure sizing there.
DEFAULT_KINDS = tuple(kind for kind in KINDS if kind != "volatility_regimes")


@dataclass(frozen=True)
class SeedFigures:
    """One seed's figures on its kind's target measure (`TARGETS[kind].estimated`)."""

    statistician: float  # the estimated ceiling's
    holding: float  # sized hold's: buy-and-hold's action under the env's volatility budget
    hold_is_prior: bool  # no test of the training bars finds structure at the contest's levels

    @property
    def behind_prior(self) -> float:
        """The statistician's figure behind the contest's hold prior: holding's where holding is
        the prior (kept there whatever validated, as the default's infinite
        `train.policy_margin` keeps it), the statistician's elsewhere."""
        return self.holding if self.hold_is_prior else self.statistician


def seed_figures(kind: str, seed: int, n_fresh: int, cfg: Any) -> SeedFigures:
    """The estimated ceiling of series `seed` of `kind` and sized hold on `kind`'s target
    figure: their pooled shares of the fair ceiling's edge on `n_fresh` fresh series, or, on the
    random walk, their log growth on the series' own tail less buy-and-hold's; and whether the
    contest of `cfg` (a `RunConfig`) makes holding the prior on its training bars
    (`training.run.challenger.hold_role`, on the evidence a run of `cfg` reads there). Each
    trades under `cfg`'s env with the bars per year fixed from the series' training bars, as a
    run trained on them fixes it, so that the figures are the ones the learning benchmark
    records beside an agent trained there."""
    from envs.synthetic import buy_and_hold_growth
    from training.run.challenger import NOT_MEASURED, contest_evidence, hold_role
    from training.run.data import RunData, with_bars_per_year

    series, split = synthetic_series(kind, seed)
    data = RunData((series.market,), split)
    run_cfg = with_bars_per_year(cfg, data)
    env_config = reference_env(run_cfg)
    measured = contest_evidence(run_cfg, data.ranges("train", 1, run_cfg.env.window))
    hold_is_prior = hold_role(run_cfg.train, measured or NOT_MEASURED) == "prior"
    key = TARGETS[kind].estimated
    if key.endswith("_fresh"):
        holding_key = key.replace("_estimated", "_sized_hold")

        def held(fresh: Any, tail: range) -> Any:
            return sized_hold_run(fresh, tail, env_config)

        return SeedFigures(
            estimated_fresh_shares(kind, seed, env_config, n_fresh)[key],
            rule_fresh_shares(kind, "sized_hold", held, env_config, n_fresh)[holding_key],
            hold_is_prior,
        )
    tail = split.splits[0].test
    bought = buy_and_hold_growth(series, env_config, tail)
    return SeedFigures(
        estimated_run(kind, seed, series, tail, env_config).log_growth - bought,
        sized_hold_run(series, tail, env_config).log_growth - bought,
        hold_is_prior,
    )


@dataclass(frozen=True)
class Summary:
    """One kind's figures over seeds against its worst-seed target."""

    seeds: int  # seeds with the figure (a seed whose fair ceiling has no edge has none)
    median: float
    worst: float
    missed: list[int]  # the seeds below the worst-seed target
    draw: int  # seeds in the draw `all_met` is for

    @property
    def missed_share(self) -> float:
        """The share of seeds below the worst-seed target (NaN without a seed)."""
        return len(self.missed) / self.seeds if self.seeds else math.nan

    @property
    def all_met(self) -> float:
        """The chance that `draw` seeds drawn at random all meet the worst-seed target."""
        return (1.0 - self.missed_share) ** self.draw


def summarize(kind: str, figures: dict[int, float], draw: int) -> Summary:
    """`figures` (seed -> the target figure; NaN where it is undefined) against `kind`'s
    target; NaN figures where no seed has one (the volatility regimes under a 1x cap, whose
    fair ceiling has no edge over buy-and-hold)."""
    scored = {seed: value for seed, value in figures.items() if not math.isnan(value)}
    worst = TARGETS[kind].worst
    return Summary(
        seeds=len(scored),
        median=statistics.median(scored.values()) if scored else math.nan,
        worst=min(scored.values(), default=math.nan),
        missed=sorted(seed for seed, value in scored.items() if value < worst),
        draw=draw,
    )


def parse_seeds(words: Sequence[str]) -> list[int]:
    """Seeds from words that are a seed ("7") or an inclusive range ("3000-3199")."""
    seeds: list[int] = []
    for word in words:
        first, _, last = word.partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            raise ValueError(f"--seeds: {word!r} is not a seed or a range like 3000-3199")
        seeds.extend(range(int(first), int(last or first) + 1))
    return seeds


def by_kind_and_seed(
    function: Callable[..., Any],
    kinds: Sequence[str],
    seeds: Sequence[int],
    jobs: int,
    *constants: Any,
) -> dict[str, dict[int, Any]]:
    """``function(kind, seed, *constants)`` of every kind and seed, `jobs` at once (spawned
    processes): {kind: {seed: value}}."""
    pairs = [(kind, seed) for kind in kinds for seed in seeds]
    columns = [[constant] * len(pairs) for constant in constants]
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
        kind_column, seed_column = [k for k, _ in pairs], [s for _, s in pairs]
        values = pool.map(function, kind_column, seed_column, *columns, chunksize=4)
        read: dict[str, dict[int, Any]] = {kind: {} for kind in kinds}
        for (kind, seed), value in zip(pairs, values, strict=True):
            read[kind][seed] = value
    return read


def seeds_and_config(
    words: Sequence[str], out: Path | None, config: Path | None
) -> tuple[list[int], Any]:
    """The seeds of `words` (`parse_seeds`) and the `RunConfig` at `config` (the default's where
    None), every seed's env and contest; raises ValueError, one line, on a bad seed, a bad or
    missing config, or an `out` file that exists (an earlier run's figures are never
    overwritten)."""
    seeds = parse_seeds(words)
    if out is not None and out.exists():
        raise ValueError(f"{out} exists; pass another --out")
    from training.config import DEFAULT_CONFIG_PATH, ConfigError, load_config

    try:
        return seeds, load_config(config or DEFAULT_CONFIG_PATH)
    except (ConfigError, OSError) as error:
        raise ValueError(str(error)) from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(DEFAULT_KINDS))
    parser.add_argument("--seeds", nargs="+", default=["3000-3199"], help="seeds or ranges")
    parser.add_argument("--fresh-series", type=int, default=FRESH_SERIES)
    parser.add_argument("--draw", type=int, default=5, help="seeds a draw meets targets over")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", type=Path, help="also write the figures here as JSON")
    parser.add_argument(
        "--config", type=Path, help="the env and contest to read (configs/default.yaml)"
    )
    args = parser.parse_args(argv)
    try:
        seeds, cfg = seeds_and_config(args.seeds, args.out, args.config)
    except ValueError as error:
        print(f"benchmarks/statistician.py: {error}", file=sys.stderr)
        return 2
    figures = by_kind_and_seed(seed_figures, args.kinds, seeds, args.jobs, args.fresh_series, cfg)
    listed = seed_list([{"seed": seed} for seed in seeds])
    print(f"estimated ceiling on seeds {listed}, {args.fresh_series} fresh series each")
    print(
        f"kind, figure >= worst-seed target: seeds, median, worst, share below it, "
        f"chance {args.draw} random seeds all meet it, the seeds below"
    )
    report: dict[str, Any] = {"command": " ".join(sys.argv), "seeds": seeds, "kinds": {}}
    joint = {"alone": 1.0, "behind_prior": 1.0}
    for kind in args.kinds:
        target = TARGETS[kind]
        by_seed = figures[kind]
        prior = sorted(seed for seed, f in by_seed.items() if f.hold_is_prior)
        report["kinds"][kind] = {
            "figure": target.estimated,
            "threshold": target.worst,
            "hold_prior_seeds": prior,
        }
        for reading, label in (("alone", "alone"), ("behind_prior", "behind the hold prior")):
            values = {
                seed: f.statistician if reading == "alone" else f.behind_prior
                for seed, f in by_seed.items()
            }
            s = summarize(kind, values, args.draw)
            below = seed_list([{"seed": seed} for seed in s.missed])
            print(
                f"{kind} ({label}), {target.estimated} >= {target.worst:+.2f}: {s.seeds}, "
                f"{s.median:+.3f}, {s.worst:+.3f}, {s.missed_share:.1%}, {s.all_met:.2f}, {below}"
            )
            if s.seeds:
                joint[reading] *= s.all_met
            report["kinds"][kind][reading] = {
                "values": values,
                "missed": s.missed,
                "missed_share": s.missed_share,
                "all_met": s.all_met,
            }
        report["kinds"][kind]["holding_values"] = {seed: f.holding for seed, f in by_seed.items()}
        print(f"{kind}: holding is the prior on {len(prior)} of {len(by_seed)} seeds")
    print(
        f"chance {args.draw} random seeds of every kind all meet every worst-seed target: "
        f"the statistician alone {joint['alone']:.3f}, behind the hold prior "
        f"{joint['behind_prior']:.3f}"
    )
    report["draw"] = args.draw
    report["all_met_every_kind"] = joint
    if args.out is not None:
        from training.run.atomic import write_json_atomic

        write_json_atomic(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
