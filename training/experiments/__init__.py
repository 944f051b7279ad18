"""Experiments: many ordinary training runs (seeds x configs) and one summary of them.

`python -m training.sweep` is the entry point. `space` parses and samples a search space,
`plan` fixes the trials (configs x seeds, ids, run folders) before anything runs, `trials`
runs them as `python -m training.train` subprocesses under Ray Tune, and `summary` reads the
finished run folders into `summary.csv`, `summary.json` and `summary.png`.
"""
