# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CORE   := $(VENV)/.core
DIST   ?= dist

.PHONY: test check lint typecheck unit demo dist bench soak fuzz clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# the package alone, as a user installs it: what the demo needs and nothing more
$(CORE): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e .
	touch $(CORE)

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

## demo: the library in action, offline, in under a second (installs the core package only)
demo: $(CORE)
	$(BIN)/ctrlrun demo

## dist: an sdist and a wheel in $(DIST)/, to install elsewhere with pip install <the .whl>
dist: $(BIN)/python
	$(BIN)/python -m pip install --quiet build
	rm -rf $(DIST)
	$(BIN)/python -m build --outdir $(DIST) .

## bench: floor and ctrlrun side by side, same run (not part of make test); SQLite, then
## Postgres (a throwaway embedded cluster, or CTRLRUN_BENCH_POSTGRES_URL), then async vs sync
## threads on both, then the Postgres scale curve on this machine (COUNTS=1,2,4 to choose the
## process counts) and the server's work per call; all always run
bench: $(STAMP)
	cd bench && status=0; ../$(BIN)/python sqlite_bench.py || status=1; \
	  ../$(BIN)/python postgres_bench.py $(BENCH_ARGS) || status=1; \
	  ../$(BIN)/python async_bench.py || status=1; \
	  ../$(BIN)/python scale_curve.py $(if $(COUNTS),--counts $(COUNTS)) || status=1; \
	  ../$(BIN)/python server_work.py || status=1; exit $$status

## soak: contended protected calls with injected faults, then the history checker
##       (BACKEND=sqlite|postgres; postgres starts its own throwaway server; docs/soak.md)
DURATION ?= 30
BACKEND  ?= sqlite
soak: $(STAMP)
	cd bench/soak && ../../$(BIN)/python soak.py --backend $(BACKEND) --duration $(DURATION) $(SOAK_ARGS)

## fuzz: the fuzz suite (tests/fuzz, docs/fuzzing.md) with a long, random example budget;
##       `make test` runs the same tests with a small, derandomized one (FUZZ_EXAMPLES per test)
FUZZ_EXAMPLES ?= 5000
fuzz: $(STAMP)
	CTRLRUN_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest tests/fuzz tests/unit/test_template_one_key.py -p no:cacheprovider --timeout 0 $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .coverage build dist src/*.egg-info
