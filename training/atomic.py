"""Atomic file writes: a temporary file in the same folder, then `os.replace`.

A run killed at any moment leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

_UMASK = os.umask(0)
os.umask(_UMASK)


def write_atomic(path: Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Write `path` by calling `write(file)` on a temporary file, then renaming it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
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


def write_text_atomic(path: Path, text: str) -> Path:
    """Write a text file atomically."""
    return write_atomic(path, lambda file: file.write(text.encode()))


def write_json_atomic(path: Path, data: Any) -> Path:
    """Write a JSON file atomically (NaN and inf written as null)."""
    text = json.dumps(_json_safe(data), indent=2)
    return write_text_atomic(path, text + "\n")


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if hasattr(value, "item"):  # numpy scalars
        return _json_safe(value.item())
    return value
