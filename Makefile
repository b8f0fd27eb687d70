# Everything a fresh machine needs: `make demo` and `make test` set up .venv themselves.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STYLUA := node_modules/.bin/stylua
HEADLESS ?=
PYTEST_ARGS ?=
# pytest workers: the integration tests wait on editors and processes about a
# third of the time, so twice the cores keeps them busy (at most 8: each starts
# Neovims and hosts, and a container may show more cores than it may use)
WORKERS ?= $(shell n=$$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1); \
  echo $$(( 2 * n > 8 ? 8 : 2 * n )))
# folders to lint; $(wildcard) so a folder that does not exist yet is no error
PY_SRC := $(wildcard rplugin tests bench examples)
LUA_SRC := $(wildcard lua plugin tests bench examples)

.PHONY: setup test lint format demo bench clean

setup: $(VENV)/.installed $(VENV)/wheelhouse/.done

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@# measure the host process too: coverage starts in any Python that sees COVERAGE_PROCESS_START
	echo 'import os; "COVERAGE_PROCESS_START" in os.environ and __import__("coverage").process_startup()' \
	  > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/sidekick_tools_coverage.pth"
	touch $@

# the wheels :SidekickInstall's test installs from, with no index (tests stay on loopback)
$(VENV)/wheelhouse/.done: pyproject.toml tests/install_specs.py $(VENV)/.installed
	mkdir -p $(VENV)/wheelhouse
	$(PY) tests/install_specs.py > $(VENV)/wheelhouse/requirements.txt
	$(PY) -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
	  -d $(VENV)/wheelhouse -r $(VENV)/wheelhouse/requirements.txt
	touch $@

$(STYLUA): package.json
	npm install --no-save --no-audit --no-fund --silent
	touch $@

lint: setup $(STYLUA)
	$(VENV)/bin/ruff check $(PY_SRC)
	$(VENV)/bin/ruff format --check $(PY_SRC)
	$(STYLUA) --check $(LUA_SRC)

format: setup $(STYLUA)
	$(VENV)/bin/ruff check --fix $(PY_SRC)
	$(VENV)/bin/ruff format $(PY_SRC)
	$(STYLUA) $(LUA_SRC)

# integration tests run on every Neovim of tests/nvims.py; NVIM=0.11 (or 0.12-dev, or a path) picks one
# PYTHONDONTWRITEBYTECODE is cleared: each pytest worker collects the whole suite,
# and without cached bytecode each one compiles and rewrites every test module again.
# --maxschedchunk: xdist hands out tests two at a time; by default a worker's first
# share is a quarter of the suite in one block, and the workers given the blocks of
# integration tests ran on for minutes after the others had nothing left
SCHED := --maxschedchunk=2
test: setup lint
	rm -f .coverage .coverage.*
	PYTHONDONTWRITEBYTECODE= NVIM=$(NVIM) COVERAGE_PROCESS_START=$(CURDIR)/pyproject.toml $(PY) -m pytest -q -n $(WORKERS) $(SCHED) -m "not bench" \
	  --cov=sidekick_tools --cov-report=term --cov-fail-under=80 $(PYTEST_ARGS)

demo: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" HEADLESS=$(HEADLESS) $(PY) examples/demo.py

bench: setup
	$(PY) -m pip install -q -e '.[dev,bench]'
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q -p no:cacheprovider -m bench tests/test_bench_smoke.py
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) node_modules .coverage .coverage.* .pytest_cache .ruff_cache
