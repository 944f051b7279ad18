"""The sweep's own files in OUT: the plan, the status ledger, and the atomic writer they use.

Every file goes through the project's atomic writer (imported here, and only here), so a sweep
killed at any moment leaves each file whole. `OUT/status.json` records how each trial ended in
a session ({trial_id: {"status", "run_dir", "error"}}), so the summary can name failures and a
resumed sweep does not re-run a trial the scheduler stopped early.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from training.experiments.plan import Plan
from training.run.atomic import write_atomic, write_json_atomic

__all__ = ["read_status", "write_atomic", "write_json_atomic", "write_plan", "write_status"]


def write_plan(out: Path, plan: Plan) -> Path:
    """Write `OUT/plan.json`."""
    return write_json_atomic(out / "plan.json", plan.to_dict())


def read_status(out: Path) -> dict[str, dict[str, Any]]:
    """`OUT/status.json` ({} when there is none yet)."""
    try:
        return json.loads((out / "status.json").read_text())
    except FileNotFoundError:
        return {}


def write_status(out: Path, status: dict[str, dict[str, Any]]) -> Path:
    """Write `OUT/status.json`."""
    return write_json_atomic(out / "status.json", status)
