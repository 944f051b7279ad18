"""Atomic file writes: a temporary file in the same folder, then `os.replace`.

A run killed at any moment leaves either the old file or the new one, never half of one. Ctrl-C
during a write waits for the file to land: the KeyboardInterrupt is raised once it is in place
(torch's zip writer, interrupted halfway, fails with a RuntimeError instead of stopping cleanly).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from io import BufferedWriter
from pathlib import Path
from typing import Any

from training.run.interrupt import remembering_handler

_UMASK = os.umask(0)
os.umask(_UMASK)


def write_atomic(path: Path, write: Callable[[BufferedWriter], object]) -> Path:
    """Write `path` by calling `write(file)` on a temporary file, then renaming it into place.

    Ctrl-C in the meantime is held back until the file is in place (module doc).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with _ctrl_c_held_back():
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as file:
                write(file)
                file.flush()
                os.fsync(file.fileno())
            os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes files private (0600); honour the umask
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return path


@contextlib.contextmanager
def _ctrl_c_held_back() -> Iterator[None]:
    """Record SIGINT instead of raising it inside the block, then raise KeyboardInterrupt after.

    Only Python's default handler, or `remembering_handler`, on the main thread is replaced (and
    put back after): signal handlers can only be set there, and a program that installed its own
    handler keeps it.
    """
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous not in (
        signal.default_int_handler,
        remembering_handler,
    ):
        yield
        return
    received: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        if previous is remembering_handler:
            remembering_handler(signal.SIGINT, None)  # remembers it, then raises
        raise KeyboardInterrupt


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    """Write a file of `data` atomically."""
    return write_atomic(path, lambda file: file.write(data))


def write_text_atomic(path: Path, text: str) -> Path:
    """Write a text file atomically."""
    return write_bytes_atomic(path, text.encode())


def write_json_atomic(path: Path, data: Any) -> Path:
    """Write a JSON file atomically (NaN and inf written as null)."""
    text = json.dumps(json_safe(data), indent=2)
    return write_text_atomic(path, text + "\n")


def json_safe(value: Any) -> Any:
    """`value` with NaN and inf floats as None (JSON null): strict JSON any reader takes."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if hasattr(value, "item"):  # numpy scalars
        return json_safe(value.item())
    return value
