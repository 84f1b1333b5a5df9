# replay-workbench: `make quickstart` and `make test` each set up everything on a fresh machine.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pip's notes about the machine's local package mirrors are noise here
QUIET_PIP := { grep -v "^WARNING: Location" || true; }

.PHONY: setup quickstart train test test-fast clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements-cpu.txt
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements-cpu.txt 2>&1 | $(QUIET_PIP)
	$(BIN)/pip install -q --no-deps -e . 2>&1 | $(QUIET_PIP)
	$(BIN)/python -c "import torch, transformers, mlflow, optuna, workbench; print('set-up ok: torch', torch.__version__)"
	touch $(STAMP)

quickstart: setup
	$(BIN)/workbench study run studies/quickstart.yaml --workers 2

train: setup
	$(BIN)/workbench train

test: setup
	$(BIN)/python -m pytest -q

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis mlflow.db
