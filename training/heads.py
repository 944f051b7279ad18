"""Attention heads of a trained agent: importance, pruning and attention maps.

    python -m training.heads [importance] --model RUN_DIR --data CSV [--ticker T] [--out DIR]
        [--split train|validation|test|all] [--deterministic] [--seed 0]
        [--normalize auto|layer|none]
    python -m training.heads prune --model RUN_DIR --data CSV [--share 0.3]
        [--rank-by ppo_loss|direction|leverage|risk|value] [the importance options]
    python -m training.heads attention --model RUN_DIR --data CSV --date 2017-06-30 [--full]

`importance` (the default command) measures each head's importance ``E|dL/dxi_h|`` (Michel et
al. 2019; `training.attention.importance`) for the PPO loss, each decision head's log-probability
(`direction`, `leverage`, `risk`) and the value, over one pass of the policy through the
`--split` bars of the data (default `train`: the bars it learned on), actions sampled from the
policy (`--deterministic`: the most likely ones). Writes `importance.json` (raw and shown
scores) and `importance.png` (layer x head, one panel per target; per-layer l2-normalised as
Michel et al. when every layer has two or more heads, raw otherwise: `--normalize`).

`prune` ranks the heads by that importance (`--rank-by`, default the PPO loss), masks 0%, 10%,
..., 90% of them least important first and backtests each on the validation split: `pruning.json`
and `pruning.png`. It then saves the model with `--share` of the heads physically removed,
`pruned_model.safetensors`, with the run's `config.yaml` next to it (trunk.heads_per_layer set),
so `--model OUT/pruned_model.safetensors` works here and in `training.backtest`; it checks that
the pruned model's logits match the gated model's and its actions are identical.

`attention` draws, for the bar at `--date` (the last bar on or before it), each head's attention
weights over the window from the pooled position (`--full`: the whole T x T maps):
`attention_<date>.png` and `.json`.

`--model` is a run folder (its `best_model.safetensors`, else `final_model.safetensors`) or a
model file with its run's `config.yaml` next to it; the config builds the policy (the file holds
only its tensors) and gives the env settings and the splits. Outputs go to
`--out` (default `<run_dir>/heads`, or `heads-2`, `heads-3`, ... when the files a command
writes are there from an earlier run: none is replaced, and an `--out` holding them is
refused), each file written atomically. A user mistake (not one of
our model files, such as an SB3 zip; data that does not fit it; a bad date or share) prints one
line on stderr and exits with code 2.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Sequence
from pathlib import Path

from training.attention.commands import COMMANDS, RUNNERS, SPLITS, UsageError
from training.attention.importance import TARGETS
from training.attention.maps import DateError
from training.cli import add_model_and_data_arguments, output_folder, reports_user_errors
from training.evaluation.backtest import BacktestError
from training.run.folder import ModelError, load_model


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options; the command defaults to `importance`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        argv.insert(0, "importance")
    parser = argparse.ArgumentParser(
        prog="python -m training.heads",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    add_model_and_data_arguments(common)
    common.add_argument("--out", type=Path, help="output folder (default <run_dir>/heads)")
    scoring = argparse.ArgumentParser(add_help=False)
    scoring.add_argument(
        "--split",
        choices=SPLITS,
        default="train",
        help="bars of the pass that measures importance (default train)",
    )
    scoring.add_argument(
        "--deterministic",
        action="store_true",
        help="take the most likely actions instead of sampling them",
    )
    scoring.add_argument("--seed", type=int, default=0, help="seed of the sampled actions")
    scoring.add_argument(
        "--normalize",
        choices=("auto", "layer", "none"),
        default="auto",
        help="per-layer l2 normalisation (auto: when every layer has >= 2 heads)",
    )
    commands.add_parser("importance", parents=[common, scoring], help="head importance")
    prune = commands.add_parser("prune", parents=[common, scoring], help="pruning curve + model")
    prune.add_argument(
        "--share",
        type=float,
        default=0.3,
        help="share of the heads the saved pruned model drops (default 0.3)",
    )
    prune.add_argument(
        "--rank-by",
        choices=TARGETS,
        default="ppo_loss",
        help="importance that orders the heads (default ppo_loss)",
    )
    attention = commands.add_parser("attention", parents=[common], help="attention maps")
    attention.add_argument("--date", required=True, help="date of the window's last bar")
    attention.add_argument("--full", action="store_true", help="draw the full T x T maps")
    return parser.parse_args(argv)


@reports_user_errors(ModelError, BacktestError, DateError, UsageError)
def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; print where its files are. User mistakes exit 2 with one line."""
    args = parse_args(argv)
    loaded = load_model(args.model)
    folder_for = functools.partial(output_folder, args.out, loaded.run_dir / "heads")
    written = RUNNERS[args.command](loaded, args, folder_for)
    print("\n".join(["written:", *(f"  {path}" for path in written)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
