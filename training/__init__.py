"""Training: the run config, the entry points (`python -m training.train|backtest|...`) and
the run machinery (`run/`), evaluation (`evaluation/`) and attention-head analysis
(`attention/`) they call."""
