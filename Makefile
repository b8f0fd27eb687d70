# Everything a fresh machine needs: `make demo` and `make test` set up .venv themselves.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
NVIM := $(VENV)/bin/nvim
STYLUA := node_modules/.bin/stylua
HEADLESS ?=
PYTEST_ARGS ?=

.PHONY: setup test lint format demo bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@# measure the host process too: coverage starts in any Python that sees COVERAGE_PROCESS_START
	echo 'import os; "COVERAGE_PROCESS_START" in os.environ and __import__("coverage").process_startup()' \
	  > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/sidekick_tools_coverage.pth"
	touch $@

$(STYLUA): package.json
	npm install --no-save --no-audit --no-fund --silent
	touch $@

lint: setup $(STYLUA)
	$(VENV)/bin/ruff check rplugin tests bench
	$(VENV)/bin/ruff format --check rplugin tests bench
	$(STYLUA) --check lua plugin tests bench

format: setup $(STYLUA)
	$(VENV)/bin/ruff check --fix rplugin tests bench
	$(VENV)/bin/ruff format rplugin tests bench
	$(STYLUA) lua plugin tests bench

test: setup lint
	rm -f .coverage .coverage.*
	COVERAGE_PROCESS_START=$(CURDIR)/pyproject.toml $(PY) -m pytest -q \
	  --cov=sidekick_tools --cov-report=term --cov-fail-under=80 $(PYTEST_ARGS)

demo: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" HEADLESS=$(HEADLESS) $(PY) examples/demo.py

bench: setup
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) bench/run.py

clean:
	rm -rf $(VENV) node_modules .coverage .coverage.* .pytest_cache .ruff_cache
