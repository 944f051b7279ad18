"""Backtest a trained agent and the baselines through the same environment code as training.

    python -m training.backtest --model RUN_DIR_or_MODEL_FILE --data CSV [--ticker T] [--adjust]
                                [--start DATE] [--end DATE] [--out DIR]

Reads top to bottom: model + its config -> data -> env -> agent and baselines -> metrics -> files.
The library it calls is `training.evaluation.backtest`.

With a RUN_DIR the model is what the run ships: the vote its `vote.json` names (`train.vote`),
else its `best_model.safetensors` (else `final_model.safetensors`); a bare
model file needs the run's `config.yaml` next to it (or, for a checkpoint in `checkpoints/`, in
the run folder above). The config builds the policy (the file holds only its tensors) and gives
the env settings: window, levels, costs. `--start`/`--end` pick the bars to trade by
date (a date without a time includes that whole day); earlier bars still fill the first windows.

Outputs in `--out` (default `<run_dir>/backtest/<data-file-stem>[-ticker][-start-to-end]`, or
that name with `-2`, `-3`, ... when an earlier backtest is there: none is replaced, and an
`--out` holding one is refused), each written atomically once everything has been computed:
`metrics.json`, `equity.csv`, `trades.csv`, `report.png` and `next_order.json`
(`training.evaluation.backtest.write_report`). The metrics table and the next order are printed.
A user mistake (a file that is not one of our model files, such as an SB3 zip, whose pickled
objects are never loaded; data that does not fit it; a date range without enough bars) prints
one line on stderr and exits with code 2.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from envs.market_data import parse_time
from training.cli import add_model_and_data_arguments, output_folder, reports_user_errors
from training.evaluation.backtest import (
    REPORT_FILES,
    BacktestError,
    backtest,
    default_title,
    evaluation_env,
    format_comparison,
    format_next_order,
    in_sample,
    select_bars,
    write_report,
)
from training.run.data import load_run_market
from training.run.folder import ModelError, RunDir
from training.run.vote import load_trained


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        prog="python -m training.backtest", description=__doc__.splitlines()[0]
    )
    add_model_and_data_arguments(parser)
    parser.add_argument(
        "--adjust",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="split-adjust prices from Adj Close (default: as the model was trained, in a file "
        "that has an adjusted close)",
    )
    parser.add_argument("--start", help="first date to trade (earlier bars serve as history)")
    parser.add_argument("--end", help="last date to trade (a date includes its whole day)")
    parser.add_argument(
        "--out", type=Path, help="output folder (default <run_dir>/backtest/<data-stem>[-ticker])"
    )
    return parser.parse_args(argv)


def default_out(run_dir: Path, args: argparse.Namespace) -> Path:
    """`<run_dir>/backtest/<data-file-stem>[-ticker][-start-to-end]`: one folder in `run_dir`.

    Its dates are the parsed ones, formatted (``2017-06-30``, or ``2017-06-30T0800``, UTC, with a
    time of day), never the text given, and an unreadable one is a `BacktestError`. Characters
    of the stem and the ticker other than letters, digits, ``.``, ``_`` and ``-`` become ``_``.
    """
    name = args.data.stem + (f"-{args.ticker}" if args.ticker else "")
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip(".") or "data"
    if args.start or args.end:
        start, end = _folder_date("--start", args.start), _folder_date("--end", args.end)
        name += f"-{start or 'first'}-to-{end or 'last'}"
    return run_dir / "backtest" / name


def _folder_date(option: str, text: str | None) -> str | None:
    """The date of `option` as a folder name part, ``2017-06-30[T0800[05]]``; None if not given."""
    if not text:
        return None
    when = parse_time(text)
    if when is None:
        raise BacktestError(f"{option}: expected a date such as 2017-06-30, got {text!r}")
    if when == when.normalize():
        return when.strftime("%Y-%m-%d")
    return when.strftime("%Y-%m-%dT%H%M%S" if when.second else "%Y-%m-%dT%H%M")


@reports_user_errors(ModelError, BacktestError)
def main(argv: Sequence[str] | None = None) -> int:
    """Backtest; print the metrics table and where the report is. User mistakes exit 2."""
    args = parse_args(argv)
    loaded = load_trained(args.model)
    out = output_folder(args.out, default_out(loaded.run_dir, args), REPORT_FILES)
    cfg = loaded.config
    market = load_run_market(cfg, args.data, ticker=args.ticker, adjust=args.adjust)
    bars = select_bars(market, args.start, args.end)
    env = evaluation_env(market, cfg.env, bars)
    result = backtest(loaded.trained, env)
    title = f"{loaded.path.name} on {default_title(env)}"
    seen = in_sample(RunDir(loaded.run_dir), env)
    if seen is not None:
        title += f" [in-sample: {seen.count / seen.decisions:.0%} of decisions]"
    write_report(result, out, title)
    core = env.core
    print(f"{loaded.path} on {market!r}, decisions at bars {core.first_bar}..{core.end_bar - 1}")
    if seen is not None:
        print(seen.warning(), file=sys.stderr)
    print(format_comparison([result], result.metrics))
    print(f"\n{format_next_order(result)}")
    print(f"\nreport: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
