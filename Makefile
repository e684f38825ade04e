# Two commands do all the set-up: `make demo` and `make test`. Each creates .venv when missing.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
JOBS ?= 2

.PHONY: demo test bench zoo install clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/paddle-xla demo

test: $(STAMP)
	$(BIN)/python -m pytest tests -n $(JOBS) -p no:cacheprovider

bench: $(STAMP)
	$(BIN)/python benchmarks/inference.py

# Optional, never in CI: real models from Paddle's suites, installed --no-deps into .zoo/ (tools/zoo.py).
zoo: $(STAMP)
	$(BIN)/python tools/zoo.py

clean:
	rm -rf $(VENV) build *.egg-info
