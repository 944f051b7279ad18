"""Ctrl-C that a library cannot swallow.

Python's SIGINT handler raises KeyboardInterrupt in whatever Python code runs at that moment.
When that code is a callback from C through ctypes (numba's compiler calls llvmlite's object
cache back that way while it compiles the first validation pass), ctypes prints the exception as
"ignored" and drops it, and training went on as if no key had been pressed (seen once in five
test-suite runs). Inside `remembered_ctrl_c` the handler also remembers the interrupt, and
`interrupt_pending` tells the training loop (`training.run.callbacks.InterruptCheck`) to raise it
again at the next step. Atomic writes (`training.run.atomic`) hold Ctrl-C back under this handler
as under Python's own.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

_received = threading.Event()


def remembering_handler(signum: int, frame: FrameType | None) -> None:
    """SIGINT handler: remember the interrupt, then raise KeyboardInterrupt as Python's does."""
    _received.set()
    raise KeyboardInterrupt


def interrupt_pending() -> bool:
    """Whether a Ctrl-C reached `remembering_handler` inside the current `remembered_ctrl_c`."""
    return _received.is_set()


@contextlib.contextmanager
def remembered_ctrl_c() -> Iterator[None]:
    """Inside, Ctrl-C is remembered as well as raised (`remembering_handler`); on leaving, the
    previous handler and a clear memory are put back.

    Only Python's default handler on the main thread is replaced: signal handlers can only be
    set there, and a program that installed its own handler keeps it.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    _received.clear()
    signal.signal(signal.SIGINT, remembering_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _received.clear()
