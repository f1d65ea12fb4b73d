# Two commands set everything up on a fresh machine:
#   make run   - create .venv if missing, install, run the pipeline (dvc repro) on the embedded dataset
#   make test  - create .venv if missing, install, run the test suite
PYTHON ?= python3.11
export DVC_NO_ANALYTICS = 1
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.privhar-installed

.PHONY: run test bench install clean

install: $(STAMP)

# torch first, pinned: pip then takes this machine's local CPU wheel instead of a CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/privhar run

test: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest -q

# Timings on this machine (not tests): reports/bench/*.json
bench: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/privhar bench dprp

clean:
	rm -rf data/synthesize data/decode data/train reports/evaluate reports/train mlflow.db mlartifacts
