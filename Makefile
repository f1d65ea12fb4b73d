# Two commands set everything up on a fresh machine:
#   make run   - create .venv if missing, install, run the pipeline (dvc repro) on the embedded dataset
#   make test  - create .venv (and .venv-detector) if missing, install, run the test suite in each
# mediapipe (anonymize.source: detector) pins numpy<2 and protobuf<5, which flwr cannot share:
# it gets its own environment, .venv-detector, where the detector tests run.
PYTHON ?= python3.11
export DVC_NO_ANALYTICS = 1
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.privhar-installed
DETECTOR_VENV ?= .venv-detector
DETECTOR_STAMP := $(DETECTOR_VENV)/.privhar-installed

.PHONY: run test detector-test bench install clean

install: $(STAMP)

# torch first, pinned: pip then takes this machine's local CPU wheel instead of a CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

$(DETECTOR_STAMP): pyproject.toml
	test -x $(DETECTOR_VENV)/bin/python || $(PYTHON) -m venv $(DETECTOR_VENV)
	$(DETECTOR_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(DETECTOR_VENV)/bin/python -m pip install --quiet torch==2.13.0
	$(DETECTOR_VENV)/bin/python -m pip install --quiet -e '.[test,detector]'
	touch $(DETECTOR_STAMP)

run: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/privhar run

test: $(STAMP) detector-test
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest -q

detector-test: $(DETECTOR_STAMP)
	PATH="$(abspath $(DETECTOR_VENV)/bin):$$PATH" $(DETECTOR_VENV)/bin/python -m pytest -q tests/test_detector.py tests/test_anonymize.py

# Timings on this machine (not tests): reports/bench/*.json
bench: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/privhar bench dprp
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/privhar bench private

clean:
	rm -rf data/synthesize data/decode data/train reports/evaluate reports/train mlflow.db mlartifacts
