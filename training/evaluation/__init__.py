"""Evaluation of trained agents: backtests, fast inference, baselines, metrics, reports."""
