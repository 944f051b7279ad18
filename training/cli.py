"""What every command-line entry point shares: a user's mistake is one line and exit status 2."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence

from envs import DataError
from training.config import ConfigError

Main = Callable[[Sequence[str] | None], int]


def reports_user_errors(*extra: type[Exception]) -> Callable[[Main], Main]:
    """Decorate `main(argv) -> int`: config, data, file-not-found and `extra` errors print
    `error: <message>` on stderr, with no traceback, and return 2."""

    def decorate(main: Main) -> Main:
        @functools.wraps(main)
        def wrapped(argv: Sequence[str] | None = None) -> int:
            try:
                return main(argv)
            except (ConfigError, DataError, *extra) as error:
                print(f"error: {error}", file=sys.stderr)
            except FileNotFoundError as error:
                print(f"error: {error.filename or error}: file not found", file=sys.stderr)
            return 2

        return wrapped

    return decorate
