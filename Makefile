# Two commands do all the set-up (see README): `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
BASE := $(VENV)/.base
STAMP := $(VENV)/.installed

.PHONY: demo run test check lint bench system-deps

# plangate and what it needs to run: all the demo installs (pip shows its progress).
$(BASE): pyproject.toml
	@echo "make: setting up $(VENV) with plangate and its dependencies (about a minute, once)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install --progress-bar on -e .
	touch $(BASE)

# The test and lint tools on top.
$(STAMP): $(BASE) pyproject.toml
	@echo "make: installing the test tools"
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(BASE)
	$(BIN)/plangate

run: $(BASE)
	$(BIN)/plangate run

# The sandbox tests need bubblewrap, git and util-linux: installed here when missing (as root).
system-deps:
	@sh deploy/system-deps.sh

test: $(STAMP) system-deps
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

check: lint test

bench: $(STAMP)
	$(BIN)/python -m bench.eventlog
