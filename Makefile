# Two commands do all set-up on a fresh machine with Python 3.11, pip and make:
#   make demo   - virtualenv, install, run the offline demo on the embedded store
#   make test   - virtualenv, install with the dev extras, run the whole suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch first, pinned: it takes the CPU build on this machine's disk; an unpinned torch
# (pulled by sentence-transformers) would download a multi-GB CUDA build.
TORCH_PIN ?= torch==2.13.0

.PHONY: demo test lint notebooks venv install install-dev sdk-newest clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

venv: $(BIN)/python

install: venv
	$(BIN)/pip install --quiet -e .

install-dev: venv
	$(BIN)/pip install --quiet "$(TORCH_PIN)"
	$(BIN)/pip install --quiet -e ".[dev,local,openvino,chroma]" "$(TORCH_PIN)"

demo: install
	$(BIN)/agentic-retrieval demo

# the newest azure-search-documents beside the pinned one, for tests/integration/test_sdk_versions.py
sdk-newest: install-dev
	$(BIN)/python -m tests.newest_sdk

test: install-dev sdk-newest
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -p no:cacheprovider

# execute every notebook and save its outputs (tests/test_notebooks.py checks they match); a
# cell that shows the same text keeps its committed outputs (timings, addresses, a latency
# chart vary run to run), so re-running gives no diff; FORCE=1 saves every output anew
notebooks: install-dev
	$(BIN)/python tests/test_notebooks.py --write $(if $(FORCE),--force)

lint: venv
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
