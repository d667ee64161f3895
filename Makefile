# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test check lint typecheck unit demo bench soak clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## check: lint, format and strict typing (cheapest gate first)
check: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

## test: the checks and the whole suite, with branch coverage
test: check
	CI=$${CI:-true} $(BIN)/python -m pytest --cov=ctrlrun --cov-report=term $(PYTEST_ARGS)

## unit: the suite without the checks (faster inner loop)
unit: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## demo: the library in action, offline, in under a second
demo: $(STAMP)
	$(BIN)/ctrlrun demo

## bench: floor and ctrlrun side by side, same run (not part of make test)
bench: $(STAMP)
	cd bench && ../$(BIN)/python sqlite_bench.py

## soak: contended protected calls with injected faults, then the history checker
##       (BACKEND=sqlite|postgres; postgres starts its own throwaway server; docs/soak.md)
DURATION ?= 30
BACKEND  ?= sqlite
soak: $(STAMP)
	cd bench/soak && ../../$(BIN)/python soak.py --backend $(BACKEND) --duration $(DURATION) $(SOAK_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .coverage build src/*.egg-info
