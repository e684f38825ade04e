# Two commands do all the set-up: `make demo` and `make test`. Each creates .venv when missing.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
JOBS ?= 2

.PHONY: demo test lint bench zoo install clean mutate fuzz

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/paddle-xla demo

# NOTE: tests/generation compares with PaddleFormers' own generate code, brought into the venv the way a
# user does it: `paddle-xla install paddleformers` (a pinned list, pip --no-deps, so JAX keeps numpy 2).
PF_STAMP := $(VENV)/.paddleformers
$(PF_STAMP): paddle_xla/cli/install.py $(STAMP)
	$(BIN)/paddle-xla install paddleformers
	@touch $(PF_STAMP)

# ruff (lint + format) over the whole repository and mypy over paddle_xla (pyproject.toml configures both).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint $(STAMP) $(PF_STAMP)
	$(MAKE) --no-print-directory docs-build
	$(BIN)/python -m pytest tests -n $(JOBS) --dist worksteal -p no:cacheprovider --durations=30

# The docs site (mkdocs.yml, docs/): `make docs` serves it at http://127.0.0.1:8001 (8000 is the docs examples' server port) and rebuilds on each edit;
# `make docs-build` builds it into site/, where any warning (a broken link, a missing page) fails it.
# The pages' code runs as tests in tests/test_docs.py.
.PHONY: docs docs-build
docs: $(STAMP)
	$(BIN)/mkdocs serve -a 127.0.0.1:8001

docs-build: $(STAMP)
	$(BIN)/mkdocs build --strict -d site

# A long differential sweep against Paddle eager (tests/fuzz), freshly seeded each run; CI runs a short,
# derandomized one in `make test`. FUZZ_EXAMPLES is per op; each failure prints a reproducer.
FUZZ_EXAMPLES ?= 50
fuzz: $(STAMP)
	PADDLE_XLA_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest tests/fuzz -n $(JOBS) -p no:cacheprovider -q

bench: $(STAMP)
	$(BIN)/python benchmarks/inference.py

# Optional, never in CI: real models from Paddle's suites, brought in by `paddle-xla install` (tools/zoo.py).
zoo: $(STAMP)
	$(BIN)/python tools/zoo.py

# Mutation testing of the files a change touches (never in CI): make mutate [FILES="a.py b.py"] [BASE=main~3]
mutate: $(STAMP)
	$(BIN)/python -m pip install --quiet 'cosmic-ray>=8.4,<9'
	BASE=$(or $(BASE),HEAD~1) $(BIN)/python tools/mutate.py $(FILES)

clean:
	rm -rf $(VENV) build site *.egg-info
