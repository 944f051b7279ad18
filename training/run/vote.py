"""The vote a run ships under `train.vote`: where its contest keeps the incumbent, the vote of every
incumbent restart and the challenger, each at its best validation pass.

Several PPO trainings of one config on one series end in quite different places, and validation
picks among them little better than chance (benchmarks/RESULTS.md, sixty-first to sixty-fourth
rounds); a vote (`training.evaluation.vote`) keeps what most of them agree on instead of betting on
the one validation picked. It replaces only the incumbent: where the contest keeps the challenger
(the prior over collapsed incumbents, which a vote of those incumbents would outvote) or holding,
the run ships that as before. No validation score picks the vote, so no new choice is made on the
validation range.

`ship_vote`, called as the contest ends (`training.run.challenger.keep_better_contender`), writes
the members' model files, relative to the run's folder, to `<run>/vote.json`, or removes a
`vote.json` a contest held again no longer keeps. In that contest the incumbent competes as its
restart 1 (`training.run.challenger.ranked_folder`), whose model is the run's own best model, for
the commands that read one policy (`training.run.folder.load_model`); `load_trained` loads the
vote for the commands that trade what the run ships.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from training.config import RunConfig, TrainConfig, load_config
from training.evaluation.vote import Trained, Vote
from training.run.atomic import write_json_atomic
from training.run.folder import ModelError, RunDir, load_model, locate_model, vote_members

RULE = (
    "side: the one more than half of the members choose, else flat; leverage and risk: the "
    "median level of the members on that side (the lower middle one of an even count)"
)


def member_folders(run: RunDir) -> list[RunDir]:
    """The folders of `run`'s vote, in order: each incumbent restart's (`incumbent/restart_<n>`,
    by n), then the challenger's. A `ModelError` where the run trained no incumbent restarts or
    no challenger."""
    restarts = run.contender("incumbent").restarts()
    challenger = run.contender("challenger")
    if not restarts or not challenger.root.is_dir():
        raise ModelError(
            f"{run.root}: no incumbent restarts or no challenger to vote; train it with "
            "train.restarts >= 2 and train.challenger"
        )
    return [*restarts, challenger]


def member_models(run: RunDir) -> list[Path]:
    """The model file of each of `run`'s `member_folders`: its best model, else its final one."""
    return [locate_model(folder.root)[0] for folder in member_folders(run)]


def ship_vote(run: RunDir, rules: TrainConfig, kept: str) -> list[str] | None:
    """Where `rules.vote` is set and the contest kept the `incumbent` (`kept`), write `run`'s
    vote (its `member_models`, relative to `run`'s folder) to `run.vote` and return them; else
    remove any `run.vote` and return None."""
    if not (rules.vote and kept == "incumbent"):
        run.vote.unlink(missing_ok=True)
        return None
    members = [str(path.relative_to(run.root)) for path in member_models(run)]
    write_json_atomic(run.vote, {"members": members, "rule": RULE})
    return members


@dataclass(frozen=True)
class LoadedTrained:
    """What a run ships, loaded: one policy, or the vote of its members' policies."""

    trained: Trained  # each policy built from its run's config, CPU, evaluation mode
    config: RunConfig  # the run's (a vote's members share its env)
    path: Path  # the model file, or the run's vote.json
    run_dir: Path  # the folder holding the run's config.yaml


def load_trained(path: Path) -> LoadedTrained:
    """Load what a run ships (a run folder, or a model file: `load_model`): a run folder with a
    `vote.json` gives the vote of its members (each loaded by `load_model`), anything else the
    one policy `load_model` gives."""
    members = vote_members(path) if path.is_dir() else None
    if members is None:
        loaded = load_model(path)
        return LoadedTrained(loaded.policy, loaded.config, loaded.path, loaded.run_dir)
    policies = tuple(load_model(member).policy for member in members)
    return LoadedTrained(Vote(policies), load_config(RunDir(path).config), RunDir(path).vote, path)
