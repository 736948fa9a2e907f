# threadline — entry points. `make run` and `make test` install what they need.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
export PATH := $(CURDIR)/.tools/bin:$(PATH)

.PHONY: help install install-python install-system run test test-fast bench bench-service bench-api lint lock image image-test chaos kind-test

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

$(VENV)/.installed: service/pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e 'service[test]'
	touch $@

install-python: $(VENV)/.installed  ## the Python package and test tools in .venv

install-system:  ## redis-server, PostgreSQL, podman/buildah/debootstrap, helm/kubectl
	scripts/install-system.sh
	scripts/install-tools.sh

install: install-python install-system  ## everything the tests need

run: install-python  ## serve on the embedded default (SQLite checkpoints, built-in model)
	scripts/run-dev.sh

test: install  ## the whole suite against real servers (kind suite skips without Docker)
	$(PY) -m pytest $(PYTEST_ARGS)

bench: install  ## checkpointer benchmark: per-turn cost vs the in-memory saver
	$(PY) scripts/bench_checkpointers.py

bench-service: install  ## service benchmark: turns/s and latency, redis vs redis-stack
	$(PY) scripts/bench_service.py

bench-api: install  ## LangGraph API benchmark: threadline vs langgraph dev (and Aegra), runs.wait
	$(PY) scripts/bench_api.py

lint: install-python  ## ruff
	$(VENV)/bin/ruff check service tests scripts examples
	$(VENV)/bin/ruff format --check service tests scripts examples

LOCK_OUT ?= requirements.lock
lock: install-python  ## re-pin service/requirements.lock (every runtime package, hashed) from pyproject
	cd service && $(CURDIR)/$(VENV)/bin/uv pip compile pyproject.toml --universal --python-version 3.11 \
	  --generate-hashes --custom-compile-command "make lock" -q -o $(LOCK_OUT)

image:  ## build the service image (docker when present, else podman)
	scripts/build-image.sh

image-test: install  ## build the image and smoke-test it (readyz, uid 10001, two turns)
	scripts/image-test.sh

chaos: install  ## long local chaos soaks: /v1 (≥ 2000 turns) and the LangGraph API via langgraph-sdk (≥ 2000 runs), ≥ 30 SIGKILLs each
	CHAOS_SOAK=1 $(PY) -m pytest tests/chaos -m chaos -s $(PYTEST_ARGS)

kind-test: install  ## kind cluster e2e: chart install, pod kills, continuity verdict
	$(PY) -m pytest tests/e2e -m e2e -s $(PYTEST_ARGS)
