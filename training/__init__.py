"""Training: run configuration, the PPO entry point (`python -m training.train`), evaluation."""
