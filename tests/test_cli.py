"""`training.cli.reports_user_errors`: a reader that stops early, or Ctrl-C, ends the command
quietly."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from training.cli import BROKEN_PIPE_STATUS, INTERRUPTED_STATUS
from training.run.folder import RunDir

REPO = Path(__file__).resolve().parents[1]
PRINTS_A_LOT = """
from training.cli import reports_user_errors

@reports_user_errors()
def main(argv=None):
    for row in range(200_000):
        print(f"row {row}")
    return 0

raise SystemExit(main())
"""


def test_a_closed_pipe_ends_the_command_without_a_traceback():
    process = subprocess.Popen(
        [sys.executable, "-c", PRINTS_A_LOT],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline() == "row 0\n"
    process.stdout.close()  # as `| head -1` does once it has its line
    stderr = process.stderr.read()
    assert process.wait(timeout=60) == BROKEN_PIPE_STATUS
    assert stderr == ""


def test_ctrl_c_stops_training_with_a_resume_hint_and_no_traceback(tmp_path):
    run = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "training.train", "--config", "configs/smoke.yaml",
         "--run-dir", str(run), "--set", "train.total_timesteps=1000000"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},  # SIGABRT dumps every thread's stack
        # A shell that starts a job in the background (`make test &`) hands it SIGINT ignored, and
        # Python then raises no KeyboardInterrupt: the child gets the default back, as at a prompt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while RunDir(run).latest_checkpoint() is None and process.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)  # what Ctrl-C sends
    try:
        _, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # show where it hangs: faulthandler's dump on SIGABRT
        process.send_signal(signal.SIGABRT)
        try:
            _, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
        raise AssertionError(f"training did not stop within 60 s of SIGINT:\n{stderr}") from None
    assert process.returncode == INTERRUPTED_STATUS, stderr
    assert "Traceback" not in stderr
    assert f"continue with: python -m training.train --resume {run}" in stderr
    assert "newest checkpoint" in stderr


WARNS = """
import warnings
from training.cli import reports_user_errors

@reports_user_errors()
def main(argv=None):
    warnings.warn("data.adjust: no adjusted close in x.csv; used as they are", stacklevel=1)
    warnings.warn("old API", DeprecationWarning, stacklevel=1)
    return 0

default = warnings.formatwarning
status = main([])
assert warnings.formatwarning is default
raise SystemExit(status)
"""


def test_a_note_for_the_user_is_one_line_and_others_keep_their_format():
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", WARNS], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    err = done.stderr.splitlines()
    assert err[0] == "warning: data.adjust: no adjusted close in x.csv; used as they are"
    assert "DeprecationWarning: old API" in err[1]
