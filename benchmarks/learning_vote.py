"""`benchmarks/learning.py --vote OUT --from TRAINED`: what a vote of each run's trained policies
earns where a contest kept a trained policy, training nothing.

The vote (`training.evaluation.vote`) trades one account by what most of its members decide. Its
members are the policies a run under ``train.restarts: 2`` trains: the incumbent of each restart
(``incumbent/restart_<n>/``) and the challenger (``challenger/``), each at its best validation
pass. `OUT`'s report decides where the vote acts: each synthetic run of it whose contest kept the
incumbent or the challenger (or only those `--vote-kept` names) is scored again with the vote of
the members of the run of the same kind and seed in `TRAINED`'s report (which may be `OUT`
itself); a run that kept holding, or a contender not named, is copied as it is. So a contest
read exactly off trained runs (`--reselect`) can decide, and the runs it
was read off give the members. Each vote is scored as the benchmark scores a trained agent
(`learning_scoring`): on its own tail, where its record goes to ``<new_out>/<run>/equity.csv``,
and on the fresh series. The probes of the kept policy (`volatility_probe`, `direction_probe`)
describe no vote, so they are dropped from a voted result.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from learning_report import write_and_print
from learning_reselect import job_map
from learning_scoring import (
    held_by_state,
    score_on_fresh_series,
    synthetic_series,
    tail_figures,
)

VOTED = ("incumbent", "challenger")  # the contenders a vote replaces; holding is kept as it is
PROBE_PREFIXES = ("probe_",)  # the kept policy's probes (`learning_scoring`): no vote's


class VoteError(ValueError):
    """A report `--vote` cannot read (one line: what, and what to do)."""


def vote_members(run: Path) -> list[Path]:
    """The model files of run folder `run`'s vote (`training.run.vote.member_models`: each
    incumbent restart's best model, then the challenger's). Raises `VoteError` where the run
    trained no restarts or no challenger."""
    from training.run.folder import ModelError, RunDir
    from training.run.vote import member_models

    try:
        return member_models(RunDir(run))
    except ModelError as error:
        raise VoteError(str(error)) from None


def vote_read(
    out: Path,
    trained: Path,
    new_out: Path,
    jobs: int,
    n_fresh: int,
    kept: Sequence[str] = VOTED,
) -> int:
    """Score the vote of each run of ``<trained>/learning.json`` wherever the same kind and seed
    of ``<out>/learning.json`` kept one of the contenders `kept` (a trained policy; the module
    doc); write the results, every run of `out` in its order, to ``<new_out>/learning.json`` and
    print them."""
    if not set(kept) <= set(VOTED):
        raise VoteError(f"--vote-kept {' '.join(kept)}: a vote replaces only {' or '.join(VOTED)}")
    if new_out.exists():
        raise VoteError(f"--out {new_out}: already exists; pass a new folder")
    report = _read_report(out)
    sources = {(r["kind"], r["seed"]): Path(r["run"]) for r in _read_report(trained)["synthetic"]}
    results = report["synthetic"]
    voted = [r for r in results if r.get("contender_kept") in kept]
    missing = [f"{r['kind']} {r['seed']}" for r in voted if (r["kind"], r["seed"]) not in sources]
    if missing:
        raise VoteError(f"--from {trained}: no run of {', '.join(missing)}")
    for r in voted:
        vote_members(sources[r["kind"], r["seed"]])  # every run has members, before any work
    new_out.mkdir(parents=True)
    print(f"voting on {len(voted)} of {len(results)} runs of {out} with the members of {trained}")
    keys = [(r["kind"], r["seed"]) for r in voted]
    with contextlib.ExitStack() as workers:
        scores = job_map(workers, jobs)(
            _vote_result, voted, [sources[key] for key in keys], [new_out] * len(voted),
            [n_fresh] * len(voted),
        )  # fmt: skip
        scored = dict(zip(keys, scores, strict=True))
    report["synthetic"] = [
        scored[r["kind"], r["seed"]] if r.get("contender_kept") in kept else r for r in results
    ]
    report["real"] = []
    report["voted"] = " ".join(sys.argv)
    return write_and_print(report, new_out / "learning.json")


def _vote_result(
    result: dict[str, Any], source: Path, new_out: Path, n_fresh: int
) -> dict[str, Any]:
    """`result` with its tail and fresh-series figures those of the vote of `source`'s members."""
    import torch

    from training.evaluation.backtest import evaluation_env
    from training.evaluation.metrics import record_metrics
    from training.evaluation.vote import Vote, record_trained
    from training.run.folder import load_model
    from training.run.vote import LoadedTrained

    torch.set_num_threads(1)
    paths = vote_members(source)
    members = [load_model(path) for path in paths]
    loaded = LoadedTrained(
        Vote(tuple(m.policy for m in members)), members[0].config, source, source
    )
    kind, seed = result["kind"], result["seed"]
    series, split = synthetic_series(kind, seed)
    tail = split.splits[0].test
    env = evaluation_env(series.market, loaded.config.env, tail)
    record = record_trained(loaded.trained, env.core)[0]
    folder = new_out / source.name
    folder.mkdir()
    record.to_csv(folder / "equity.csv", index=False)
    agent = record_metrics(record, bars_per_year=env.core.bars_per_year)
    unprobed = {k: v for k, v in result.items() if not k.startswith(PROBE_PREFIXES)}
    fresh = score_on_fresh_series(kind, seed, loaded, n_fresh)
    return {
        **unprobed,
        "run": str(folder),
        "contender_kept": f"vote ({result['contender_kept']})",
        "vote_members": [str(p) for p in paths],
        **tail_figures(agent, result["growth_buy_and_hold"], result["growth_ceiling"]),
        **fresh,
        **held_by_state(folder / "equity.csv", series.state, tail),
    }


def _read_report(out: Path) -> dict[str, Any]:
    """``<out>/learning.json``; `VoteError` where there is none or it is not a report."""
    path = out / "learning.json"
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise VoteError(f"{path}: no learning benchmark report to read ({error})") from None
    if not isinstance(report, dict) or "synthetic" not in report:
        raise VoteError(f"{path}: not a learning benchmark report (no 'synthetic' results)")
    return report


def check_vote_args(out: Path, sources: Sequence[Path]) -> Path:
    """The one report `--from` names for `--vote OUT` (OUT itself when none); `VoteError` for
    more than one."""
    if len(sources) > 1:
        raise VoteError("--vote takes one --from report: the runs that hold the members")
    return sources[0] if sources else out
