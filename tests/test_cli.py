"""`training.cli.reports_user_errors`: a reader that stops early ends the command quietly."""

import subprocess
import sys
from pathlib import Path

from training.cli import BROKEN_PIPE_STATUS

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
