"""Shared fixtures: the bundled and the shared real data folders, and a CSV writer."""

from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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
