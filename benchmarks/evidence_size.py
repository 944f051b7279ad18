"""How often the contest's tests of the training bars pass, under each null, on each kind of series.

The contest (`training.run.challenger`) reads the training bars' momentum and persistence tests
(`training.run.evidence`) at levels from 0.1 down to 1e-4. A test's p-value means what its level
says only if, on bars with no structure (the learning benchmark's random walks, and its
turbulence series, whose volatility moves in regimes under one drift), it falls below each level
about that often: its size. On structured bars (the trend regimes) the share below each level is
its power. This script reads both tests on the training bars of every seed asked, no agent
trained, against the asymptotic null ("normal": the normal for the persistence test's z, the
chi-square for the momentum test's Wald statistic) and against the wild bootstrap ("wild":
`training.run.wild_bootstrap`), and prints, per kind, test and null, the share of seeds below
each level. The tests are read raw: no reversal level, the whole training range.

Usage:
    python benchmarks/evidence_size.py [--kinds random_walk turbulence_regimes trend_regimes]
        [--seeds 30000-30599] [--tests momentum persistence] [--config configs/default.yaml]
        [--jobs 2] [--out FILE]

The figures, with the machine, date and command, are in benchmarks/RESULTS.md (fifty-seventh
round: the persistence test; fifty-eighth: the momentum test).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from learning_report import seed_list
from learning_scoring import synthetic_series
from statistician import by_kind_and_seed, seeds_and_config

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

KINDS = ("random_walk", "turbulence_regimes", "trend_regimes", "mean_reversion", "crash_risk")
TESTS = ("momentum", "persistence")
NULLS = ("normal", "wild")
LEVELS = (0.1, 0.01, 1e-3, 1e-4)  # the levels the default's contest reads (configs/default.yaml)


def seed_evidence(kind: str, seed: int, cfg: Any, tests: Sequence[str]) -> dict[str, float | None]:
    """The p-values of `tests` on the training bars of series `seed` of `kind`, read as a run
    of `cfg` reads them (its env, the bars per year fixed from the training bars), under each
    null: {"<test>_<null>": p}, None where the test cannot be measured."""
    from training.run.data import RunData, with_bars_per_year
    from training.run.evidence import momentum_evidence, persistence_evidence

    series, split = synthetic_series(kind, seed)
    data = RunData((series.market,), split)
    run_cfg = with_bars_per_year(cfg, data)
    ranges = data.ranges("train", 1, run_cfg.env.window)
    read: dict[str, float | None] = {}
    for null in NULLS:
        if "momentum" in tests:
            train = replace(run_cfg.train, momentum_null=null)
            read[f"momentum_{null}"] = momentum_evidence(replace(run_cfg, train=train), ranges)
        if "persistence" in tests:
            horizon = max(run_cfg.env.momentum_horizons)
            read[f"persistence_{null}"] = persistence_evidence(ranges, horizon, null)
    return read


def shares(values: Sequence[float | None]) -> list[float]:
    """The share of the measured `values` below each of `LEVELS`."""
    measured = [v for v in values if v is not None]
    return [sum(v < level for v in measured) / max(len(measured), 1) for level in LEVELS]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS[:3]))
    parser.add_argument("--seeds", nargs="+", default=["30000-30599"], help="seeds or ranges")
    parser.add_argument("--tests", nargs="+", choices=TESTS, default=list(TESTS))
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", type=Path, help="also write every p-value here as JSON")
    parser.add_argument("--config", type=Path, help="the env read (configs/default.yaml)")
    args = parser.parse_args(argv)
    try:
        seeds, cfg = seeds_and_config(args.seeds, args.out, args.config)
    except ValueError as error:
        print(f"benchmarks/evidence_size.py: {error}", file=sys.stderr)
        return 2
    read = by_kind_and_seed(seed_evidence, args.kinds, seeds, args.jobs, cfg, tuple(args.tests))
    print(f"tests of the training bars on seeds {seed_list([{'seed': s} for s in seeds])}")
    print("kind, test, null: share of seeds below " + ", ".join(f"{lv:g}" for lv in LEVELS))
    report: dict[str, Any] = {"command": " ".join(sys.argv), "seeds": seeds, "kinds": {}}
    for kind in args.kinds:
        rows = [read[kind][seed] for seed in seeds]
        report["kinds"][kind] = {key: [r[key] for r in rows] for key in sorted(rows[0])}
        for key, values in report["kinds"][kind].items():
            test, null = key.rsplit("_", 1)
            below = ", ".join(f"{share:.2%}" for share in shares(values))
            print(f"{kind}, {test}, {null}: {below}")
    if args.out is not None:
        from training.run.atomic import write_json_atomic

        write_json_atomic(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
