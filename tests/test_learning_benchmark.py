"""`benchmarks/learning.py` keeps earlier results: an --out that holds some is refused."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_an_out_folder_with_results_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    results = tmp_path / "learning.json"
    results.write_text('{"kept": true}\n')
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "learning.py"),
            "--quick",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"benchmarks/learning.py: {tmp_path} already holds results (learning.json); pass another "
        "--out (or --rescore it)"
    ]
    assert results.read_text() == '{"kept": true}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["learning.json"]
