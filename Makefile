# Two commands do all the set-up (see README): `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo run test check lint bench system-deps

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/plangate

run: $(STAMP)
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
