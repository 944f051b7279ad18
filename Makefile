# One Makefile for humans and CI. `make train` and `make test` each do the whole set-up.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv train test lint format bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[dev,bench]"
	touch $(STAMP)

venv: $(STAMP)

train: venv  ## train on the bundled data with configs/default.yaml, then backtest the test split
	$(PY) -m training.train

test: lint  ## lint + the whole test suite (what CI runs)
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 --durations=10  # one torch thread per worker: 2 workers on 2 cores; the ten slowest tests named, to watch the suite's time

lint: venv  ## ruff lint + format check, and mypy over agent/, envs/, training/ (pyproject.toml)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

format: venv
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

bench: venv
	$(PY) benchmarks/env_throughput.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
