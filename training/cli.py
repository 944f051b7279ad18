"""What every command-line entry point shares: a user's mistake is one line and exit status 2.

Output piped into a reader that stops early (``| head``) ends the command quietly, with the
status a shell gives a process stopped by SIGPIPE (141), instead of a BrokenPipeError traceback;
Ctrl-C ends it with one line and the status of SIGINT (130). A note for the user (a
`UserWarning`, e.g. a file without an adjusted close) prints as one `warning: ...` line, without
the source line Python's default format adds.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

from envs import DataError
from training.config import ConfigError


class Main(Protocol):
    """An entry point's `main`: command-line arguments (None: `sys.argv[1:]`) -> exit status."""

    def __call__(self, argv: Sequence[str] | None = None) -> int:
        """Run the command; return its exit status."""
        ...


class OutputError(ValueError):
    """An output that would replace an earlier one (one line: where, what, what to do)."""


BROKEN_PIPE_STATUS = 141  # 128 + SIGPIPE, as a shell reports it
INTERRUPTED_STATUS = 130  # 128 + SIGINT


def reports_user_errors(*extra: type[Exception]) -> Callable[[Main], Main]:
    """Decorate `main(argv) -> int`: config, data, file-not-found and `extra` errors print
    `error: <message>` on stderr, with no traceback, and return 2; a closed stdout returns
    `BROKEN_PIPE_STATUS` and Ctrl-C `INTERRUPTED_STATUS` (module doc)."""

    user_errors: tuple[type[Exception], ...] = (ConfigError, DataError, OutputError, *extra)

    def decorate(main: Main) -> Main:
        @functools.wraps(main)
        def wrapped(argv: Sequence[str] | None = None) -> int:
            try:
                with one_line_user_warnings():
                    return main(argv)
            except user_errors as error:
                print(f"error: {error}", file=sys.stderr)
            except FileNotFoundError as error:
                print(f"error: {error.filename or error}: file not found", file=sys.stderr)
            except BrokenPipeError:
                # Python's documented recipe: point stdout at devnull so that flushing it at
                # exit does not raise again.
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                return BROKEN_PIPE_STATUS
            except KeyboardInterrupt:
                print("\ninterrupted", file=sys.stderr)
                return INTERRUPTED_STATUS
            return 2

        return wrapped

    return decorate


@contextlib.contextmanager
def one_line_user_warnings() -> Iterator[None]:
    """Inside, a plain `UserWarning` prints as `warning: <message>`; others as Python does."""
    default = warnings.formatwarning

    def format_warning(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        line: str | None = None,
    ) -> str:
        if category is UserWarning:
            return f"warning: {message}\n"
        return default(message, category, filename, lineno, line)

    warnings.formatwarning = format_warning
    try:
        yield
    finally:
        warnings.formatwarning = default


def add_model_and_data_arguments(parser: argparse.ArgumentParser) -> None:
    """`--model`, `--data` and `--ticker`: what every tool running a saved agent on a CSV takes."""
    parser.add_argument(
        "--model",
        type=Path,
        required=True,
        help="run folder (uses best_model.safetensors, else final_model.safetensors) or a model "
        "file next to its run's config.yaml",
    )
    parser.add_argument("--data", type=Path, required=True, help="OHLCV CSV")
    parser.add_argument("--ticker", help="ticker to select in a multi-ticker CSV")


def unused_in(folder: Path, names: Iterable[str]) -> Path:
    """`folder`, when it holds none of the files `names`; else an `OutputError` naming them.

    A command's outputs never replace an earlier command's: the user moves them, or passes
    another `--out`. Other files in `folder` do not matter.
    """
    found = _present(folder, names)
    if found:
        raise OutputError(
            f"{folder}: already holds {', '.join(found)} from an earlier run; pass another "
            "--out, or move them away"
        )
    return folder


def output_folder(given: Path | None, default: Path, names: Iterable[str]) -> Path:
    """Where a command writes the files `names`, never over an earlier output.

    `given` (the user's `--out`) must hold none of them (`unused_in`). Without it, the first of
    `default`, `default-2`, `default-3`, ... that holds none of them: running a command again
    keeps what it wrote before.
    """
    names = list(names)
    if given is not None:
        return unused_in(given, names)
    folder, count = default, 1
    while _present(folder, names):
        count += 1
        folder = default.with_name(f"{default.name}-{count}")
    return folder


def _present(folder: Path, names: Iterable[str]) -> list[str]:
    """Those of the files `names` that `folder` holds."""
    return [name for name in names if (folder / name).exists()]
