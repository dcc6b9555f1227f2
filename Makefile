# The front door. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TOPOLOGY ?= 2m-2s-sync

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  \033[1m%-18s\033[0m %s\n", $$1, $$2}'

venv: $(STAMP) ## create .venv with the pinned dependencies (every other target does this itself)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 or run 'make PYTHON=/path/to/python3.11 ...'" >&2; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "==> installing pinned dependencies into $(VENV) (first run downloads wheels)"
	@$(PY) -m pip install --quiet --upgrade pip
	@$(PY) -m pip install --quiet --progress-bar on -e '.[dev]'
	@touch $@

test: $(STAMP) ## run the whole test suite (unit, then integration)
	$(PY) -m pytest tests

test-unit: $(STAMP) ## fast tests only: no containers, no cluster
	$(PY) -m pytest tests/unit

.PHONY: help venv test test-unit
