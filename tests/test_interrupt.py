"""Ctrl-C during training: remembered, so that one a library swallows still stops the run."""

import contextlib
import signal

import pytest

from training.run.atomic import write_atomic
from training.run.callbacks import InterruptCheck
from training.run.interrupt import interrupt_pending, remembered_ctrl_c, remembering_handler


@pytest.fixture
def python_ctrl_c():
    """Python's own Ctrl-C handler, as at a prompt (a shell's `&` job ignores SIGINT)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_swallowed_ctrl_c_stops_training_at_the_next_step(python_ctrl_c):
    check = InterruptCheck()
    with remembered_ctrl_c():
        assert signal.getsignal(signal.SIGINT) is remembering_handler
        assert check._on_step() is True  # nothing pressed: training goes on
        # What Ctrl-C sends, raised where ctypes drops exceptions (a callback from C):
        with contextlib.suppress(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        assert interrupt_pending()
        with pytest.raises(KeyboardInterrupt):
            check._on_step()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    assert not interrupt_pending()  # and forgotten


def test_a_write_under_the_training_handler_lands_then_interrupts(python_ctrl_c, tmp_path):
    path = tmp_path / "checkpoint.zip"

    def interrupted_halfway(file):
        file.write(b"first half, ")
        signal.raise_signal(signal.SIGINT)
        file.write(b"second half")

    with remembered_ctrl_c():
        with pytest.raises(KeyboardInterrupt):
            write_atomic(path, interrupted_halfway)
        assert signal.getsignal(signal.SIGINT) is remembering_handler  # put back
        assert interrupt_pending()  # remembered, should anything swallow this one too
    assert path.read_bytes() == b"first half, second half"


def test_a_handler_of_the_programs_own_is_kept():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with remembered_ctrl_c():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
