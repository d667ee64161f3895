# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test check lint typecheck unit demo bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## check: lint, format and strict typing (cheapest gate first)
check: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
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

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .coverage build src/*.egg-info
