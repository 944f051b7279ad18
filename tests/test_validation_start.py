"""`train.eval_start`: validation passes (and so the model kept) begin only after a warm-up."""

import json

from training import train
from training.run.callbacks import due_after


def test_work_is_due_at_multiples_of_every_from_start_on():
    assert [due_after(t, 128) for t in (0, 127, 128, 300)] == [128, 128, 256, 384]
    assert [due_after(t, 128, 300) for t in (0, 127, 128, 384, 400)] == [384, 384, 384, 512, 512]
    assert due_after(0, 128, 256) == 256  # a start on a multiple is one


def test_no_validation_pass_runs_before_eval_start(tmp_path):
    run = tmp_path / "run"
    args = ["--config", "configs/smoke.yaml", "--run-dir", str(run)]
    overrides = ["--set", "train.total_timesteps=512", "--set", "train.eval_start=300"]
    assert train.main([*args, *overrides]) == 0  # eval_every 128: passes due at 128, 256, ...
    history = json.loads((run / "validation.json").read_text())
    assert [entry["timesteps"] for entry in history] == [384, 512]
