# The two commands a new user runs after `git clone`: `make demo` and `make test`.
# Each creates .venv (if missing or stale), installs lakebraid into it, then runs.
SHELL := /bin/bash
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
	&& { command -v $$p; break; }; done)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.lakebraid-installed
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYTHONHASHSEED ?= 0

.PHONY: venv demo demo-s3 test lint bench clean-venv

$(STAMP): pyproject.toml
	@test -n "$(PYTHON)" || { echo "lakebraid needs Python 3.11 or newer on PATH"; exit 1; }
	@command -v java >/dev/null 2>&1 || { echo "lakebraid needs Java 17+ (java on PATH) for Spark"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m lakebraid.writers.cli.demo $(ARGS)

demo-s3: $(STAMP)
	$(BIN)/python -m lakebraid.writers.cli.demo --s3 $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadgroup

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,bench]'
	$(BIN)/python benchmarks/run_all.py

clean-venv:
	rm -rf $(VENV)
