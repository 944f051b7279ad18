"""Shared fixtures: the data folders, a CSV writer, the entry points, and one smoke run."""

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock

REPO = Path(__file__).resolve().parents[1]
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


def run_module(module: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """Run `python -m <module> args` from the repo root (torch on one thread), output captured."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ONE_THREAD,
    )


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory) -> Path:
    """A run folder trained with configs/smoke.yaml (window 16) on the bundled GOOGL file.

    Trained once per test session, also under pytest-xdist: the workers share one folder and
    the first one to take the lock trains (filelock comes with torch). Tests read it and write
    their outputs elsewhere (or into folders of their own below it).
    """
    base = tmp_path_factory.getbasetemp()  # under xdist, one per worker inside the session's
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    run = shared / "backtest-smoke-run"
    with FileLock(shared / "backtest-smoke-run.lock"):
        if not (run / "final_model.safetensors").is_file():
            train = ("--config", "configs/smoke.yaml", "--run-dir", str(run))
            result = run_module("training.train", *train)
            assert result.returncode == 0, result.stderr
    return run


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch on one thread for a module's tests (`pytestmark = usefixtures(...)`), as the
    benchmarks and a worker of the suite run it; the thread count is restored after."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The repository's bundled real data, `data/`."""
    return REPO / "data"


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """The four real files of `/work/shared/data` (or wherever `shared/` sits); skip without it."""
    path = REPO.parent / "shared" / "data"
    if not path.is_dir():
        pytest.skip(f"{path} is not here")
    return path


@pytest.fixture
def write_csv(tmp_path: Path) -> Callable[..., Path]:
    """Write text to a file in `tmp_path` and return its path: ``write_csv(text, name=...)``."""

    def write(text: str, name: str = "prices.csv") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
