# `make demo` and `make test` set everything up on a fresh machine, then run.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE  ?= ghcr.io/ganggate/ganggate:$(VERSION)

.PHONY: setup demo lint test bench image clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[sim,test]'
	touch $(STAMP)
	@echo "ganggate is installed in $(VENV)/bin: run '. $(VENV)/bin/activate' to put it on your PATH"

demo: setup
	$(BIN)/ganggate demo

# ruff (lint and import order) over the whole tree, mypy over ganggate/: the rules are in pyproject.toml.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy ganggate

test: setup lint
	$(BIN)/python -m pytest -q -rs -n 2 --dist loadfile

bench: setup
	@for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# The Dockerfile, built with whichever of docker, podman or buildah works here.
image:
	@scripts/build-image $(IMAGE) .

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis .mypy_cache .ruff_cache
