"""`training.run.atomic`: files land whole or not at all, Ctrl-C included."""

import os
import signal

import pytest

from training.run.atomic import write_atomic, write_json_atomic


def test_a_write_replaces_the_file_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "deep" / "report.json"
    write_json_atomic(path, {"sharpe": float("nan"), "bars": 3})
    write_json_atomic(path, {"sharpe": 1.5, "bars": 4})
    assert path.read_text() == '{\n  "sharpe": 1.5,\n  "bars": 4\n}\n'
    assert [p.name for p in path.parent.iterdir()] == ["report.json"]


def test_a_failing_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "model.zip"
    path.write_bytes(b"old")

    def fail_halfway(file):
        file.write(b"ne")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, fail_halfway)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["model.zip"]


def test_ctrl_c_during_a_write_lets_the_file_land_then_interrupts(tmp_path):
    path = tmp_path / "checkpoint.zip"
    written = []

    def interrupted_halfway(file):
        file.write(b"first half, ")
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends, in the middle of the write
        file.write(b"second half")
        written.append(True)

    # Python's own Ctrl-C handler, as at a prompt (a job a shell starts with `&` ignores SIGINT)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            write_atomic(path, interrupted_halfway)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    finally:
        signal.signal(signal.SIGINT, previous)
    assert written
    assert path.read_bytes() == b"first half, second half"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.zip"]
